# The peer of `training_step_bench --model gpt:...`: one training step of the same GPT-2-shaped
# transformer in PyTorch (Hugging Face's GPT2LMHeadModel: tied LM head, gelu_new, LayerNorm eps
# 1e-5, no dropout), the same batch of token windows, AdamW (lr 1e-4, weight decay 0.01), grad
# clip 1.0; the median step time over the steps after the first two, as one JSON line.
#   --model-code hf (default): Hugging Face's GPT2LMHeadModel; plain: the same architecture
#   written here in plain torch.nn (for a machine without transformers: Debian's PyTorch), with
#   PyTorch's own scaled_dot_product_attention where it has one (2.0 and later).
#   --device cpu: plain PyTorch on the CPU in fp32, on --threads threads (default: the cores this
#   process may run on; PyTorch's own default can be fewer, one on some VMs). Its GEMMs are
#   whatever BLAS PyTorch was built with: Debian's build calls the system libblas.so.3, which is
#   netlib's reference BLAS unless an optimized one (apt-get install libopenblas0-pthread) is
#   installed; the JSON line says which.
#   --device cuda --peer fsdp2 (default): FSDP2 (fully_shard per block and at the root) on one GPU,
#   bf16 parameters in compute, fp32 gradient reduction and master weights, fused AdamW. Run under
#   torchrun.
#   --device cuda --peer eager-bf16: plain PyTorch, bf16 parameters, fused AdamW; autocast: fp32
#   parameters under bf16 autocast, fused AdamW; autocast-compile: the same with torch.compile.
#   (Attention is the model's own: SDPA in Hugging Face's GPT-2 of transformers 4.4x and later.)
import argparse, contextlib, json, os, statistics, time

parser = argparse.ArgumentParser()
parser.add_argument("--model", required=True, help="gpt:layers=L,embd=E,heads=H,vocab=V,block=B")
parser.add_argument("--batch", type=int, required=True, help="sequences per step")
parser.add_argument("--sequence-length", type=int, required=True)
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--device", choices=["cpu", "cuda"], required=True)
parser.add_argument("--model-code", choices=["hf", "plain"], default="hf")
parser.add_argument("--peer", choices=["fsdp2", "eager-bf16", "autocast", "autocast-compile"], default="fsdp2",
                    help="on the GPU: FSDP2, or plain PyTorch on one GPU in one of three ways")
parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                    help="PyTorch's CPU threads (default: the cores this process may run on)")
args = parser.parse_args()
if args.threads < 1:
    raise SystemExit(f"--threads {args.threads}: must be at least 1")
# OpenBLAS (Debian's PyTorch calls it through libblas.so.3) sizes its own pool from these when it
# loads and ignores torch.set_num_threads: without them it takes every core whatever --threads
# says. The GPU peers keep what their launcher set (torchrun sets OMP_NUM_THREADS=1).
if args.device == "cpu":
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = str(args.threads)
import torch  # after the thread variables, which the BLAS reads when it loads

torch.set_num_threads(args.threads)
if not args.model.startswith("gpt:"):
    raise SystemExit("--model: expected gpt:layers=L,embd=E,heads=H,vocab=V,block=B, found " + args.model)
shape = dict(item.split("=") for item in args.model[4:].split(","))
if set(shape) != {"layers", "embd", "heads", "vocab", "block"}:
    raise SystemExit("--model: expected the keys layers, embd, heads, vocab, block, found " + ",".join(shape))
shape = {key: int(value) for key, value in shape.items()}
if not 1 <= args.sequence_length <= shape["block"]:
    raise SystemExit(f"--sequence-length {args.sequence_length}: must be in 1..block {shape['block']}")



class PlainBlock(torch.nn.Module):
    def __init__(self, embd, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = torch.nn.LayerNorm(embd, eps=1e-5)
        self.c_attn = torch.nn.Linear(embd, 3 * embd)
        self.c_proj = torch.nn.Linear(embd, embd)
        self.ln_2 = torch.nn.LayerNorm(embd, eps=1e-5)
        self.c_fc = torch.nn.Linear(embd, 4 * embd)
        self.c_fc_proj = torch.nn.Linear(4 * embd, embd)

    def forward(self, x):
        batch, length, embd = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(embd, dim=2)
        q, k, v = (t.view(batch, length, self.heads, embd // self.heads).transpose(1, 2) for t in (q, k, v))
        if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) / (k.shape[-1] ** 0.5)
            mask = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
            y = scores.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v
        x = x + self.c_proj(y.transpose(1, 2).reshape(batch, length, embd))
        return x + self.c_fc_proj(gelu_new(self.c_fc(self.ln_2(x))))


def gelu_new(x):
    """Hugging Face's gelu_new (the tanh approximation), as the hf model computes it."""
    return 0.5 * x * (1.0 + torch.tanh((2.0 / torch.pi) ** 0.5 * (x + 0.044715 * x.pow(3))))


class PlainGPT(torch.nn.Module):
    """GPT-2 (tied LM head, pre-LayerNorm blocks, gelu_new, no dropout) in plain torch.nn."""

    def __init__(self, vocab, block, embd, layers, heads):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, embd)
        self.wpe = torch.nn.Embedding(block, embd)
        self.h = torch.nn.ModuleList(PlainBlock(embd, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(embd, eps=1e-5)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


torch.manual_seed(1234)
fsdp = args.device == "cuda" and args.peer == "fsdp2"
plain_gpu = args.device == "cuda" and not fsdp
if args.device == "cpu" and args.peer != "fsdp2":
    raise SystemExit(f"--peer {args.peer}: the plain-PyTorch GPU peers need --device cuda")
if fsdp:
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
if args.model_code == "hf":
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=shape["vocab"], n_positions=shape["block"], n_embd=shape["embd"],
                        n_layer=shape["layers"], n_head=shape["heads"], activation_function="gelu_new",
                        layer_norm_epsilon=1e-5, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        tie_word_embeddings=True)
    model = GPT2LMHeadModel(config).to(args.device)
    blocks = model.transformer.h
else:
    model = PlainGPT(shape["vocab"], shape["block"], shape["embd"], shape["layers"], shape["heads"]).to(args.device)
    blocks = model.h
if args.peer == "eager-bf16" and plain_gpu:
    model = model.to(torch.bfloat16)
forward = torch.compile(model) if args.peer == "autocast-compile" else model
if fsdp:
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
# fused AdamW on the GPU; the CPU's default (PyTorch before 2.0 has no fused argument).
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01,
                              **({"fused": True} if args.device == "cuda" else {}))
autocast = args.peer.startswith("autocast")
generator = torch.Generator(device=args.device).manual_seed(1234)
tokens = torch.randint(0, shape["vocab"], (args.batch, args.sequence_length + 1), device=args.device, generator=generator)
inputs, targets = tokens[:, :-1], tokens[:, 1:]
times = []
for step in range(args.steps):
    if args.device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
        logits = forward(input_ids=inputs).logits if args.model_code == "hf" else forward(inputs)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, shape["vocab"]).float(), targets.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if args.device == "cuda":
        torch.cuda.synchronize()
    times.append((time.perf_counter() - start) * 1e3)
median = statistics.median(times[2:])


def blas_library():
    """The BLAS the process has mapped (PyTorch's build info names only the kind, "generic" for
    Debian's, which resolves at load time through the system's libblas.so.3)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "blas" in line.lower() or "mkl" in line.lower()}
    except OSError:
        return "unknown"
    return ",".join(sorted(os.path.realpath(p) for p in paths if p.startswith("/"))) or "built in"


engine = "torch-fsdp2" if fsdp else f"torch-{args.peer}" if plain_gpu else "torch-cpu"
print(json.dumps({"engine": engine, "torch": torch.__version__, "model": args.model,
                  "model_code": args.model_code,
                  "parameters": sum(p.numel() for p in model.parameters()), "device": args.device,
                  "threads": torch.get_num_threads(), "blas": blas_library(), "global_batch": args.batch,
                  "sequence_length": args.sequence_length, "precision": "bf16" if args.device == "cuda" else "fp32",
                  "step_ms_median": round(median, 3), "tokens_per_s": round(args.batch * args.sequence_length / (median / 1e3), 1)}))
if fsdp:
    dist.destroy_process_group()

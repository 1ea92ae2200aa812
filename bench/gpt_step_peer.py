# The peer of `training_step_bench --model gpt:...`: one training step of the same GPT-2-shaped
# transformer in PyTorch (Hugging Face's GPT2LMHeadModel: tied LM head, gelu_new, LayerNorm eps
# 1e-5, no dropout), the same batch of token windows, AdamW (lr 1e-4, weight decay 0.01), grad
# clip 1.0; the median step time over the steps after the first two, as one JSON line.
#   --device cpu: plain PyTorch on the CPU in fp32 (all the host's threads);
#   --device cuda: FSDP2 (fully_shard per block and at the root) on one GPU, bf16 parameters in
#   compute, fp32 gradient reduction and master weights, fused AdamW. Run under torchrun.
import argparse, json, os, statistics, time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--model", required=True, help="gpt:layers=L,embd=E,heads=H,vocab=V,block=B")
parser.add_argument("--batch", type=int, required=True, help="sequences per step")
parser.add_argument("--sequence-length", type=int, required=True)
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--device", choices=["cpu", "cuda"], required=True)
args = parser.parse_args()
if not args.model.startswith("gpt:"):
    raise SystemExit("--model: expected gpt:layers=L,embd=E,heads=H,vocab=V,block=B, found " + args.model)
shape = dict(item.split("=") for item in args.model[4:].split(","))
if set(shape) != {"layers", "embd", "heads", "vocab", "block"}:
    raise SystemExit("--model: expected the keys layers, embd, heads, vocab, block, found " + ",".join(shape))
shape = {key: int(value) for key, value in shape.items()}
if not 1 <= args.sequence_length <= shape["block"]:
    raise SystemExit(f"--sequence-length {args.sequence_length}: must be in 1..block {shape['block']}")

from transformers import GPT2Config, GPT2LMHeadModel

config = GPT2Config(vocab_size=shape["vocab"], n_positions=shape["block"], n_embd=shape["embd"], n_layer=shape["layers"],
                    n_head=shape["heads"], activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
                    embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True)
torch.manual_seed(1234)
fsdp = args.device == "cuda"
if fsdp:
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
model = GPT2LMHeadModel(config).to(args.device)
if fsdp:
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.transformer.h:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=fsdp)
generator = torch.Generator(device=args.device).manual_seed(1234)
tokens = torch.randint(0, shape["vocab"], (args.batch, args.sequence_length + 1), device=args.device, generator=generator)
inputs, targets = tokens[:, :-1], tokens[:, 1:]
times = []
for step in range(args.steps):
    if fsdp:
        torch.cuda.synchronize()
    start = time.perf_counter()
    logits = model(input_ids=inputs).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, shape["vocab"]).float(), targets.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if fsdp:
        torch.cuda.synchronize()
    times.append((time.perf_counter() - start) * 1e3)
median = statistics.median(times[2:])
print(json.dumps({"engine": "torch-fsdp2" if fsdp else "torch-cpu", "torch": torch.__version__, "model": args.model,
                  "parameters": sum(p.numel() for p in model.parameters()), "device": args.device,
                  "threads": torch.get_num_threads(), "global_batch": args.batch,
                  "sequence_length": args.sequence_length, "precision": "bf16" if fsdp else "fp32",
                  "step_ms_median": round(median, 3), "tokens_per_s": round(args.batch * args.sequence_length / (median / 1e3), 1)}))
if fsdp:
    dist.destroy_process_group()

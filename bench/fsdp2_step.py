# The peer of bench/training_step_bench.cpp: one training step of the same MLP (Linear -> ReLU
# -> ... -> Linear, softmax cross-entropy) under PyTorch FSDP2 (fully_shard per Linear and at
# the root), 16-bit parameters in compute with fp32 gradient reduction and fp32 master weights,
# fused AdamW, the same per-rank micro-batch; the median step time over the steps after the
# first two, as JSON from rank 0. Run with torchrun --nproc_per_node W.
import argparse, json, os, statistics, time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="1024,4096,4096,1024")
parser.add_argument("--micro-batch", type=int, default=64)
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--precision", default="bf16", choices=["fp32", "fp16", "bf16"])
args = parser.parse_args()

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
widths = [int(w) for w in args.model.split(",")]
layers = []
for i in range(len(widths) - 1):
    layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
    if i + 2 < len(widths):
        layers.append(torch.nn.ReLU())
model = torch.nn.Sequential(*layers).cuda()
dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[args.precision]
policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mp_policy=policy)
fully_shard(model, mp_policy=policy)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
generator = torch.Generator(device="cuda").manual_seed(1234 + rank)
inputs = torch.randn(args.micro_batch, widths[0], device="cuda", generator=generator)
labels = torch.randint(0, widths[-1], (args.micro_batch,), device="cuda", generator=generator)
times = []
for step in range(args.steps):
    torch.cuda.synchronize(); dist.barrier()
    start = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(model(inputs), labels)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    times.append((time.perf_counter() - start) * 1e3)
if rank == 0:
    median = statistics.median(times[2:])
    print(json.dumps({"engine": "torch-fsdp2", "torch": torch.__version__, "world_size": world, "model": args.model,
                      "parameters": sum(p.numel() for p in model.parameters()) * 1,
                      "precision": args.precision, "global_batch": args.micro_batch * world,
                      "step_ms_median": round(median, 3), "samples_per_s": round(args.micro_batch * world / (median / 1e3), 1)}))
dist.destroy_process_group()

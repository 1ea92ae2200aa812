# The peer of product_bench: torch.mm on the same GPT-2 step's product shapes, layouts and
# threads (an operand product_bench reads as a transpose in place is a .t() view here, which
# PyTorch hands to its BLAS as a transposed operand, also without a copy). Prints one JSON line
# a shape and one for the step, as product_bench does.
#   python3 bench/product_peer.py [--tokens N] [--embd E] [--vocab V] [--layers L] [--threads T] [--repeat R]
import argparse
import json
import os
import time

parser = argparse.ArgumentParser()
for flag, default in (("tokens", 1024), ("embd", 768), ("vocab", 50257), ("layers", 12), ("threads", 1), ("repeat", 3)):
    parser.add_argument(f"--{flag}", type=int, default=default)
args = parser.parse_args()
for flag in ("tokens", "embd", "vocab", "layers", "threads", "repeat"):
    if getattr(args, flag) <= 0:
        raise SystemExit(f"--{flag} {getattr(args, flag)}: must be positive")
# OpenBLAS sizes its pool from these when it loads and ignores torch.set_num_threads.
for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[variable] = str(args.threads)
import torch  # after the thread variables

torch.set_num_threads(args.threads)
t, e, v, layers = args.tokens, args.embd, args.vocab, args.layers
shapes = [
    ("qkv forward", t, e, 3 * e, False, False, layers),
    ("attention projection forward", t, e, e, False, False, layers),
    ("MLP up forward", t, e, 4 * e, False, False, layers),
    ("MLP down forward", t, 4 * e, e, False, False, layers),
    ("head forward (wte^T in place)", t, e, v, False, True, 1),
    ("qkv weight gradient (in^T in place)", e, t, 3 * e, True, False, layers),
    ("attention projection weight gradient", e, t, e, True, False, layers),
    ("MLP up weight gradient", e, t, 4 * e, True, False, layers),
    ("MLP down weight gradient", 4 * e, t, e, True, False, layers),
    ("head wte gradient (logits^T in place)", v, t, e, True, False, 1),
    ("qkv input gradient (weight^T in place)", t, 3 * e, e, False, True, layers),
    ("attention projection input gradient", t, e, e, False, True, layers),
    ("MLP up input gradient", t, 4 * e, e, False, True, layers),
    ("MLP down input gradient", t, e, 4 * e, False, True, layers),
    ("head input gradient", t, v, e, False, False, 1),
]
generator = torch.Generator().manual_seed(12345)
step_seconds = step_flops = 0.0
for name, rows, inner, n, a_t, b_t, per_step in shapes:
    a = torch.rand(inner, rows, generator=generator).t() if a_t else torch.rand(rows, inner, generator=generator)
    b = torch.rand(n, inner, generator=generator).t() if b_t else torch.rand(inner, n, generator=generator)
    c = torch.zeros(rows, n)
    torch.addmm(c, a, b, out=c)
    best = float("inf")
    for _ in range(args.repeat):
        start = time.perf_counter()
        torch.addmm(c, a, b, out=c)
        best = min(best, time.perf_counter() - start)
    flops = 2.0 * rows * inner * n
    step_seconds += best * per_step
    step_flops += flops * per_step
    print(json.dumps({"engine": "torch", "torch": torch.__version__, "shape": name, "rows": rows, "inner": inner, "n": n,
                      "a_transposed": a_t, "b_transposed": b_t, "threads": torch.get_num_threads(),
                      "ms": round(best * 1e3, 3), "gflops": round(flops / best / 1e9, 2), "per_step": per_step}))
print(json.dumps({"engine": "torch", "torch": torch.__version__, "shape": "step", "threads": torch.get_num_threads(),
                  "ms": round(step_seconds * 1e3, 1), "gflops": round(step_flops / step_seconds / 1e9, 2)}))

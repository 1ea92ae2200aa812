# The peer of product_bench: torch.mm on the shapes, layouts and per-step counts that
# product_bench printed (its JSON lines on standard input, so that the two never time different
# lists), on --threads threads (an operand product_bench reads as a transpose in place is a .t()
# view here, which PyTorch hands to its BLAS as a transposed operand, also without a copy).
# Prints one JSON line a shape and one for the step, as product_bench does.
#   product_bench --threads T ... | python3 bench/product_peer.py --threads T [--repeat R]
import argparse
import json
import os
import sys
import time

parser = argparse.ArgumentParser()
for flag, default in (("threads", 1), ("repeat", 3)):
    parser.add_argument(f"--{flag}", type=int, default=default)
args = parser.parse_args()
for flag in ("threads", "repeat"):
    if getattr(args, flag) <= 0:
        raise SystemExit(f"--{flag} {getattr(args, flag)}: must be positive")
shapes = [record for record in (json.loads(line) for line in sys.stdin if line.strip()) if record["shape"] != "step"]
if not shapes:
    raise SystemExit("no shapes on standard input: pipe product_bench's output in")
# OpenBLAS sizes its pool from these when it loads and ignores torch.set_num_threads.
for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[variable] = str(args.threads)
import torch  # after the thread variables

torch.set_num_threads(args.threads)
generator = torch.Generator().manual_seed(12345)
step_seconds = step_flops = 0.0
for shape in shapes:
    name, rows, inner, n = shape["shape"], shape["rows"], shape["inner"], shape["n"]
    a_t, b_t, per_step = shape["a_transposed"], shape["b_transposed"], shape["per_step"]
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

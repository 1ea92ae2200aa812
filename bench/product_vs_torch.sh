#!/usr/bin/env bash
# zerosim's CPU product (product_bench) beside torch.mm (product_peer.py) on one GPT-2 training
# step's product shapes, on the same threads, in one run: each shape's GFLOP/s both ways and the
# ratio zerosim / torch (>= 1.0: zerosim faster), then the step's products in all. THREADS
# defaults to 1, TOKENS (the rows of a step's activations) to 1024; PYTHON names the peer's
# interpreter (default python3). Both programs refuse a count that is not a positive number.
#   bench/product_vs_torch.sh BUILD_DIR [THREADS] [TOKENS]
set -euo pipefail
build=${1:?usage: product_vs_torch.sh BUILD_DIR [THREADS] [TOKENS]}
threads=${2-1}
tokens=${3-1024}
here=$(dirname "$0")
ours=$("$build/bench/product_bench" --threads "$threads" --tokens "$tokens")
peer=$(printf '%s\n' "$ours" | "${PYTHON:-python3}" "$here/product_peer.py" --threads "$threads")
echo "$ours"
echo "$peer"
python3 - "$ours" "$peer" <<'PY'
import json, sys
ours = [json.loads(line) for line in sys.argv[1].splitlines()]
peer = {r["shape"]: r for r in (json.loads(line) for line in sys.argv[2].splitlines())}
print(f"{'shape':<42} {'zerosim GFLOP/s':>16} {'torch GFLOP/s':>14} {'ratio':>6}")
for r in ours:
    p = peer[r["shape"]]
    print(f"{r['shape']:<42} {r['gflops']:>16.1f} {p['gflops']:>14.1f} {r['gflops'] / p['gflops']:>6.2f}")
print(f"threads {ours[-1]['threads']}, torch {peer['step']['torch']}; the step's products: zerosim {ours[-1]['ms']:.0f} ms, "
      f"torch {peer['step']['ms']:.0f} ms")
PY

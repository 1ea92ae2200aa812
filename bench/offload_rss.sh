#!/usr/bin/env bash
# Peak RSS of one training step whose optimizer state on disk is >= 8 GiB (goal: <= 1.5 GiB),
# with the optimizer state, the gradients and the 16-bit parameters on NVMe.
# Model: 44 layers of 4096 x 4096 (738 M parameters: 8.25 GiB of fp32 master + moments).
# Usage: bench/offload_rss.sh [DIR]   (needs ~13 GB free in DIR while it runs)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-/tmp/zerosim-rss}
mkdir -p "$dir"
widths=$(python3 -c "print(','.join(['4096'] * 45 + ['8']))")
parameters=$(python3 -c "print(44 * (4096 * 4096 + 4096) + 4096 * 8 + 8)")
/usr/bin/time -f "%M %e" -o "$dir/time.txt" "$root/build/tools/zerosim" train --steps 1 --model "$widths" \
  --micro-batch-size 1 --gradient-accumulation-steps 1 --precision bf16 --dataset-size 64 --run-id rss-bench \
  --set zero_optimization.offload_optimizer.nvme_path="$dir" \
  --set zero_optimization.offload_param.device=nvme --set zero_optimization.offload_param.nvme_path="$dir" \
  --set zero_optimization.sub_group_size=8000000 --set zero_optimization.offload_optimizer.buffer_count=9 \
  --set aio.block_size=4194304 >/dev/null
read -r peak_kb seconds < "$dir/time.txt"
python3 - "$peak_kb" "$seconds" "$parameters" <<'PY'
import sys
peak_kb, seconds, parameters = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
state_gib = parameters * 12 / 2**30
print(f"{parameters / 1e6:.1f} M parameters: optimizer state on disk {state_gib:.2f} GiB "
      f"(+ gradients {parameters * 4 / 2**30:.2f} GiB, bf16 params {parameters * 2 / 2**30:.2f} GiB)")
print(f"peak RSS {peak_kb / 2**20:.3f} GiB (goal <= 1.5), one step in {seconds:.0f} s")
PY
rm -f "$dir/time.txt"

#!/usr/bin/env bash
# Durable checkpoint save and load (checkpoint_bench) beside PyTorch's: DCP (save, load,
# async_save's stall), torch.save/torch.load and dd with O_DIRECT (bench/checkpoint_peer.py), on
# the same state size, in the same directory, at W = 1 and W = 4, in one run. zerosim runs with
# each checkpoint.writer of WRITERS (default "none fast": the page cache with four threads, and
# O_DIRECT through libaio), and its async save's stall is shown beside DCP's async_save's.
# The GPU machine has torch; any Linux host with torch will do (no GPU is used).
#
# Usage: bench/checkpoint_vs_dcp.sh BUILD_DIR DIR [SIZE_MIB] [REPETITIONS] [WRITERS]
#   SIZE_MIB 1024, REPETITIONS 3. Needs root for dropping the page cache (both sides say when
#   they could not).
# Output: each side's lines, then a table of medians in MB/s with zerosim / peer ratios.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR DIR [SIZE_MIB] [REPETITIONS] [WRITERS, e.g. \"none fast\"]" >&2
  exit 2
fi
build_dir=$1
dir=$2
size_mib=${3:-1024}
repetitions=${4:-3}
writers=${5:-none fast}
bench="$build_dir/bench/checkpoint_bench"
[ -x "$bench" ] || { echo "checkpoint_vs_dcp: $bench is missing (build the checkpoint_bench target)" >&2; exit 3; }
python3 -c 'import torch.distributed.checkpoint' 2>/dev/null || {
  echo "checkpoint_vs_dcp: python3 with torch (torch.distributed.checkpoint) is needed for the peer" >&2
  exit 3
}
mkdir -p "$dir"
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for w in 1 4; do
  for writer in $writers; do
    out=$("$bench" --dir "$dir/zerosim" --state-mib "$size_mib" --world-size "$w" --repetitions "$repetitions" \
                   --writer "$writer" --drop-caches --settle-seconds 8)
    echo "$out" | sed '$d'
    echo "$out" | tail -n 1 | python3 -c 'import json,sys; d=json.load(sys.stdin); d["engine"]="zerosim"; print(json.dumps(d))' >> "$results"
  done
  if [ "$w" = 1 ]; then
    python3 "$root/bench/checkpoint_peer.py" --dir "$dir/peer" --state-mib "$size_mib" --repetitions "$repetitions" | tee -a "$results"
  else
    torchrun --standalone --nproc_per_node "$w" "$root/bench/checkpoint_peer.py" --dir "$dir/peer" \
             --state-mib "$size_mib" --repetitions "$repetitions" 2> "$dir/peer-w$w.err" | tee -a "$results" ||
      { echo "checkpoint_vs_dcp: the peer at W=$w failed; its errors:" >&2; tail -20 "$dir/peer-w$w.err" >&2; }
  fi
done
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip().startswith("{")]
def peer(measure, w):
    for r in rows:
        if r.get("engine") == "peer" and r.get("measure") == measure and r.get("world_size") == w:
            return r["median_mb_per_s"]
    return None
print("\n| W | writer | zerosim save | DCP save | torch.save | dd O_DIRECT write | zerosim load | DCP load | torch.load | dd O_DIRECT read | save / DCP, torch, dd | load / DCP, torch, dd |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if r.get("engine") != "zerosim":
        continue
    w = r["world_size"]
    save, load = r["save_median_mb_per_s"], r["load_median_mb_per_s"]
    ds, ts, dw = peer("dcp save", w), peer("torch.save", w), peer("dd O_DIRECT write", w)
    dl, tl, dr = peer("dcp load", w), peer("torch.load", w), peer("dd O_DIRECT read", w)
    ratio = lambda a, b: f"{a / b:.2f}" if b else "-"
    fmt = lambda v: f"{v:.0f}" if v else "-"
    print(f"| {w} | {r.get('writer', '?')} | {save:.0f} | {fmt(ds)} | {fmt(ts)} | {fmt(dw)} | {load:.0f} | {fmt(dl)} | {fmt(tl)} | {fmt(dr)} | "
          f"{ratio(save, ds)}, {ratio(save, ts)}, {ratio(save, dw)} | {ratio(load, dl)}, {ratio(load, tl)}, {ratio(load, dr)} |")
for w in (1, 4):
    stall = [r for r in rows if r.get("measure") == "dcp async_save stall" and r.get("world_size") == w]
    ours = [r for r in rows if r.get("engine") == "zerosim" and r.get("world_size") == w]
    line = f"async save at W={w}, the step loop waits (median):"
    for r in ours:
        line += f" zerosim ({r.get('writer')}) {r.get('async_stall_median_ms')} ms, written at {r.get('async_median_mb_per_s')} MB/s;"
    done = [r for r in rows if r.get("measure") == "dcp async_save complete" and r.get("world_size") == w]
    line += f" DCP async_save {stall[0]['median_stall_ms']} ms" if stall else " DCP async_save -"
    line += f", written at {done[0]['median_mb_per_s']:.0f} MB/s" if done else ""
    print(line)
PY

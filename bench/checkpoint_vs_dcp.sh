#!/usr/bin/env bash
# Durable checkpoint save and load (checkpoint_bench) beside PyTorch's: DCP (save, load,
# async_save's stall), torch.save/torch.load and dd with O_DIRECT (bench/checkpoint_peer.py), on
# the same state size, in the same directory, at W = 1 and W = 4, in one run. zerosim runs with
# each checkpoint.writer of WRITERS (default "none fast": the page cache with four threads, and
# O_DIRECT through libaio), and its async save's stall is shown beside DCP's async_save's.
# The GPU machine has torch; any Linux host with torch will do (no GPU is used).
#
# Then, at W = 1 and W = 4, PAIRS loads of zerosim and PAIRS torch.loads alternating in one
# series (checkpoint_bench --peer-load; each cold): the disk's rate drifts over minutes, so the
# loads are also compared pair by pair, each pair measured seconds apart.
#
# Usage: bench/checkpoint_vs_dcp.sh BUILD_DIR DIR [SIZE_MIB] [REPETITIONS] [WRITERS] [PAIRS]
#   SIZE_MIB 1024, REPETITIONS 3, PAIRS 5 (0: none). Needs root for dropping the page cache (both
#   sides say when they could not).
# Output: each side's lines, then a table of medians in MB/s with zerosim / peer ratios, then the
# paired loads with each pair's ratio and their median.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR DIR [SIZE_MIB] [REPETITIONS] [WRITERS, e.g. \"none fast\"] [PAIRS]" >&2
  exit 2
fi
build_dir=$1
dir=$2
size_mib=${3:-1024}
repetitions=${4:-3}
writers=${5:-none fast}
pairs=${6:-5}
case "$pairs" in
  ''|*[!0-9]*) echo "checkpoint_vs_dcp: PAIRS must be a whole number (0: no paired loads), got '$pairs'" >&2; exit 2;;
esac
bench="$build_dir/bench/checkpoint_bench"
[ -x "$bench" ] || { echo "checkpoint_vs_dcp: $bench is missing (build the checkpoint_bench target)" >&2; exit 3; }
python3 -c 'import torch.distributed.checkpoint' 2>/dev/null || {
  echo "checkpoint_vs_dcp: python3 with torch (torch.distributed.checkpoint) is needed for the peer" >&2
  exit 3
}
mkdir -p "$dir"
results=$(mktemp)
paired=$(mktemp)
trap 'rm -f "$results" "$paired"' EXIT
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
# Paired loads: torch.save once (kept), then zerosim's loads with a torch.load after each.
if [ "$pairs" -gt 0 ]; then
  for w in 1 4; do
    if [ "$w" = 1 ]; then peer=(python3 "$root/bench/checkpoint_peer.py")
    else peer=(torchrun --standalone --nproc_per_node "$w" "$root/bench/checkpoint_peer.py"); fi
    common=(--dir "$dir/paired-peer" --state-mib "$size_mib" --repetitions 1 --keep)
    "${peer[@]}" "${common[@]}" --measures torch.save > /dev/null 2> "$dir/paired-w$w.err" ||
      { echo "checkpoint_vs_dcp: the paired torch.save at W=$w failed; its errors:" >&2; tail -20 "$dir/paired-w$w.err" >&2; exit 1; }
    # --peer-load runs its command through sh -c: every word quoted for it.
    peer_load="$(printf '%q ' "${peer[@]}" "${common[@]}" --measures torch.load) 2>> $(printf '%q' "$dir/paired-w$w.err")"
    out=$("$bench" --dir "$dir/zerosim" --state-mib "$size_mib" --world-size "$w" --repetitions "$pairs" --writer none \
                   --drop-caches --settle-seconds 8 --peer-load "$peer_load")
    echo "$out" | grep '"measure": "torch.load"' >> "$paired"
    echo "$out" | tail -n 1 >> "$paired"
    rm -rf "$dir/paired-peer"
  done
fi
python3 - "$results" "$paired" <<'PY'
import json, statistics, sys
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
paired = [json.loads(line) for line in open(sys.argv[2]) if line.strip().startswith("{")]
for w in (1, 4):
    peers = [r for r in paired if r.get("measure") == "torch.load" and r.get("world_size") == w]
    ours = [r for r in paired if "load_seconds" in r and r.get("world_size") == w]
    if not peers or not ours:
        continue
    ours = ours[0]
    rates = [ours["size_bytes"] / s / 1e6 for s in ours["load_seconds"]]
    peer_rates = [r["bytes"] / r["seconds"][0] / 1e6 for r in peers]
    if len(rates) != len(peer_rates):
        print(f"paired loads at W={w}: {len(rates)} zerosim loads but {len(peer_rates)} torch.loads (see DIR/paired-w{w}.err)")
        continue
    ratios = [a / b for a, b in zip(rates, peer_rates)]
    print(f"\npaired loads at W={w} (alternating, each cold), MB/s:")
    print("| pair | zerosim load | torch.load | ratio |\n|---|---|---|---|")
    for i, (a, b) in enumerate(zip(rates, peer_rates)):
        print(f"| {i + 1} | {a:.0f} | {b:.0f} | {a / b:.2f} |")
    median = statistics.median
    print(f"| median | {median(rates):.0f} | {median(peer_rates):.0f} | {median(ratios):.2f} (of the pairs' ratios) |")
PY

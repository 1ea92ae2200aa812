#!/usr/bin/env bash
# Durable checkpoint save and load (checkpoint_bench) beside PyTorch's: DCP (save, load,
# async_save's stall), torch.save/torch.load and dd with O_DIRECT (bench/checkpoint_peer.py), on
# the same state size, in the same directory, at W = 1 and W = 4, in one run. zerosim runs with
# each checkpoint.writer of WRITERS (default "none fast": the page cache with four threads, and
# O_DIRECT through libaio), and its async save's stall is shown beside DCP's async_save's.
# The GPU machine has torch; any Linux host with torch will do (no GPU is used).
#
# Then, at W = 1 and W = 4, PAIRS loads of zerosim and PAIRS torch.loads alternating in one
# series (checkpoint_bench --peer-load; each cold, each of a file no load has read before, which
# side goes first alternating pair by pair), and PAIRS durable saves of zerosim and PAIRS of DCP
# alternating likewise (--peer-save; the page cache dropped before each save): the disk's rate
# drifts over minutes, so both are also compared pair by pair, each pair seconds apart.
#
# Usage: bench/checkpoint_vs_dcp.sh BUILD_DIR DIR [SIZE_MIB] [REPETITIONS] [WRITERS] [PAIRS] [PARTS]
#   SIZE_MIB 1024, REPETITIONS 3, PAIRS 5 (0: none), PARTS "table,paired" (either alone runs that
#   part: the whole run takes about 12 minutes on the GPU machine's host). Needs root for dropping
#   the page cache (both sides say when they could not).
# Output: each side's lines, then a table of medians in MB/s with zerosim / peer ratios, then the
# paired loads and the paired saves, with each pair's ratio and their median.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR DIR [SIZE_MIB] [REPETITIONS] [WRITERS, e.g. \"none fast\"] [PAIRS] [PARTS: table,paired]" >&2
  exit 2
fi
build_dir=$1
dir=$2
# A value given empty is an error, not the default.
size_mib=${3-1024}
repetitions=${4-3}
writers=${5-none fast}
pairs=${6-5}
parts=${7-table,paired}
source "$root/bench/arguments.sh"
require_positive_whole_numbers checkpoint_vs_dcp "SIZE_MIB=$size_mib" "REPETITIONS=$repetitions"
for writer in $writers; do require_writer_type checkpoint_vs_dcp WRITERS "$writer"; done
[ -n "${writers// /}" ] || { echo "checkpoint_vs_dcp: WRITERS is empty (none, python or fast)" >&2; exit 2; }
for part in ${parts//,/ }; do
  case "$part" in
    table|paired) ;;
    *) echo "checkpoint_vs_dcp: PARTS is a comma-separated list of table and paired, got '$parts'" >&2; exit 2;;
  esac
done
[ -n "${parts//,/}" ] || { echo "checkpoint_vs_dcp: PARTS is empty (table, paired or both)" >&2; exit 2; }
run_part() { [[ ",$parts," == *",$1,"* ]]; }
case "$pairs" in
  ''|*[!0-9]*) echo "checkpoint_vs_dcp: PAIRS must be a whole number (0: no paired loads or saves), got '$pairs'" >&2; exit 2;;
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
  run_part table || break
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
# The peer's command at world size $1, into the array `peer`: one process, or torchrun's.
peer_command() {
  if [ "$1" = 1 ]; then peer=(python3 "$root/bench/checkpoint_peer.py")
  else peer=(torchrun --standalone --nproc_per_node "$1" "$root/bench/checkpoint_peer.py"); fi
}
# Paired loads: torch.save of PAIRS files (kept), then zerosim's loads, each of its own tag, with
# a torch.load beside each (after it in odd pairs, before it in even ones), each of its own file:
# no load of either side reads what another has read.
if [ "$pairs" -gt 0 ] && run_part paired; then
  for w in 1 4; do
    peer_command "$w"
    common=(--dir "$dir/paired-peer" --state-mib "$size_mib" --repetitions "$pairs" --keep)
    "${peer[@]}" "${common[@]}" --measures torch.save > /dev/null 2> "$dir/paired-w$w.err" ||
      { echo "checkpoint_vs_dcp: the paired torch.save at W=$w failed; its errors:" >&2; tail -20 "$dir/paired-w$w.err" >&2; exit 1; }
    # --peer-load runs its command through sh -c: every word quoted for it ({repetition}, which
    # checkpoint_bench replaces with the pair's number, left bare: quoting would escape it).
    peer_load="$(printf '%q ' "${peer[@]}" "${common[@]}" --measures torch.load) --load-index {repetition}"
    peer_load+=" 2>> $(printf '%q' "$dir/paired-w$w.err")"
    out=$("$bench" --dir "$dir/zerosim" --state-mib "$size_mib" --world-size "$w" --repetitions "$pairs" --writer none \
                   --drop-caches --settle-seconds 8 --peer-load "$peer_load")
    echo "$out" | grep '"measure": "torch.load"' >> "$paired"
    echo "$out" | tail -n 1 >> "$paired"
    rm -rf "$dir/paired-peer"
  done
  # Paired saves: each zerosim save beside a DCP save (after it in odd pairs, before it in even
  # ones; the peer drops the cache first and removes its files after; checkpoint_bench drops it
  # before each of its later saves).
  for w in 1 4; do
    peer_command "$w"
    peer_save="$(printf '%q ' "${peer[@]}" --dir "$dir/paired-peer" --state-mib "$size_mib" --repetitions 1 \
                   --measures dcp.save --settle-seconds 0) 2>> $(printf '%q' "$dir/paired-save-w$w.err")"
    out=$("$bench" --dir "$dir/zerosim" --state-mib "$size_mib" --world-size "$w" --repetitions "$pairs" --writer none \
                   --drop-caches --settle-seconds 8 --peer-save "$peer_save") ||
      { echo "checkpoint_vs_dcp: the paired saves at W=$w failed; the peer's errors:" >&2
        tail -20 "$dir/paired-save-w$w.err" >&2; exit 1; }
    echo "$out" | grep '"measure": "dcp save"' >> "$paired"
    echo "$out" | tail -n 1 | python3 -c 'import json,sys; d=json.load(sys.stdin); d["paired"]="save"; print(json.dumps(d))' >> "$paired"
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
# (what, the peer's measure, our seconds' key, which of our lines, the peer's name, the heading)
kinds = [("loads", "torch.load", "load_seconds", lambda r: "paired" not in r, "torch.load",
          "alternating, each side first by turns, each cold, every file read once"),
         ("saves", "dcp save", "save_seconds", lambda r: r.get("paired") == "save", "DCP save",
          "alternating, each side first by turns, durable, the page cache dropped before each")]
for what, measure, key, ours_filter, peer_name, how in kinds:
    for w in (1, 4):
        peers = [r for r in paired if r.get("measure") == measure and r.get("world_size") == w]
        ours = [r for r in paired if key in r and ours_filter(r) and r.get("world_size") == w]
        if not peers or not ours:
            continue
        ours = ours[0]
        rates = [ours["size_bytes"] / s / 1e6 for s in ours[key]]
        peer_rates = [r["bytes"] / r["seconds"][0] / 1e6 for r in peers]
        if len(rates) != len(peer_rates):
            print(f"paired {what} at W={w}: {len(rates)} of zerosim's but {len(peer_rates)} of the peer's (see DIR/paired-*w{w}.err)")
            continue
        ratios = [a / b for a, b in zip(rates, peer_rates)]
        print(f"\npaired {what} at W={w} ({how}), MB/s:")
        print(f"| pair | zerosim | {peer_name} | ratio |\n|---|---|---|---|")
        for i, (a, b) in enumerate(zip(rates, peer_rates)):
            print(f"| {i + 1} | {a:.0f} | {b:.0f} | {a / b:.2f} |")
        median = statistics.median
        print(f"| median | {median(rates):.0f} | {median(peer_rates):.0f} | {median(ratios):.2f} (of the pairs' ratios) |")
PY

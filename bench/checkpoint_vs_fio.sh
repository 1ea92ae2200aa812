#!/usr/bin/env bash
# Durable checkpoint save and load (checkpoint_bench) beside fio on the same total size, in the
# same directory, one after the other.
#   save  vs  fio sequential write, bs 8M, psync (buffered pwrite, as the shard writer), one
#             new file per rank (--numjobs W, total / W each), --end_fsync=1 (fio counts the
#             final fsync in its runtime, as the save counts its fsyncs and commit);
#   load  vs  fio sequential read of those files, bs 8M, psync, buffered (the load also builds
#             its state in fresh memory: the first touch of it is printed apart, and the load
#             less that time);
# fio runs in the bench's order: all R writes (new files each time, the earlier ones kept, as
# the R checkpoint tags are), then all R reads.
# Page cache: the binary gets --drop-caches; when it could drop the cache (root), the cache is
# dropped before every fio read too; when it could not, fio reads with --invalidate=0 (else it
# would drop its own file's cache), so that both read what the page cache holds.
# Then one more fio pair: O_DIRECT, libaio, queue depth 8, bs 8M ([ckpt-io]'s yardstick: the
# save and load against it too). Each figure is best and median of R runs (fio runs R times
# as well).
#
# Usage: bench/checkpoint_vs_fio.sh DIR [SIZE_MIB] [WORLD_SIZE] [OFFLOAD] [REPETITIONS] [WRITER]
#   SIZE_MIB 1024 (256 also makes sense), WORLD_SIZE 1, OFFLOAD none|nvme (none), REPETITIONS 3,
#   WRITER the checkpoint.writer type zerosim saves and loads with: none (the page cache, the
#   default), python, or fast (O_DIRECT through libaio, as DeepSpeed's FastPersist).
# Builds nothing: expects $ZEROSIM_BUILD_DIR/bench/checkpoint_bench (ZEROSIM_BUILD_DIR defaults
# to build/ in the repository). Needs fio (apt-get install fio) and python3.
# ZEROSIM_SETTLE_SECONDS (8): pause after dropping the page cache before each series of writes
# (see below).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -lt 1 ]; then
  echo "usage: $0 DIR [SIZE_MIB] [WORLD_SIZE] [OFFLOAD none|nvme] [REPETITIONS] [WRITER none|python|fast]" >&2
  exit 2
fi
dir=$1
# A value given empty is an error, not the default.
size_mib=${2-1024}
world_size=${3-1}
offload=${4-none}
repetitions=${5-3}
writer=${6-none}
source "$root/bench/arguments.sh"
require_positive_whole_numbers checkpoint_vs_fio "SIZE_MIB=$size_mib" "WORLD_SIZE=$world_size" "REPETITIONS=$repetitions"
case "$offload" in
  none|nvme) ;;
  *) echo "checkpoint_vs_fio: OFFLOAD is none or nvme, got '$offload'" >&2; exit 2;;
esac
require_writer_type checkpoint_vs_fio WRITER "$writer"
build_dir=${ZEROSIM_BUILD_DIR:-$root/build}
bench="$build_dir/bench/checkpoint_bench"
[ -x "$bench" ] || {
  echo "checkpoint_vs_fio: $bench is missing; build it first, e.g." >&2
  echo "  cmake -S $root -B $build_dir -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build $build_dir --target checkpoint_bench" >&2
  echo "  (or point ZEROSIM_BUILD_DIR at the build directory that has it)" >&2
  exit 3
}
command -v fio >/dev/null || { echo "checkpoint_vs_fio: fio is not installed (apt-get install fio)" >&2; exit 3; }
command -v python3 >/dev/null || { echo "checkpoint_vs_fio: python3 is needed to read fio's JSON" >&2; exit 3; }
mkdir -p "$dir"

# Before each series of writes (the bench's saves, each fio pass) the page cache is dropped and
# the machine left alone for settle_seconds: a VM with free page reporting takes freed memory
# back within seconds, and writes into pages it has taken back run several times slower than
# writes into pages freed moments ago (here 1 GiB new-file writes: ~300 MB/s against ~1300).
# Settled, every series starts from the same state, whatever ran before it.
settle_seconds=${ZEROSIM_SETTLE_SECONDS:-8}
bench_output=$("$bench" --dir "$dir" --state-mib "$size_mib" --world-size "$world_size" --offload "$offload" \
                        --repetitions "$repetitions" --writer "$writer" --drop-caches --settle-seconds "$settle_seconds")
echo "$bench_output" | sed '$d'
bench_json=$(echo "$bench_output" | tail -n 1)
json_field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$bench_json" "$1"; }
size_bytes=$(json_field size_bytes)
caches_dropped=$(json_field page_cache_dropped)

# One file per rank, as the shards; fio does whole blocks only, so each job's size is rounded up
# to the block (8 MiB): at most W x 8 MiB more than the checkpoint, and the rate is per byte.
block_bytes=$((8 << 20))
job_bytes=$(( (size_bytes / world_size + block_bytes - 1) / block_bytes * block_bytes ))
fio_dir="$dir/checkpoint-fio"

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

fio_run() {  # $1 = write | read, $2 = directory, then extra fio flags; prints aggregate MB/s (1e6 bytes/s)
  local rw=$1 directory=$2
  shift 2
  fio --name=ckpt --directory="$directory" --numjobs="$world_size" --group_reporting --size="$job_bytes" \
      --bs="$block_bytes" --rw="$rw" --fallocate=none --output-format=json "$@" |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(j[sys.argv[1]]["bw_bytes"]/1e6)' "$rw"
}

# In checkpoint_bench's order and memory conditions: R writes, each to new files while the
# earlier ones stay (as the R tags do: on this kind of VM a write into page-cache pages that a
# delete has just freed runs several times faster than one that needs pages the kernel has not
# used lately), then R reads, each after dropping the page cache (when allowed).
# Arguments: flags for both directions. Prints "write_list read_list" (comma lists).
fio_pass() {
  local writes="" reads="" r
  rm -rf "$fio_dir"
  if [ "$caches_dropped" = "True" ]; then
    drop_caches
    sleep "$settle_seconds"
  fi
  for r in $(seq "$repetitions"); do
    mkdir -p "$fio_dir/$r"
    writes+="$(fio_run write "$fio_dir/$r" --end_fsync=1 "$@"),"
  done
  for r in $(seq "$repetitions"); do
    if [ "$caches_dropped" = "True" ]; then
      drop_caches
      reads+="$(fio_run read "$fio_dir/$r" "$@"),"
    else
      reads+="$(fio_run read "$fio_dir/$r" --invalidate=0 "$@"),"
    fi
  done
  rm -rf "$fio_dir"
  echo "${writes%,} ${reads%,}"
}

read -r buffered_writes buffered_reads <<<"$(fio_pass --ioengine=psync)"
read -r direct_writes direct_reads <<<"$(fio_pass --ioengine=libaio --iodepth=8 --direct=1)"

python3 - "$bench_json" "$buffered_writes" "$buffered_reads" "$direct_writes" "$direct_reads" "$job_bytes" <<'PY'
import json, statistics, sys
bench = json.loads(sys.argv[1])
def rates(text):
    values = sorted(float(v) for v in text.split(","))
    # The lower middle for an even count, as checkpoint_bench takes it.
    return values[-1], values[(len(values) - 1) // 2]
fio_write, fio_write_median = rates(sys.argv[2])
fio_read, fio_read_median = rates(sys.argv[3])
direct_write, direct_write_median = rates(sys.argv[4])
direct_read, direct_read_median = rates(sys.argv[5])
world_size = bench["world_size"]
job_bytes = int(sys.argv[6])
print(f"checkpoint {bench['size_bytes']} bytes ({bench['size_bytes'] / 2**20:.1f} MiB) in {world_size} shard(s), "
      f"optimizer state {'on NVMe' if bench['offload'] == 'nvme' else 'in memory'}, writer {bench['writer']}; "
      f"fio: {world_size} job(s) x {job_bytes >> 20} MiB, bs 8M; best / median of {bench['repetitions']}")
print("page cache dropped before every read (checkpoint_bench and fio)" if bench["page_cache_dropped"]
      else "page cache NOT dropped: both loads and fio reads may come from the page cache")
print(f"{'':36} {'best MB/s':>10} {'median MB/s':>12}")
def row(label, best, median):
    print(f"{label:36} {best:10.1f} {median:12.1f}")
def ratio(label, a, b, a_median, b_median, goal=""):
    print(f"{label:36} {a / b:10.3f} {a_median / b_median:12.3f}{goal}")
row("save (write, fsync, commit)", bench["save_mb_per_s"], bench["save_median_mb_per_s"])
row("fio write psync + end_fsync", fio_write, fio_write_median)
ratio("  ratio save / fio", bench["save_mb_per_s"], fio_write, bench["save_median_mb_per_s"], fio_write_median,
      "   (goal >= 0.85)")
row("load (verify, read, place)", bench["load_mb_per_s"], bench["load_median_mb_per_s"])
touch = bench["first_touch_median_seconds"]
load_seconds = sorted(bench["load_seconds"])
print(f"  of it, first touch of the state     {bench['size_bytes'] / touch / 1e6:10.1f} MB/s, {touch:.3f} s "
      f"(fresh huge pages, {world_size} thread(s); median)")
row("  load less the first touch", bench["size_bytes"] / (load_seconds[0] - touch) / 1e6,
    bench["size_bytes"] / (load_seconds[(len(load_seconds) - 1) // 2] - touch) / 1e6)
row("fio read psync", fio_read, fio_read_median)
ratio("  ratio load / fio", bench["load_mb_per_s"], fio_read, bench["load_median_mb_per_s"], fio_read_median,
      "   (goal >= 0.85)")
row("fio write O_DIRECT qd8", direct_write, direct_write_median)
ratio("  ratio save / fio O_DIRECT", bench["save_mb_per_s"], direct_write, bench["save_median_mb_per_s"],
      direct_write_median, "   (goal >= 0.85)")
row("fio read O_DIRECT qd8", direct_read, direct_read_median)
ratio("  ratio load / fio O_DIRECT", bench["load_mb_per_s"], direct_read, bench["load_median_mb_per_s"],
      direct_read_median, "   (goal >= 0.85)")
PY

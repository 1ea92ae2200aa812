#!/usr/bin/env bash
# The swap engine against fio, one after the other, on the same directory with the same file
# size, block size, queue depth and O_DIRECT (sequential write, then sequential read).
# Usage: bench/io_vs_fio.sh [DIR] [SIZE_MIB] [BLOCK_BYTES] [QUEUE_DEPTH]
# Needs fio (apt-get install fio) and a built build/tools/zerosim.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-/tmp}
size_mib=${2:-1024}
block=${3:-1048576}
depth=${4:-8}
zerosim="$root/build/tools/zerosim"
command -v fio >/dev/null || { echo "io_vs_fio: fio is not installed (apt-get install fio)" >&2; exit 3; }
[ -x "$zerosim" ] || { echo "io_vs_fio: build zerosim first (scripts/build.sh)" >&2; exit 3; }

fio_mbps() {  # $1 = write | read; prints MB/s (1e6 bytes/s), best of 3 like the engine
  local best=0
  for _ in 1 2 3; do
    local file="$dir/zerosim-fio.dat"
    local out
    out=$(fio --name=swap --filename="$file" --size="${size_mib}M" --bs="$block" --iodepth="$depth" \
              --ioengine=libaio --direct=1 --rw="$1" --numjobs=1 --output-format=json)
    local bw
    bw=$(python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(j[sys.argv[1]]["bw_bytes"]/1e6)' "$1" <<<"$out")
    best=$(python3 -c 'import sys; print(max(float(sys.argv[1]), float(sys.argv[2])))' "$best" "$bw")
  done
  rm -f "$dir/zerosim-fio.dat"
  echo "$best"
}

engine=$("$zerosim" bench io --dir "$dir" --size-mib "$size_mib" --block-size "$block" --queue-depth "$depth")
fio_write=$(fio_mbps write)
fio_read=$(fio_mbps read)
python3 - "$engine" "$fio_write" "$fio_read" <<'PY'
import json, sys
engine = json.loads(sys.argv[1]); fio_write = float(sys.argv[2]); fio_read = float(sys.argv[3])
print(f"file {engine['size_bytes'] >> 20} MiB, block {engine['block_size']} B, queue depth {engine['queue_depth']}, O_DIRECT, best of 3")
print(f"write: zerosim {engine['write_MBps']:9.1f} MB/s   fio {fio_write:9.1f} MB/s   ratio {engine['write_MBps'] / fio_write:.3f}")
print(f"read:  zerosim {engine['read_MBps']:9.1f} MB/s   fio {fio_read:9.1f} MB/s   ratio {engine['read_MBps'] / fio_read:.3f}")
PY

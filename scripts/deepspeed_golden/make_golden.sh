#!/usr/bin/env bash
# Regenerates the DeepSpeed golden data (tests/data/deepspeed/README.md says what it is).
#
#   scripts/deepspeed_golden/make_golden.sh DEEPSPEED_SRC_DIR [OUT_DIR]
#
# DEEPSPEED_SRC_DIR is a plain DeepSpeed checkout; only its files are read. The commit it
# holds is taken from $DEEPSPEED_COMMIT, else from git if the directory is a git checkout
# (an exported tree, e.g. from `git archive`, has no .git: set DEEPSPEED_COMMIT then).
# OUT_DIR defaults to tests/data/deepspeed. Needs python3 with pydantic (DeepSpeed's fp16
# config model is run as is), g++ and lscpu.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

die() {
  echo "make_golden.sh: $*" >&2
  exit 1
}

[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: make_golden.sh DEEPSPEED_SRC_DIR [OUT_DIR]"
src=$1
out=${2:-$root/tests/data/deepspeed}

[ -d "$src" ] || die "$src is not a directory"
src=$(cd "$src" && pwd)
for f in deepspeed/runtime/lr_schedules.py deepspeed/runtime/fp16/loss_scaler.py \
  deepspeed/runtime/precision_config.py deepspeed/runtime/config_utils.py \
  csrc/adam/cpu_adam_impl.cpp csrc/includes/cpu_adam.h csrc/includes/simd.h; do
  [ -f "$src/$f" ] || die "$src/$f is missing: not a DeepSpeed checkout?"
done

# Only a checkout whose top level is $src itself counts: an exported tree unpacked inside
# some other repository must not pick up that repository's HEAD.
if [ -n "${DEEPSPEED_COMMIT:-}" ]; then
  commit=$DEEPSPEED_COMMIT
elif [ "$(git -C "$src" rev-parse --show-toplevel 2>/dev/null)" = "$src" ]; then
  commit=$(git -C "$src" rev-parse --verify HEAD)
  [ -z "$(git -C "$src" status --porcelain --untracked-files=no)" ] ||
    die "$src has local changes; the data would not be DeepSpeed's commit $commit"
else
  die "$src is not a git checkout: set DEEPSPEED_COMMIT to the commit it was exported from"
fi

for tool in python3 g++ lscpu; do
  command -v "$tool" >/dev/null || die "$tool not found"
done
python3 -c 'import pydantic' 2>/dev/null || die "python3 cannot import pydantic (DeepSpeed's config models need it)"

mkdir -p "$out"
export PYTHONDONTWRITEBYTECODE=1
# Each generator writes to a temporary name first, so a failure leaves the old file in place.
trap 'rm -f "$out"/*.json.tmp' EXIT
for gen in lr_schedules loss_scaler cpu_adam; do
  echo "== $gen"
  python3 "$here/${gen}_golden.py" "$src" "$out/$gen.json.tmp" "$commit"
  mv "$out/$gen.json.tmp" "$out/$gen.json"
done
ls -l "$out"/*.json

#!/usr/bin/env bash
# Prepares DeepSpeed for the GPU machine, which reaches no package registry and has neither
# DeepSpeed nor pydantic nor hjson. Run here, in the project's root, before a device run:
#
#   scripts/deepspeed_live/prepare.sh DEEPSPEED_GIT HJSON_GIT [DEEPSPEED_TAG] [HJSON_TAG]
#
#   DEEPSPEED_GIT  a git directory of github.com/microsoft/DeepSpeed (a clone, or a bare mirror)
#   HJSON_GIT      a git directory of github.com/hjson/hjson-py
#   DEEPSPEED_TAG  v0.14.5 by default: the newest release before DeepSpeed moved to pydantic 2,
#                  which no Debian 12 package provides (its python3-pydantic is 1.10, whose API
#                  the releases from 0.11.2 to 0.14.5 import); later releases cannot run here
#   HJSON_TAG      v3.0.2 by default
#
# It fills .device-deps/deepspeed/ (ignored by git; carry [".device-deps"] in the run):
#   deepspeed-src.tar.gz  DeepSpeed's Python package, op builders and kernels' sources (csrc) at
#                         the tag, with the version file its setup.py would write (the version,
#                         the commit, no op prebuilt: every op builds just in time with ninja)
#   hjson-src.tar.gz      hjson-py's package at its tag (pure Python)
#   *.deb                 python3-pydantic (1.10, pure Python) and python3-cpuinfo from Debian 12
#   ds-env.sh             sourced on the GPU machine after .device-deps/on-device.sh
# DeepSpeed's other requirements (numpy, packaging, psutil, tqdm, ninja, torch) are on the GPU
# machine already.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 DEEPSPEED_GIT HJSON_GIT [DEEPSPEED_TAG] [HJSON_TAG]" >&2
  exit 2
fi
ds_git=$1
hjson_git=$2
ds_tag=${3:-v0.14.5}
hjson_tag=${4:-v3.0.2}
for value in "$ds_git" "$hjson_git" "$ds_tag" "$hjson_tag"; do
  [ -n "$value" ] || { echo "prepare: an empty argument" >&2; exit 2; }
done
ds_commit=$(git --git-dir="$ds_git" rev-parse --verify "$ds_tag^{commit}" 2>/dev/null) ||
  { echo "prepare: $ds_git has no tag $ds_tag" >&2; exit 2; }
hjson_commit=$(git --git-dir="$hjson_git" rev-parse --verify "$hjson_tag^{commit}" 2>/dev/null) ||
  { echo "prepare: $hjson_git has no tag $hjson_tag" >&2; exit 2; }
version=$(git --git-dir="$ds_git" show "$ds_commit:version.txt" | tr -d '[:space:]')
[ "v$version" = "$ds_tag" ] || echo "prepare: note: $ds_tag's version.txt says $version" >&2

root=$(git rev-parse --show-toplevel)
out=$root/.device-deps/deepspeed
grep -qxF '/.device-deps/' "$root/.git/info/exclude" 2>/dev/null || echo '/.device-deps/' >> "$root/.git/info/exclude"
rm -rf "$out"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# DeepSpeed: the package and what its just-in-time builds read (op_builder, csrc, accelerator,
# linked from inside the package), nothing else of the repository.
mkdir -p "$work/deepspeed-$version"
git --git-dir="$ds_git" archive "$ds_commit" deepspeed op_builder csrc accelerator version.txt LICENSE |
  tar -x -C "$work/deepspeed-$version"
# What DeepSpeed's setup.py writes at install time: without it the package calls itself 0.0.0
# unless started from its own root.
cat > "$work/deepspeed-$version/deepspeed/git_version_info_installed.py" <<PY
version='$version'
git_hash='${ds_commit:0:7}'
git_branch='$ds_tag'
installed_ops={}
accelerator_name='cuda'
torch_info={'version': '0.0', 'bf16_support': False, 'cuda_version': '0.0', 'nccl_version': '0.0', 'hip_version': '0.0'}
PY
tar -C "$work" -czf "$out/deepspeed-src.tar.gz" "deepspeed-$version"

mkdir -p "$work/hjson"
git --git-dir="$hjson_git" archive "$hjson_commit" hjson LICENSE.txt | tar -x -C "$work/hjson"
tar -C "$work" -czf "$out/hjson-src.tar.gz" hjson

[ -n "$(ls /var/lib/apt/lists 2>/dev/null | head -1)" ] || apt-get update -qq
(cd "$out" && apt-get download -qq python3-pydantic python3-cpuinfo 2>&1 | grep -v "unsandboxed" || true)
ls "$out"/python3-pydantic_*.deb "$out"/python3-cpuinfo_*.deb > /dev/null

cat > "$out/ds-env.sh" <<SH
# Source on the GPU machine, after .device-deps/on-device.sh (which provides libaio for the
# NVMe op): DeepSpeed $version ($ds_tag, ${ds_commit:0:7}) and hjson-py ($hjson_tag,
# ${hjson_commit:0:7}) unpacked under /tmp/deepspeed-live, pydantic and py-cpuinfo from Debian 12.
_ds_here=\$(dirname "\$(readlink -f "\${BASH_SOURCE[0]}")")
_ds_root=/tmp/deepspeed-live
mkdir -p "\$_ds_root/debs"
tar -xzf "\$_ds_here/deepspeed-src.tar.gz" -C "\$_ds_root"
tar -xzf "\$_ds_here/hjson-src.tar.gz" -C "\$_ds_root"
for f in "\$_ds_here"/*.deb; do dpkg -x "\$f" "\$_ds_root/debs"; done
export PYTHONPATH="\$_ds_root/deepspeed-$version:\$_ds_root/hjson:\$_ds_root/debs/usr/lib/python3/dist-packages\${PYTHONPATH:+:\$PYTHONPATH}"
export DEEPSPEED_VERSION=$version
# Just-in-time op builds land here, one per machine.
export TORCH_EXTENSIONS_DIR=\$_ds_root/torch-extensions
export DS_ACCELERATOR=cuda
SH
du -sh "$out"
echo "DeepSpeed $version ($ds_tag, ${ds_commit:0:7}) and hjson-py $hjson_tag ready in .device-deps/deepspeed"

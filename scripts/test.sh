#!/usr/bin/env bash
# The test command (README.md): installs what is missing, builds, runs every test but those
# labelled "gpu" (they need a GPU; run them on the GPU machine with `ctest -L gpu`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
cd "$root/build"
ctest --output-on-failure -j "$(nproc)" --timeout 900 -LE gpu

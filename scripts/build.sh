#!/usr/bin/env bash
# Configures and builds zerosim into build/ (Release-with-debug-info, Ninja). The CUDA
# backend builds when nvcc is found (/usr/local/cuda/bin is added to PATH if present).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
# The flags are named on every call, so that a build configured by scripts/test.sh (which drops
# -g through "$@") gets its debug information back from a plain build.sh.
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g -DNDEBUG" -DCMAKE_CUDA_FLAGS_RELWITHDEBINFO="-O2 -g -DNDEBUG" "$@"
cmake --build "$root/build" -j "$(nproc)"

#!/usr/bin/env bash
# Configures and builds zerosim into build/ (Release-with-debug-info, Ninja). The CUDA
# backend builds when nvcc is found (/usr/local/cuda/bin is added to PATH if present).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build "$root/build" -j "$(nproc)"

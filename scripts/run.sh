#!/usr/bin/env bash
# The main job (README.md): installs what is missing, builds, runs `zerosim train` on the
# embedded default config. Extra arguments go to `zerosim train`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" >/dev/null
"$root/build/tools/zerosim" train "$@"

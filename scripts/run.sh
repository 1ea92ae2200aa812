#!/usr/bin/env bash
# The main job (README.md): installs what the zerosim binary needs (scripts/install-deps.sh
# --main), builds only that binary into build-run/ (no tests, benchmarks, CUDA or MPI: the
# suite runs on the CPU), and runs the scenario suite on scenarios/library with its report
# (build-run/report/report.html, report.json, report.md, junit.xml). Extra arguments go to
# `zerosim suite` (e.g. --defect scheduler_not_restored). `scripts/run.sh train ...` runs
# `zerosim train` instead. scripts/test.sh builds everything into build/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh" --main
build="$root/build-run"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZEROSIM_BUILD_TESTS=OFF \
  -DZEROSIM_BUILD_BENCH=OFF -DZEROSIM_WITH_CUDA=OFF -DZEROSIM_WITH_MPI=OFF >/dev/null
cmake --build "$build" --target zerosim -j "$(nproc)" >/dev/null
if [ "${1:-}" = "train" ]; then
  shift
  exec "$build/tools/zerosim" train "$@"
fi
cd "$root"
exec "$build/tools/zerosim" suite "$root/scenarios/library" --report-dir "$build/report" "$@"

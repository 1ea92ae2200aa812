#!/usr/bin/env bash
# The main job (README.md): installs what is missing, builds, and runs the scenario suite on
# scenarios/library with its report (build/report/report.html, report.json, report.md,
# junit.xml). Extra arguments go to `zerosim suite` (e.g. --defect scheduler_not_restored).
# `scripts/run.sh train ...` runs `zerosim train` instead.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" >/dev/null
if [ "${1:-}" = "train" ]; then
  shift
  exec "$root/build/tools/zerosim" train "$@"
fi
cd "$root"
exec "$root/build/tools/zerosim" suite "$root/scenarios/library" --report-dir "$root/build/report" "$@"

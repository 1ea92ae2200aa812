#!/usr/bin/env bash
# Runs a Python test with a python3 that imports torch: python3 on the PATH, else Debian's
# /usr/bin/python3 (python3-torch). Without one: skipped (exit 77, ctest's SKIP_RETURN_CODE),
# unless ZEROSIM_REQUIRE_TORCH=1 (CI sets it), then failed. Usage: run_with_torch.sh TEST.py
set -euo pipefail
for python in python3 /usr/bin/python3; do
  if "$python" -c 'import torch' > /dev/null 2>&1; then
    exec "$python" "$@"
  fi
done
if [ "${ZEROSIM_REQUIRE_TORCH:-0}" = 1 ]; then
  echo "run_with_torch: ZEROSIM_REQUIRE_TORCH=1 but no python3 imports torch (apt-get install python3-torch)" >&2
  exit 1
fi
echo "run_with_torch: no python3 imports torch; $* skipped (Debian: apt-get install python3-torch)"
exit 77

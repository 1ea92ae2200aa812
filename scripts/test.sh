#!/usr/bin/env bash
# The test command (README.md): installs what is missing, builds, runs every test but those
# labelled "gpu" (they need a GPU; run them on the GPU machine with `ctest -L gpu`), then the
# two sanitizer jobs (scripts/sanitize.sh): ASan+UBSan over every CPU test, TSan over the
# concurrent parts. ZEROSIM_SKIP_SANITIZERS=1 skips those (a quick local run); CI runs them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
# The same optimisation as a developer's build (-O2), without its debug information: the code is
# the same (GCC's -g changes no instruction), and compiling and linking take about 40 % less
# (CI's two cores spent most of their time there). A local build.sh keeps -g for gdb and perf.
"$root/scripts/build.sh" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" -DCMAKE_CUDA_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG"
# The torch hook's tests need a real PyTorch: install-deps.sh installs Debian's python3-torch, and
# here a missing torch fails them instead of skipping them.
(cd "$root/build" && ZEROSIM_REQUIRE_TORCH=1 ctest --output-on-failure -j "$(nproc)" --timeout 900 -LE gpu)
if [ "${ZEROSIM_SKIP_SANITIZERS:-0}" != 1 ]; then
  echo "== sanitizers: AddressSanitizer + UndefinedBehaviorSanitizer"
  "$root/scripts/sanitize.sh" address
  # Passed: its 4 GB of instrumented binaries go before the next build is made, so that the run
  # needs the release build and one sanitizer build on disk at a time (a failure keeps them).
  rm -rf "$root/build-asan"
  echo "== sanitizers: ThreadSanitizer"
  "$root/scripts/sanitize.sh" thread
fi

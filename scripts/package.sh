#!/usr/bin/env bash
# The Debian package: zerosim_<version>_<arch>.deb in build-package/, built without CUDA and MPI
# (Debian packages neither NCCL nor a CUDA runtime; a GPU user builds from source). Its
# dependencies are the Debian packages of the libraries the binary links (dpkg-shlibdeps).
#   scripts/package.sh                      # then: apt-get install ./build-package/zerosim_*.deb
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build-package"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
      -DZEROSIM_WITH_CUDA=OFF -DZEROSIM_WITH_MPI=OFF -DZEROSIM_BUILD_BENCH=OFF -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON > /dev/null
cmake --build "$build" --target zerosim -j "$(nproc)"
(cd "$build" && cpack -G DEB > cpack.log) || { cat "$build/cpack.log" >&2; exit 1; }
ls "$build"/zerosim_*.deb

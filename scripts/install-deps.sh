#!/usr/bin/env bash
# Installs the Debian packages zerosim builds with, only those missing. Idempotent.
#   scripts/install-deps.sh          everything the tests, benchmarks and MPI launcher need
#                                    (python3-torch: a real PyTorch for the torch hook's tests)
#   scripts/install-deps.sh --main   only what the zerosim binary builds with (scripts/run.sh)
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config libaio-dev nlohmann-json3-dev libxxhash-dev libcli11-dev)
case "${1:-}" in
  --main) ;;
  "") packages+=(librapidcheck-dev libgtest-dev libgmock-dev libxml2-utils zlib1g-dev chromium libopenmpi-dev openmpi-bin
                 python3 python3-torch) ;;
  *) echo "install-deps: unknown argument '$1' (--main, or nothing for everything)" >&2; exit 2 ;;
esac
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"

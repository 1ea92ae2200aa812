#!/usr/bin/env bash
# Installs zerosim's .deb with apt-get into a fresh Debian 12 root (debootstrap, minbase) and runs
# `zerosim --version` and the installed suite there, from a directory of the chroot: what a user
# gets from `apt-get install ./zerosim_*.deb`. Needs root and the Debian archive; not part of CI
# (tests/install_test.sh is), run by hand before a release:
#   sudo scripts/check_deb_in_fresh_root.sh build-package/zerosim_0.1.0_amd64.deb [ROOT]
set -euo pipefail
deb=$(realpath "${1:?the .deb to install}")
root=${2:-/tmp/zerosim-debian12-root}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
[ -x "$root/usr/bin/apt-get" ] || debootstrap --variant=minbase bookworm "$root" "$mirror"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp "$deb" "$root/tmp/"
mounted=()
cleanup() { for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[$i]}" || true; done; }
trap cleanup EXIT
for point in proc dev; do
  mountpoint -q "$root/$point" || { mount --bind "/$point" "$root/$point"; mounted+=("$root/$point"); }
done
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root DEBIAN_FRONTEND=noninteractive "$@"; }
in_root apt-get update -qq
in_root apt-get install -y -qq "/tmp/$(basename "$deb")"
in_root dpkg -s zerosim | grep -E '^(Version|Depends):'
# The suite's own exit status decides (0: every scenario passed).
in_root sh -c 'mkdir -p /tmp/elsewhere && cd /tmp/elsewhere && zerosim --version &&
  zerosim suite --report-dir report > suite.log 2>&1; status=$?; grep "scenario(s):" suite.log; exit $status'

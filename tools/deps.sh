#!/usr/bin/env bash
# Installs everything oslo needs to build and test, from Debian's packages and
# PyPI. Safe to run again: already-installed packages are skipped.
set -euo pipefail
pkgs=(cmake g++ make pkg-config libdnnl-dev libgloo-dev nlohmann-json3-dev libcmocka-dev
      openmpi-bin libopenmpi-dev python3 binutils)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The safetensors compatibility test compares with the reference implementation.
python3 -c "import safetensors, numpy" 2>/dev/null ||
  python3 -m pip install --quiet --disable-pip-version-check safetensors numpy

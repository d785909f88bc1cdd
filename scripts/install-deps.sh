#!/usr/bin/env bash
# Installs the Debian 12 packages tandem needs that are not installed yet (the Python
# packages, torch among them, come from pip: scripts/python-env.sh).
# Needs root (apt-get); prints what it would install and exits 1 when not root.
#
#   scripts/install-deps.sh [--demo | --list]   (--demo: without the tests' packages)
set -euo pipefail

# What building tandem and running its main job need (make demo: --demo installs only these)...
packages=(
  g++ cmake ninja-build make ccache pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libfmt-dev nlohmann-json3-dev libyaml-cpp-dev
  libhwloc-dev libhwy-dev zlib1g-dev libucx-dev
  dataset-fashion-mnist
  python3 python3-dev python3-venv  # .venv: torch, pytest from pip (scripts/python-env.sh)
)
# ...and what only the tests need (make test).
test_packages=(
  iproute2 procps clang-format
  clang libclang-rt-14-dev llvm  # libFuzzer (make fuzz), llvm-symbolizer for sanitizer reports
  debootstrap  # the wheel's test in a minimal Debian root (scripts/minbase-check.sh)
)
[ "${1:-}" = "--demo" ] || packages+=("${test_packages[@]}")
[ "${1:-}" = "--list" ] && { printf '%s\n' "${packages[@]}"; exit 0; }

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "tandem: missing Debian packages: ${missing[*]}" >&2
  echo "tandem: run 'make' as root, or install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "tandem: installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"

#!/usr/bin/env bash
# Compiles backend "tandem" (src/python, -fsyntax-only -Werror) against the headers of other
# torch releases: each release's wheel is fetched with pip (no dependencies, about 0.5-0.8 GB
# each, kept in $CACHE) and only its torch/include is unpacked. Not part of make test (the
# downloads); run it after changing src/python or torch_compat.hpp.
#
#   scripts/check-torch-headers.sh               # one release of each of 2.4-2.12, and 2.14.1
#   scripts/check-torch-headers.sh 2.9.1 2.11.0  # just these
#
# Needs make build first (build/layers, .venv). Environment: CACHE (/tmp/torch-headers),
# PYTHON (.venv/bin/python), CXX (c++).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${CACHE:-/tmp/torch-headers}
PYTHON=${PYTHON:-$PWD/.venv/bin/python}
CXX=${CXX:-c++}
versions=("$@")
[ ${#versions[@]} -eq 0 ] && versions=(2.4.1 2.5.1 2.6.0 2.7.1 2.8.0 2.9.1 2.10.0 2.11.0 2.12.1 2.14.1)
[ -d build/layers/python ] || { echo "check-torch-headers: make build first" >&2; exit 1; }
py_include=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
py_tag=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
mkdir -p "$CACHE"
failed=()
for v in "${versions[@]}"; do
  dir="$CACHE/$v"
  if [ ! -d "$dir/torch/include" ]; then
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$py_tag" \
      --platform manylinux1_x86_64 --platform manylinux_2_28_x86_64 "torch==$v" -d "$CACHE"
    mkdir -p "$dir"
    unzip -q -o "$CACHE"/torch-"$v"-*.whl 'torch/include/*' -d "$dir"
  fi
  inc="$dir/torch/include"
  ok=1
  for f in src/python/*.cpp; do
    if ! "$CXX" -DFMT_HEADER_ONLY=1 -DUSE_C10D_GLOO -DUSE_DISTRIBUTED -DUSE_RPC \
      -Ibuild/layers/python -Iinclude -isystem "$py_include" -isystem "$inc" \
      -isystem "$inc/torch/csrc/api/include" -std=c++20 -Wall -Wextra -Wpedantic -Wshadow \
      -Wnon-virtual-dtor -Woverloaded-virtual -Wimplicit-fallthrough -Werror -fsyntax-only "$f"
    then
      ok=0
    fi
  done
  if [ $ok = 1 ]; then echo "torch $v: src/python compiles"; else failed+=("$v"); fi
done
[ ${#failed[@]} -eq 0 ] || { echo "check-torch-headers: fails with torch ${failed[*]}" >&2; exit 1; }

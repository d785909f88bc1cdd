#!/usr/bin/env bash
# Packs what bench/gpu/check.sh (and, with bench/gpu/python_ext.sh, train.sh) needs into one
# directory, for a GPU machine that has a CUDA
# driver but not this build's Debian libraries (for instance an Ubuntu host): the stripped
# test and tool binaries, libtandem and libtandem_cuda, the Debian libraries they link that
# such a host may lack (fmt, hwloc, Highway, numa, UCX) and UCX's transport modules. CUDA's
# runtime and NCCL come from the GPU machine (/usr/local/cuda, or NCCL_LIB).
#
#   BUILD_DIR=build OUT=build-carry bash bench/gpu/bundle.sh
#   # on the GPU machine, from the repository root:
#   bash build-carry/run.sh            # = check.sh with the bundle's binaries and libraries
set -eu
BUILD_DIR=${BUILD_DIR:-build}
OUT=${OUT:-build-carry}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib" "$OUT/ucx" "$OUT/include"
for b in test_gpu tandemrun tandem-perf; do
  strip -o "$OUT/bin/$b" "$BUILD_DIR/bin/$b"
done
strip -o "$OUT/lib/libtandem.so.0" "$(readlink -f "$BUILD_DIR/lib/libtandem.so.0")"
ln -sf libtandem.so.0 "$OUT/lib/libtandem.so"  # what python_ext.sh links against
strip -o "$OUT/lib/libtandem_cuda.so" "$BUILD_DIR/lib/libtandem_cuda.so"
# The Debian libraries of libtandem and the tools, other than glibc's, libstdc++ and CUDA's.
ldd "$BUILD_DIR/bin/test_gpu" "$BUILD_DIR/bin/tandemrun" "$BUILD_DIR/lib/libtandem_cuda.so" |
  awk '/=> \// {print $3}' | sort -u |
  grep -E '/lib(fmt|hwloc|hwy|numa|ucm|ucp|ucs|uct)\.so' |
  while read -r lib; do cp -L "$lib" "$OUT/lib/"; done
if [ -d /usr/lib/x86_64-linux-gnu/ucx ]; then
  cp -L /usr/lib/x86_64-linux-gnu/ucx/libuct_*.so.0 "$OUT/ucx/"
fi
cp "$here/check.sh" "$here/steps.sh" "$OUT/"
# fmt's headers: bench/gpu/python_ext.sh builds the Python extension there against the
# machine's own torch and this libtandem.
cp -r /usr/include/fmt "$OUT/include/"
cat >"$OUT/run.sh" <<'RUN'
#!/usr/bin/env bash
# bench/gpu/check.sh with this bundle's binaries and libraries; logs in $OUT (default
# /tmp/tandem-gpu).
B=$(cd "$(dirname "$0")" && pwd)
nccl=${NCCL_LIB:-$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/nccl/lib 2>/dev/null | head -1)}
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib:/usr/local/cuda/lib64${nccl:+:$nccl}
export UCX_MODULE_DIR=$B/ucx
BIN=$B/bin exec bash "$B/check.sh"
RUN
chmod +x "$OUT/run.sh"
du -sh "$OUT"

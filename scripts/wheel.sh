#!/usr/bin/env bash
# make wheel: dist/tandem-<version>+torch<X.Y>-<python>-<manylinux tag>.whl, a wheel that needs
# nothing on the machine but glibc, libstdc++ and the torch it was built for.
#
#   scripts/wheel.sh            # against the torch of .venv, from the build folder BUILD_DIR
#
# It installs component "python" of BUILD_DIR (cmake/wheel.cmake: the extension, libtandem,
# libtandem_cuda where CUDA was found, tandemrun) into a staging folder beside the package's
# Python files, writes the metadata (the version gets "+torch<X.Y>", the dependency pins that
# torch release), packs it, and has auditwheel vendor every other library it links (fmt,
# yaml-cpp, hwloc, UCX, Highway, zlib, ...) into tandem.libs/. torch's own libraries, CUDA's and
# NCCL's are left out: the process has them once torch is imported (torch's CUDA builds load
# NCCL from the nvidia-nccl wheel). The platform tag is the oldest glibc the binaries allow.
#
# Needs make build first (the build folder). Environment: BUILD_DIR (build), PYTHON
# (.venv/bin/python), OUT (dist).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
PYTHON=${PYTHON:-$PWD/.venv/bin/python}
OUT=${OUT:-dist}

[ -f "$BUILD_DIR/CMakeCache.txt" ] || { echo "wheel: make build first ($BUILD_DIR)" >&2; exit 1; }
for tool in wheel auditwheel; do
  "$PYTHON" -c "import $tool" 2>/dev/null ||
    { echo "wheel: $PYTHON has no $tool (scripts/python-env.sh installs it)" >&2; exit 1; }
done

torch_version=$("$PYTHON" -c 'import torch; print(torch.__version__.split("+")[0])')
torch_minor=$(cut -d. -f1,2 <<<"$torch_version")
version=$(sed -nE 's/^version = "([^"]+)"/\1/p' pyproject.toml)
py_tag=$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
full="$version+torch$torch_minor"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage="$work/stage"
mkdir -p "$stage" "$work/raw" "$OUT"

cmake --build "$BUILD_DIR" -j "${JOBS:-2}" --target tandem_python tandemrun >/dev/null
if grep -q '^TANDEM_HAVE_CUDA:INTERNAL=ON' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null ||
  [ -f "$BUILD_DIR/lib/libtandem_cuda.so" ]; then
  cmake --build "$BUILD_DIR" -j "${JOBS:-2}" --target tandem_cuda >/dev/null
fi
cmake --install "$BUILD_DIR" --component python --prefix "$stage" >/dev/null
cp src/python/tandem/*.py "$stage/tandem/"
# A wheel stores a symbolic link as a second copy: keep the file under the name the loader
# asks for (libtandem.so.0, its soname) only.
while IFS= read -r link; do
  mv -f "$(readlink -f "$link")" "$link"
done < <(find "$stage" -type l)
[ -f "$stage/tandem/_backend.$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("SOABI"))').so" ] || {
  echo "wheel: $BUILD_DIR has no torch.distributed backend for $PYTHON (its configure log says why)" >&2
  exit 1
}

info="$stage/tandem-$full.dist-info"
mkdir -p "$info"
cat >"$info/METADATA" <<EOF
Metadata-Version: 2.1
Name: tandem
Version: $full
Summary: Data-parallel training runtime: the torch.distributed backend 'tandem' and tandemrun (built for torch $torch_minor)
Requires-Python: >=3.9
Requires-Dist: torch==$torch_minor.*
EOF
cat >"$info/WHEEL" <<EOF
Wheel-Version: 1.0
Generator: tandem scripts/wheel.sh
Root-Is-Purelib: false
Tag: $py_tag-$py_tag-linux_$(uname -m)
EOF
cat >"$info/entry_points.txt" <<EOF
[console_scripts]
tandemrun = tandem.run:main
EOF

"$PYTHON" -m wheel pack "$stage" -d "$work/raw" >/dev/null
raw=$(ls "$work"/raw/*.whl)
# torch's libraries (the extension links them; torch is imported first), CUDA's and NCCL's
# (libtandem_cuda: torch's CUDA build brings them) stay outside the wheel.
excludes=()
for lib in 'libtorch*.so*' 'libc10*.so*' 'libshm.so*' 'libcudart.so*' 'libcuda.so*' 'libnccl.so*'; do
  excludes+=(--exclude "$lib")
done
rm -f "$OUT"/tandem-"$full"-"$py_tag"-*.whl
PATH="$(dirname "$PYTHON"):$PATH" "$PYTHON" -m auditwheel repair --strip "${excludes[@]}" -w "$OUT" "$raw" >"$work/repair.log" 2>&1 || {
  cat "$work/repair.log" >&2
  exit 1
}
ls "$OUT"/tandem-"$full"-"$py_tag"-*.whl

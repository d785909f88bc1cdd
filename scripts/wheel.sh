#!/usr/bin/env bash
# make wheel: dist/tandem-<version>+torch<X.Y>-<python>-<manylinux tag>.whl, a wheel that needs
# nothing on the machine but glibc, libstdc++ and the torch it was built for.
#
#   scripts/wheel.sh                 # against the torch of .venv, from the build folder BUILD_DIR
#   TORCH=2.11.0 scripts/wheel.sh    # against torch 2.11.0's wheel from PyPI, not installed
#
# It installs component "python" of the build folder (cmake/wheel.cmake: the extension,
# libtandem, libtandem_cuda where CUDA was found, tandemrun) into a staging folder beside the
# package's Python files, writes the metadata (the version gets "+torch<X.Y>", the dependency
# pins that torch release), packs it, and has auditwheel vendor every other library it links
# (fmt, hwloc, UCX, Highway, ...) into tandem.libs/. torch's own libraries, CUDA's and NCCL's
# are left out: the process has them once torch is imported (torch's CUDA builds load them
# from their nvidia wheels). The platform tag is the oldest glibc the binaries allow.
#
# With TORCH=X.Y.Z the release's wheel (PyPI's build for this Python: for 2.11.0 that is
# 2.11.0+cu130; TORCH_WHEEL=<file> names another) is fetched once into TORCH_CACHE and
# unpacked there, and a build folder of its own, build-torchX.Y.Z, is configured against it
# (-DTANDEM_TORCH_ROOT): .venv keeps its torch. Without TORCH, make build first.
# Environment: BUILD_DIR (build; build-torchX.Y.Z with TORCH), PYTHON (.venv/bin/python), OUT
# (dist), TORCH, TORCH_WHEEL, TORCH_CACHE (/var/cache/tandem/torch), JOBS (2).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=${TORCH:-}
BUILD_DIR=${BUILD_DIR:-$([ -n "$TORCH" ] && echo "build-torch$TORCH" || echo build)}
PYTHON=${PYTHON:-$PWD/.venv/bin/python}
OUT=${OUT:-dist}
TORCH_CACHE=${TORCH_CACHE:-/var/cache/tandem/torch}

for tool in wheel auditwheel; do
  "$PYTHON" -c "import $tool" 2>/dev/null ||
    { echo "wheel: $PYTHON has no $tool (scripts/python-env.sh installs it)" >&2; exit 1; }
done
py_tag=$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')

if [ -n "$TORCH" ]; then
  whl=${TORCH_WHEEL:-$(ls "$TORCH_CACHE"/torch-"$TORCH"[-+]*-"$py_tag"-*.whl 2>/dev/null | head -1)}
  if [ -z "$whl" ]; then
    mkdir -p "$TORCH_CACHE"
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: -d "$TORCH_CACHE" \
      --python-version "${py_tag#cp}" --platform manylinux_2_28_x86_64 "torch==$TORCH" \
      2> >(grep -v "^WARNING: Location" >&2)
    whl=$(ls "$TORCH_CACHE"/torch-"$TORCH"[-+]*-"$py_tag"-*.whl | head -1)
  fi
  root="$TORCH_CACHE/$(basename "$whl" .whl)"
  if [ ! -f "$root/torch/version.py" ]; then
    rm -rf "$root.new"
    unzip -q -o "$whl" 'torch/*' -d "$root.new"
    mv "$root.new" "$root"
  fi
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
    -DTANDEM_TORCH_ROOT="$root/torch" -DPython3_EXECUTABLE="$PYTHON" \
    -DTANDEM_BUILD_TESTS=OFF -DTANDEM_BUILD_BENCH=OFF >"$BUILD_DIR.configure.log" 2>&1 ||
    { cat "$BUILD_DIR.configure.log" >&2; exit 1; }
  torch_version=$(sed -nE "s/^__version__ = '([^']+)'.*/\1/p" "$root/torch/version.py")
else
  [ -f "$BUILD_DIR/CMakeCache.txt" ] || { echo "wheel: make build first ($BUILD_DIR)" >&2; exit 1; }
  torch_version=$("$PYTHON" -c 'import torch; print(torch.__version__)')
fi
torch_minor=$(cut -d. -f1,2 <<<"${torch_version%%+*}")
version=$(sed -nE 's/^version = "([^"]+)"/\1/p' pyproject.toml)
full="$version+torch$torch_minor"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage="$work/stage"
mkdir -p "$stage" "$work/raw" "$OUT"

# The extension depends on libtandem_cuda where CUDA was found (cmake/wheel.cmake).
cmake --build "$BUILD_DIR" -j "${JOBS:-2}" --target tandem_python tandemrun >/dev/null
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
for lib in 'libtorch*.so*' 'libc10*.so*' 'libshm.so*' 'libgomp*.so*' 'libcu*.so*' 'libnv*.so*' \
  'libnccl*.so*'; do
  excludes+=(--exclude "$lib")
done
rm -f "$OUT"/tandem-"$full"-"$py_tag"-*.whl
PATH="$(dirname "$PYTHON"):$PATH" "$PYTHON" -m auditwheel repair --strip "${excludes[@]}" -w "$OUT" "$raw" >"$work/repair.log" 2>&1 || {
  cat "$work/repair.log" >&2
  exit 1
}
ls "$OUT"/tandem-"$full"-"$py_tag"-*.whl

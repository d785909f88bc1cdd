#!/usr/bin/env bash
# Builds the torch.distributed backend's extension (tandem/_backend) from this source tree
# against the torch of $PY, a prebuilt libtandem ($LIB) and fmt's headers ($FMT_INCLUDE), and
# lays the package out in $OUT/tandem: for a GPU machine that has torch, a C++20 compiler and
# nvcc but not the Debian packages libtandem itself builds from. bench/gpu/bundle.sh carries
# libtandem (build-carry/lib) and fmt's headers (build-carry/include).
#
#   bash bench/gpu/python_ext.sh                  # PY=python3 LIB=build-carry/lib OUT=build-carry/python
#   PYTHONPATH=build-carry/python python3 -c 'import tandem.torch'
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PY=${PY:-python3}
LIB=$(cd "${LIB:-build-carry/lib}" && pwd)
FMT_INCLUDE=${FMT_INCLUDE:-build-carry/include}
OUT=${OUT:-build-carry/python}
CXX=${CXX:-g++}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT/tandem" "$OUT/obj"
OUT=$(cd "$OUT" && pwd)
eval "$("$PY" - <<'PY'
import os, sysconfig, torch
from torch.utils import cpp_extension
inc = cpp_extension.include_paths() + [sysconfig.get_paths()["include"]]
print("TORCH_INC='" + " ".join("-I" + p for p in inc) + "'")
print("TORCH_LIB='" + os.path.join(os.path.dirname(torch.__file__), "lib") + "'")
print("SUFFIX='" + sysconfig.get_config_var("EXT_SUFFIX") + "'")
print("ABI='" + str(int(torch._C._GLIBCXX_USE_CXX11_ABI)) + "'")
PY
)"
flags=(-std=c++20 -O2 -fPIC -fvisibility=hidden -DFMT_HEADER_ONLY=1 -DTORCH_EXTENSION_NAME=_backend
  "-D_GLIBCXX_USE_CXX11_ABI=$ABI" -I"$root/include" -I"$root/src" -I"$FMT_INCLUDE")
# shellcheck disable=SC2086
printf '%s\n' "$root"/src/python/*.cpp | xargs -P "$JOBS" -I{} sh -c \
  "$CXX ${flags[*]} $TORCH_INC -c {} -o $OUT/obj/\$(basename {} .cpp).o"
"$CXX" -shared -o "$OUT/tandem/_backend$SUFFIX" "$OUT"/obj/*.o -L"$LIB" -ltandem \
  -L"$TORCH_LIB" -ltorch_python -ltorch -ltorch_cpu -lc10 \
  -Wl,-rpath,"$LIB" -Wl,-rpath,"$TORCH_LIB"
cp "$root"/src/python/tandem/*.py "$OUT/tandem/"
echo "built $OUT/tandem/_backend$SUFFIX against torch in $TORCH_LIB"

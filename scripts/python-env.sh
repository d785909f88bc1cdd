#!/usr/bin/env bash
# Makes the virtual environment tandem builds and tests with (.venv, or $VENV) and installs
# into it what scripts/python-requirements.txt pins and is missing: torch (LibTorch's headers,
# libraries, CMake config and pybind11 come with it), scikit-build-core, pytest; and NCCL's
# wheel (nvidia-nccl-cu13) when nvcc is on the machine and no nccl.h is, so that the CUDA
# backend builds with NCCL. Prints the environment's python. Idempotent and quick when
# nothing is missing.
#
# With FRAMEWORKS=1 (make test sets it) it also installs scripts/framework-requirements.txt:
# the training frameworks tests/python/frameworks runs on tandem, torch held at its pin.
#
#   scripts/python-env.sh            PYTHON=python3 (the interpreter the venv is made from)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-$PWD/.venv}
PYTHON=${PYTHON:-python3}
NCCL_WHEEL=${NCCL_WHEEL:-nvidia-nccl-cu13==2.30.7}
req=scripts/python-requirements.txt
py="$VENV/bin/python"

if [ ! -x "$py" ]; then
  echo "tandem: making the virtual environment $VENV from $($PYTHON -c 'import sys; print(sys.executable)')" >&2
  if ! "$PYTHON" -m venv "$VENV" >&2; then
    echo "tandem: '$PYTHON -m venv' failed: on Debian, apt-get install python3-venv" >&2
    exit 1
  fi
fi

# Installs only when a pin is unmet (pip's own check costs seconds even when nothing is new).
stamp="$VENV/.tandem-requirements"
want=$(cat "$req"; if command -v nvcc >/dev/null; then echo "$NCCL_WHEEL"; fi)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "tandem: installing Python packages into $VENV ($(grep -v '^#' "$req" | tr '\n' ' '))" >&2
  "$py" -m pip install -q -r "$req" >&2
  if command -v nvcc >/dev/null && ! [ -e "$(dirname "$(command -v nvcc)")/../include/nccl.h" ]; then
    "$py" -m pip install -q "$NCCL_WHEEL" >&2
  fi
  printf '%s' "$want" >"$stamp"
fi

# The frameworks, when asked for: their own stamp, so that `make demo` never waits for them.
freq=scripts/framework-requirements.txt
fstamp="$VENV/.tandem-frameworks"
if [ "${FRAMEWORKS:-0}" = 1 ] && [ "$(cat "$fstamp" 2>/dev/null)" != "$(cat "$freq" "$req")" ]; then
  echo "tandem: installing the training frameworks into $VENV ($(grep -v '^#' "$freq" | tr '
' ' '))" >&2
  pin=$(mktemp)
  grep -E '^torch==' "$req" >"$pin"
  # DeepSpeed builds from its sdist against the venv's torch (no isolated build, which would
  # download another torch) and with its C++/CUDA ops left to build at first use (none here).
  DS_BUILD_OPS=0 "$py" -m pip install -q --no-build-isolation -c "$pin" -r "$freq" >&2
  rm -f "$pin"
  cat "$freq" "$req" >"$fstamp"
fi
echo "$py"

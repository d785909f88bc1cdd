#!/usr/bin/env bash
# PyTorch DDP next to tandem on Fashion-MNIST, in one go: the same CNN, data, SGD and per-rank
# batch, one thread per rank; 1 rank, 2 ranks, and 2 ranks compute-only (no gradient
# communication) for each; prints one table (ms/step, images/s, scaling over 1 rank, ms/step
# over compute-only, test accuracy).
#
#   bench/pytorch_ddp/run.sh                        # one full epoch per run (6 runs)
#   MAX_STEPS=220 bench/pytorch_ddp/run.sh          # timing: 220 steps, the last 200 timed
#   EPOCHS=10 bench/pytorch_ddp/run.sh              # accuracy: 10 epochs per run
#
# PyTorch: torch 2.13.0 from pip in <repo>/.venv (scripts/python-env.sh), gloo, launched by its torchrun
# (train.py in this folder). tandem: BUILD_DIR/bin/tandemrun and BUILD_DIR/bin/fashion_mnist
# (BUILD_DIR default: <repo>/build; make build); with WITH_TANDEM=0, or when they are missing,
# only PyTorch runs. Knobs: EPOCHS (default 1), MAX_STEPS (default 0: full epochs), BATCH
# (per rank, default 64), NP (default 2), RUN_TIMEOUT (seconds per run, default 3600), OUT
# (raw logs; default: a fresh temporary directory, named on the first line).
# Installs torch (scripts/python-env.sh) and dataset-fashion-mnist (as root) when missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
BUILD_DIR=${BUILD_DIR:-$repo/build}
EPOCHS=${EPOCHS:-1}
MAX_STEPS=${MAX_STEPS:-0}
BATCH=${BATCH:-64}
NP=${NP:-2}
RUN_TIMEOUT=${RUN_TIMEOUT:-3600}
PYTHON=${PYTHON:-$repo/.venv/bin/python}
TORCHRUN=${TORCHRUN:-$(dirname "$PYTHON")/torchrun}
DATA=/usr/share/datasets/fashion-mnist
if [ -z "${WITH_TANDEM:-}" ]; then
  WITH_TANDEM=0
  [ -x "$BUILD_DIR/bin/tandemrun" ] && [ -x "$BUILD_DIR/bin/fashion_mnist" ] && WITH_TANDEM=1
fi

if ! "$PYTHON" -c "import torch" 2>/dev/null || [ ! -x "$TORCHRUN" ]; then
  [ "$PYTHON" = "$repo/.venv/bin/python" ] || {
    echo "run.sh: $PYTHON cannot import torch or $TORCHRUN is missing" >&2
    exit 1
  }
  "$repo/scripts/python-env.sh" >/dev/null
fi
if [ ! -f "$DATA/train-images-idx3-ubyte.gz" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "run.sh: the dataset in $DATA is missing; run as root, or:" \
      "sudo apt-get install -y dataset-fashion-mnist" >&2
    exit 1
  fi
  echo "run.sh: installing dataset-fashion-mnist"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends dataset-fashion-mnist
fi
if [ "$WITH_TANDEM" = 1 ]; then
  for b in tandemrun fashion_mnist; do
    if [ ! -x "$BUILD_DIR/bin/$b" ]; then
      echo "run.sh: $BUILD_DIR/bin/$b is missing: build tandem first (make build)" \
        "or set BUILD_DIR" >&2
      exit 1
    fi
  done
else
  echo "run.sh: tandem left out (WITH_TANDEM=0, or no tandemrun/fashion_mnist in $BUILD_DIR/bin)"
fi

OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/pytorch-ddp-bench.XXXXXX")}
mkdir -p "$OUT"
export OMP_NUM_THREADS=1  # one thread per rank on both sides (train.py also sets it itself)

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# pytorch NAME RANKS ARGS...: train.py under torchrun; rank 0's log becomes $OUT/NAME.log.
pytorch() {
  local name=$1 np=$2 logs="$OUT/torchrun-$1" rc=0 log
  shift 2
  echo "run.sh: pytorch $name: $np rank(s) $*"
  timeout -k 10 "$RUN_TIMEOUT" "$TORCHRUN" --nnodes 1 --node_rank 0 --nproc_per_node "$np" \
    --master_addr 127.0.0.1 --master_port "$(free_port)" \
    --redirects 1 --tee 1 --log_dir "$logs" \
    "$here/train.py" --epochs "$EPOCHS" --max-steps "$MAX_STEPS" --batch-per-rank "$BATCH" \
    "$@" >"$OUT/torchrun-$name.console" 2>&1 || rc=$?
  log=$(find "$logs" -path '*/attempt_*/0/stdout.log' 2>/dev/null | sort | tail -n 1)
  [ -n "$log" ] && cp "$log" "$OUT/$name.log"
  if [ "$rc" -ne 0 ]; then
    echo "run.sh: pytorch $name failed (status $rc; 124: past $RUN_TIMEOUT s); see" \
      "$OUT/torchrun-$name.console and $logs" >&2
    tail -n 20 "$OUT/torchrun-$name.console" >&2
  fi
  return "$rc"
}

# tandem NAME RANKS ARGS...: fashion_mnist under tandemrun; its output goes to $OUT/NAME.log.
tandem() {
  local name=$1 np=$2 rc=0
  shift 2
  echo "run.sh: tandem $name: $np rank(s) $*"
  timeout -k 10 "$RUN_TIMEOUT" "$BUILD_DIR/bin/tandemrun" --nproc-per-node "$np" \
    "$BUILD_DIR/bin/fashion_mnist" -o training.batch_size=0 \
    -o training.batch_size_per_rank="$BATCH" -o training.epochs="$EPOCHS" \
    -o training.max_steps="$MAX_STEPS" "$@" \
    >"$OUT/$name.log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "run.sh: tandem $name failed (status $rc; 124: past $RUN_TIMEOUT s); see" \
      "$OUT/$name.log" >&2
    tail -n 20 "$OUT/$name.log" >&2
  fi
  return "$rc"
}

echo "run.sh: Fashion-MNIST, per-rank batch $BATCH, epochs $EPOCHS, max steps $MAX_STEPS" \
  "(0: full epochs), $NP ranks; raw logs in $OUT"
status=0
pytorch pytorch-ddp-1 1 || status=$?
pytorch pytorch-ddp-"$NP" "$NP" || status=$?
pytorch pytorch-compute-"$NP" "$NP" --no-ddp || status=$?
if [ "$WITH_TANDEM" = 1 ]; then
  tandem tandem-ddp-1 1 || status=$?
  tandem tandem-ddp-"$NP" "$NP" || status=$?
  tandem tandem-compute-"$NP" "$NP" -o ddp.enabled=false || status=$?
fi
"$PYTHON" "$here/compare.py" "$OUT" "$NP" || status=$?
echo "run.sh: raw logs in $OUT"
exit "$status"

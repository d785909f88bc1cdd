#!/usr/bin/env bash
# torch.distributed with backend gloo and backend tandem, side by side, in one run: the same
# Python program (collectives.py) sweeps all_reduce, broadcast and all_gather from MIN to MAX
# bytes on NP ranks under tandemrun with each backend, tandem-perf measures the same sizes, and
# the Fashion-MNIST CNN trains with Python DDP (bench/pytorch_ddp/train.py --backend) with
# each, DDP_ROUNDS times interleaved, and so does FSDP2 on a small transformer LM (fsdp2.py,
# FSDP_ROUNDS times), and so do the training stack's components (stack.py, STACK_ROUNDS
# times). The sweeps run ROUNDS times, interleaved (gloo, tandem, tandem-perf in
# each round), and each cell is the median of the rounds: one machine's noise shows in one
# round, not in the table. Prints the tables (compare.py) and draws DIR/busbw.png (bench/plot.gp).
#
#   bench/torch_backend/run.sh                     # sweep 8 B .. 128 MiB, DDP 1 epoch
#   EPOCHS=0 MAX_STEPS=220 bench/torch_backend/run.sh   # DDP timing only
#
# Knobs: MIN, MAX, FACTOR (bench/lib.sh), NP (2), ROUNDS (3), BUDGET (timed seconds per size, 0.5),
# EPOCHS (1), MAX_STEPS (0: whole epochs), DDP_ROUNDS (3: interleaved DDP runs, medians),
# FSDP_ROUNDS (3: interleaved FSDP2 runs of fsdp2.py, medians; 0 skips them),
# STACK_ROUNDS (3: interleaved runs of stack.py, the training stack component by component),
# OUT (default: a fresh temporary directory).
# Needs make build (which makes .venv with torch 2.13.0); installs dataset-fashion-mnist and
# gnuplot when missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=../lib.sh
source "$repo/bench/lib.sh"
BUDGET=${BUDGET:-0.5}
ROUNDS=${ROUNDS:-3}
EPOCHS=${EPOCHS:-1}
MAX_STEPS=${MAX_STEPS:-0}
DDP_ROUNDS=${DDP_ROUNDS:-3}
FSDP_ROUNDS=${FSDP_ROUNDS:-3}
STACK_ROUNDS=${STACK_ROUNDS:-3}
PYTHON=${PYTHON:-$repo/.venv/bin/python}
export TANDEM_PYTHON=$PYTHON OMP_NUM_THREADS=1

"$PYTHON" -c "import torch" 2>/dev/null || { echo "run.sh: $PYTHON cannot import torch: make build" >&2; exit 1; }
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
  install_packages "Fashion-MNIST" dataset-fashion-mnist
command -v gnuplot >/dev/null || install_packages "gnuplot" gnuplot-nox
for f in bin/tandemrun bin/tandem-perf python/tandem/torch.py; do
  [ -e "$BUILD_DIR/$f" ] || { echo "run.sh: $BUILD_DIR/$f is missing: make build first" >&2; exit 1; }
done
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/torch-backend-bench.XXXXXX")}
mkdir -p "$OUT"
echo "run.sh: $NP ranks, $MIN .. $MAX x$FACTOR; logs in $OUT"
run=("$BUILD_DIR/bin/tandemrun" --nproc-per-node "$NP")
for round in $(seq 1 "$ROUNDS"); do
  for backend in gloo tandem; do
    echo "run.sh: round $round: collectives with backend $backend"
    direct=()
    [ "$backend" = tandem ] && direct=(--direct)  # torch against tandem's own call, same process
    timeout -k 10 "$RUN_TIMEOUT" "${run[@]}" "$here/collectives.py" --backend "$backend" \
      --min "$MIN" --max "$MAX" --factor "$FACTOR" --time-budget "$BUDGET" "${direct[@]}" \
      >"$OUT/$backend-collectives.r$round.log" 2>&1
  done
  for c in allreduce broadcast allgather; do
    echo "run.sh: round $round: tandem-perf $c"
    timeout -k 10 "$RUN_TIMEOUT" "${run[@]}" "$BUILD_DIR/bin/tandem-perf" -c "$c" -b "$MIN" \
      -e "$MAX" -f "$FACTOR" -n 200 -w 20 >"$OUT/perf-$c.r$round.log" 2>&1
  done
done
if [ "$EPOCHS" != 0 ] || [ "$MAX_STEPS" != 0 ]; then
  # Interleaved rounds too: one run's ms/step on this VM varies by more than the backends do.
  for round in $(seq 1 "$DDP_ROUNDS"); do
    for backend in gloo tandem; do
      echo "run.sh: round $round: Fashion-MNIST DDP with backend $backend"
      timeout -k 10 "$RUN_TIMEOUT" "${run[@]}" "$repo/bench/pytorch_ddp/train.py" \
        --backend "$backend" --epochs "$EPOCHS" --max-steps "$MAX_STEPS" \
        >"$OUT/$backend-ddp.r$round.log" 2>&1
    done
  done
fi
# interleaved NAME ROUNDS WHAT: NAME.py of this folder with each backend, ROUNDS times
# interleaved, into <backend>-NAME.r<k>.log (a failed run leaves its log for compare.py).
interleaved() {
  local name=$1 rounds=$2 what=$3 round backend
  for round in $(seq 1 "$rounds"); do
    for backend in gloo tandem; do
      echo "run.sh: round $round: $what with backend $backend"
      timeout -k 10 "$RUN_TIMEOUT" "${run[@]}" "$here/$name.py" --backend "$backend" \
        >"$OUT/$backend-$name.r$round.log" 2>&1 || true
    done
  done
}
# FSDP2 on a small transformer LM (fsdp2.py), and the training stack component by component
# (stack.py: TP, DTensor, functional collectives, batch_isend_irecv, object collectives,
# distributed checkpoint).
interleaved fsdp2 "$FSDP_ROUNDS" FSDP2
interleaved stack "$STACK_ROUNDS" "training stack components"
"$PYTHON" "$here/compare.py" "$OUT" | tee "$OUT/tables.md"
gnuplot -e "dir='$OUT'; out='$OUT/busbw.png'; colls='all_reduce broadcast all_gather'; last=4; \
title='torch.distributed busbw: backend tandem vs gloo, $NP ranks, float32'" "$repo/bench/plot.gp"
echo "run.sh: tables in $OUT/tables.md, plot in $OUT/busbw.png"

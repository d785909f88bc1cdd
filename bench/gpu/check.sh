#!/usr/bin/env bash
# The GPU checks of docs/gpu.md in one run, for a machine with at least one GPU: the gpu
# tests, then tandem-perf --device cuda:0 allreduce on 2 and 4 ranks sharing GPU 0 (CUDA IPC)
# and on 1 rank (NCCL), each footer giving the device-to-device copy measured in the same run.
# Every step has its own time limit; a failing step is reported and the next one runs.
# MPS=1 repeats the shared-GPU runs under an MPS daemon started (and stopped) by this script.
#
#   BIN=build/bin OUT=/tmp/tandem-gpu bash bench/gpu/check.sh
#
# Logs land in $OUT (env.txt, tests.log, perf-N.log, summary.txt); the exit status is the
# number of failed steps.
set -u
BIN=${BIN:-build/bin}
OUT=${OUT:-/tmp/tandem-gpu}
MAX=${MAX:-256M}
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: >"$summary"
. "$(dirname "$0")/steps.sh"

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  uname -r
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  nproc
} >"$OUT/env.txt"

# One process per test, so that a test that hangs costs its own limit, not the others'.
: >"$OUT/tests.log"
for t in $("$BIN/test_gpu" --gtest_list_tests | awk '/^[^ ]/ {s = $1} /^  / {print s $1}'); do
  : >"$OUT/test.tmp"
  step "test $t" 75 "$OUT/test.tmp" "$BIN/test_gpu" --gtest_color=no --gtest_filter="$t"
  head -c 200000 "$OUT/test.tmp" >>"$OUT/tests.log"  # a failing check can repeat itself
  grep -E '^\[  SKIPPED \] [^ ]+ \(|PeerLost after' "$OUT/test.tmp" >>"$summary"
done
rm -f "$OUT/test.tmp"

for np in 2 4; do
  : >"$OUT/perf-$np.log"
  step "allreduce on $np ranks sharing cuda:0" 120 "$OUT/perf-$np.log" \
    env TANDEM_DEBUG=INFO "$BIN/tandemrun" --nproc-per-node "$np" \
    "$BIN/tandem-perf" --device cuda:0 -b 8 -e "$MAX" -f 2 -n 50 -w 5
  for c in broadcast allgather reduce_scatter; do
    step "$c on $np ranks sharing cuda:0" 60 "$OUT/perf-$np.log" \
      "$BIN/tandemrun" --nproc-per-node "$np" \
      "$BIN/tandem-perf" --device cuda:0 -c "$c" -b 8 -e "$MAX" -f 8 -n 20 -w 3
  done
done
: >"$OUT/perf-1.log"
step "allreduce on 1 rank (NCCL)" 60 "$OUT/perf-1.log" \
  env TANDEM_DEBUG=INFO "$BIN/tandem-perf" --device cuda:0 -b 8 -e "$MAX" -f 2 -n 50 -w 5

# With MPS=1, the ranks sharing the GPU again under an MPS daemon of this run's own (one GPU
# context for all processes: their kernels no longer take turns on the GPU).
if [ "${MPS:-0}" = 1 ] && command -v nvidia-cuda-mps-control >/dev/null; then
  CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d) CUDA_MPS_LOG_DIRECTORY=$(mktemp -d)
  export CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  nvidia-cuda-mps-control -d
  for np in 2 4; do
    : >"$OUT/perf-mps-$np.log"
    step "allreduce on $np ranks sharing cuda:0 under MPS" 60 "$OUT/perf-mps-$np.log" \
      "$BIN/tandemrun" --nproc-per-node "$np" \
      "$BIN/tandem-perf" --device cuda:0 -b 8 -e "$MAX" -f 2 -n 50 -w 5
  done
  echo quit | nvidia-cuda-mps-control
fi

echo "$failed failed steps" | tee -a "$summary"
exit "$failed"

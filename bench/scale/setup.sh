#!/usr/bin/env bash
# What setup costs as the world grows, N ranks of this host over TCP (TANDEM_SHM_DISABLE=1):
# the whole run of `tandemrun tandem-perf -c allreduce -b 8 -e 8 -n 1 -w 0` (process start,
# setup, one allreduce, teardown), the slowest rank's communicator setup, store requests and
# TCP connections per rank and its memory at the end of setup (resident, of it shared memory),
# from each rank's TANDEM_DEBUG=INFO lines. SHM=1 lets the ranks use shared memory (one
# segment per rank with a channel per peer) instead of TCP.
#
#   bash bench/scale/setup.sh                    # SIZES="16 64 128 256" BUILD_DIR=build
set -eu
here=$(cd "$(dirname "$0")" && pwd)
BUILD_DIR=${BUILD_DIR:-build}
SIZES=${SIZES:-16 64 128 256}
OUT=${OUT:-$BUILD_DIR/bench-scale}
mkdir -p "$OUT"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
SHM_DISABLE=$([ "${SHM:-0}" = 1 ] && echo 0 || echo 1)
echo "| ranks | whole run | setup, slowest rank | store requests per rank | connections per rank | memory per rank (of it shared) | store server |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for n in $SIZES; do
  log="$OUT/setup-$n.log"
  start=$(date +%s.%N)
  TANDEM_SHM_DISABLE=$SHM_DISABLE TANDEM_DEBUG=INFO TANDEM_DEBUG_SUBSYS=INIT,STORE \
    "$BUILD_DIR/bin/tandemrun" --nproc-per-node "$n" "$BUILD_DIR/bin/tandem-perf" \
    -c allreduce -b 8 -e 8 -n 1 -w 0 >"$log" 2>&1 || { echo "| $n | failed: see $log |"; continue; }
  end=$(date +%s.%N)
  IFS=$'\t' read -r setup reqs conns memory server < <(python3 "$here/info_lines.py" "$log")
  echo "| $n | $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.2f", b - a}') s | $setup ms | $reqs | $conns | $memory | $server |"
done

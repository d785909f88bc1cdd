#!/usr/bin/env bash
# More ranks than cores: an 8 B allreduce on NP ranks (32) of this host, p50 over ITERS calls, for
# tandem as it chooses (TANDEM_SPIN_US=auto: yield on every poll), tandem with a fixed 50 us spin
# (TANDEM_SPIN_US=50, the choice where ranks have CPUs of their own), and Open MPI's vader with
# --oversubscribe (it yields while it polls), interleaved for ROUNDS rounds. Open MPI comes from
# Debian's openmpi-bin (installed when run as root).
#
#   bash bench/scale/oversubscribed.sh            # BUILD_DIR=build NP=32 ROUNDS=3 ITERS=200
set -eu
here=$(cd "$(dirname "$0")" && pwd)
BUILD_DIR=${BUILD_DIR:-build}
NP=${NP:-32}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-200}
OUT=${OUT:-$BUILD_DIR/bench-oversubscribed}
mkdir -p "$OUT"
if ! command -v mpicc.openmpi >/dev/null; then
  [ "$(id -u)" = 0 ] || { echo "install openmpi-bin libopenmpi-dev (as root)" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q openmpi-bin libopenmpi-dev >/dev/null
fi
mpicc.openmpi -O2 -std=c11 -o "$OUT/mpi_bench" "$here/../openmpi/mpi_bench.c"
p50() {  # the p50 column of the 8 B row (tandem-perf and mpi_bench print the same columns)
  awk '{sub(/^\[rank 0\]: */, "")} $1 == 8 {print $7; exit}'
}
echo "| round | tandem (auto) | tandem (TANDEM_SPIN_US=50) | Open MPI vader --oversubscribe |"
echo "|---|---:|---:|---:|"
for r in $(seq 1 "$ROUNDS"); do
  a=$(TANDEM_SPIN_US=auto "$BUILD_DIR/bin/tandemrun" --nproc-per-node "$NP" \
    "$BUILD_DIR/bin/tandem-perf" -c allreduce -b 8 -e 8 -n "$ITERS" -w 20 2>&1 | p50)
  s=$(TANDEM_SPIN_US=50 "$BUILD_DIR/bin/tandemrun" --nproc-per-node "$NP" \
    "$BUILD_DIR/bin/tandem-perf" -c allreduce -b 8 -e 8 -n "$ITERS" -w 20 2>&1 | p50)
  m=$(mpirun.openmpi --allow-run-as-root -np "$NP" --bind-to none --oversubscribe --mca pml ob1 \
    --mca btl self,vader --mca btl_vader_single_copy_mechanism none \
    "$OUT/mpi_bench" -c allreduce -b 8 -e 8 -n "$ITERS" -w 20 2>&1 | p50)
  echo "| $r | $a us | $s us | $m us |"
done

#!/usr/bin/env bash
# The smallest broadcast without tandem-perf's clock reads: a loop of 8 B in-place broadcasts
# on 2 ranks, tandem and Open MPI (vader, no single copy) interleaved ROUNDS times, and the
# cost of the wire's cache lines alone (bench/latency/ring_cells.cpp: 8-byte messages through
# rings of 64-, 32- and 16-byte cells between two processes).
#
#   bench/latency/run.sh                  # 3 rounds of 10^6 broadcasts each
#   ROUNDS=5 CALLS=3000000 bench/latency/run.sh
#
# BUILD_DIR (default: <repo>/build) must hold bin/tandemrun and lib/libtandem.so (make build).
# Every run is killed after RUN_TIMEOUT seconds (default 900), so nothing hangs.
# Installs Debian's openmpi-bin and libopenmpi-dev when mpicc.openmpi is missing (as root).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"
OUT=${OUT:-$BUILD_DIR/bench-latency}
ROUNDS=${ROUNDS:-3}
CALLS=${CALLS:-1000000}

if ! command -v mpicc.openmpi >/dev/null || ! command -v mpirun.openmpi >/dev/null; then
  install_packages "Open MPI" openmpi-bin libopenmpi-dev
fi
if [ ! -x "$BUILD_DIR/bin/tandemrun" ] || [ ! -e "$BUILD_DIR/lib/libtandem.so" ]; then
  echo "run.sh: $BUILD_DIR has no tandemrun or libtandem.so: build tandem first (make build)" >&2
  exit 1
fi
mkdir -p "$OUT"
c++ -O2 -std=c++20 -o "$OUT/ring_cells" "$here/ring_cells.cpp"
c++ -O2 -std=c++20 -I"$repo/include" -o "$OUT/bcast_loop" "$here/bcast_loop.cpp" \
  -L"$BUILD_DIR/lib" -ltandem -Wl,-rpath,"$BUILD_DIR/lib"
mpicc.openmpi -O2 -o "$OUT/bcast_loop_mpi" "$here/bcast_loop.c"

for r in $(seq "$ROUNDS"); do
  echo "round $r"
  for cell in 64 32 16; do timeout -k 5 "$RUN_TIMEOUT" "$OUT/ring_cells" "$cell" 64 5000000; done
  timeout -k 5 "$RUN_TIMEOUT" "$BUILD_DIR/bin/tandemrun" --nproc-per-node 2 \
    "$OUT/bcast_loop" "$CALLS"
  timeout -k 5 "$RUN_TIMEOUT" mpirun.openmpi --allow-run-as-root -np 2 --bind-to none \
    --mca pml ob1 --mca btl self,vader "$OUT/bcast_loop_mpi" "$CALLS"
done

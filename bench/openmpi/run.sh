#!/usr/bin/env bash
# tandem-perf next to Open MPI on this host: allreduce, broadcast and allgather on NP ranks,
# over shared memory and over TCP loopback, same sizes, iterations and columns; prints both
# tables side by side.
#
#   bench/openmpi/run.sh                     # 2 ranks, 8 B .. 128 MiB x4, 20 iterations
#   MIN=1K MAX=16M FACTOR=2 ITERS=50 WARMUP=10 NP=4 COLLECTIVES="allreduce" bench/openmpi/run.sh
#
# BUILD_DIR (default: <repo>/build) must hold bin/tandemrun and bin/tandem-perf (make build).
# Installs Debian's openmpi-bin and libopenmpi-dev when mpicc/mpirun are missing (as root).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
BUILD_DIR=${BUILD_DIR:-$repo/build}
MIN=${MIN:-8}
MAX=${MAX:-128M}
FACTOR=${FACTOR:-4}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
NP=${NP:-2}
COLLECTIVES=${COLLECTIVES:-"allreduce broadcast allgather"}
OUT=${OUT:-$BUILD_DIR/bench-openmpi}

if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "run.sh: Open MPI is missing; run as root, or: sudo apt-get install -y openmpi-bin libopenmpi-dev" >&2
    exit 1
  fi
  echo "run.sh: installing openmpi-bin libopenmpi-dev"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends openmpi-bin libopenmpi-dev
fi
for b in tandemrun tandem-perf; do
  if [ ! -x "$BUILD_DIR/bin/$b" ]; then
    echo "run.sh: $BUILD_DIR/bin/$b is missing: build tandem first (make build) or set BUILD_DIR" >&2
    exit 1
  fi
done

mkdir -p "$OUT"
mpicc -O2 -std=c11 -o "$OUT/mpi_bench" "$here/mpi_bench.c"

# ob1 so that the btl choice below is what runs (not UCX); no CMA single-copy, which
# containers often forbid.
mpirun_flags=(--allow-run-as-root -np "$NP" --bind-to none --oversubscribe
  --mca pml ob1 --mca btl_vader_single_copy_mechanism none)
echo "run.sh: $NP ranks, sizes $MIN..$MAX x$FACTOR, $ITERS iterations ($WARMUP warmup); results in $OUT"
for c in $COLLECTIVES; do
  args=(-c "$c" -b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" -w "$WARMUP")
  echo "run.sh: $c: Open MPI shm, Open MPI tcp, tandem shm, tandem tcp"
  mpirun "${mpirun_flags[@]}" --mca btl self,vader "$OUT/mpi_bench" "${args[@]}" \
    > "$OUT/mpi-shm-$c.txt"
  mpirun "${mpirun_flags[@]}" --mca btl self,tcp --mca btl_tcp_if_include lo \
    "$OUT/mpi_bench" "${args[@]}" > "$OUT/mpi-tcp-$c.txt"
  "$BUILD_DIR/bin/tandemrun" --nproc-per-node "$NP" "$BUILD_DIR/bin/tandem-perf" "${args[@]}" \
    --json "$OUT/tandem-shm-$c.json" > "$OUT/tandem-shm-$c.txt"
  TANDEM_SHM_DISABLE=1 "$BUILD_DIR/bin/tandemrun" --nproc-per-node "$NP" \
    "$BUILD_DIR/bin/tandem-perf" "${args[@]}" --json "$OUT/tandem-tcp-$c.json" \
    > "$OUT/tandem-tcp-$c.txt"
done
python3 "$here/compare.py" "$OUT" $COLLECTIVES

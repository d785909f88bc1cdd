#!/usr/bin/env bash
# MPICH on this host, to read next to tandem-perf and Open MPI: allreduce, broadcast and
# allgather on NP ranks over shared memory, timed by the same bench/openmpi/mpi_bench.c (same
# sizes, iterations and columns), built with MPICH's own compiler wrapper.
#
#   bench/mpich/run.sh                    # 2 ranks, 8 B .. 128 MiB x4, 20 iterations
#   COLLECTIVES=allreduce MIN=1K MAX=16M FACTOR=2 ITERS=50 WARMUP=10 bench/mpich/run.sh
#   MPI_ALGOS=sweep bench/mpich/run.sh    # MPICH's fastest algorithm per size
#
# Debian's MPICH 4.0 is built with the ch4:ucx device (`mpichversion`): every message, between
# ranks of one host too, goes through UCX, so UCX_TLS selects the path: sm,self is UCX's shared
# memory (UCX_LOG_LEVEL=info shows the lanes tag(sysv/memory cma/memory): a System V segment
# for small messages, cross-memory attach for large ones); MPICH_UCX_TLS overrides it. Open MPI
# and MPICH coexist: this calls mpicc.mpich and mpirun.mpich explicitly.
#
# MPI_ALGOS=default (the default) runs MPICH's own selection (auto); MPI_ALGOS=sweep also forces
# each algorithm through MPIR_CVAR_<COLLECTIVE>_INTRA_ALGORITHM and keeps, per size and column,
# the fastest (bench/best_of.py; the last column names it). Results: $OUT/mpich-shm-<c>.txt
# (OUT defaults to <repo>/build/bench-mpich). Every run is killed after RUN_TIMEOUT seconds
# (default 900). Installs Debian's mpich and libmpich-dev when missing (as root).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"
OUT=${OUT:-$BUILD_DIR/bench-mpich}
MPI_ALGOS=${MPI_ALGOS:-default}
export UCX_TLS=${MPICH_UCX_TLS:-sm,self}

if ! command -v mpicc.mpich >/dev/null || ! command -v mpirun.mpich >/dev/null; then
  install_packages MPICH mpich libmpich-dev
fi

mkdir -p "$OUT"
mpicc.mpich -O2 -std=c11 -o "$OUT/mpich_bench" "$here/../openmpi/mpi_bench.c"
device=$(mpichversion 2>/dev/null | sed -n 's/^MPICH Device:[[:space:]]*//p')
version=$(mpichversion 2>/dev/null | sed -n 's/^MPICH Version:[[:space:]]*//p')

# Algorithm names of MPIR_CVAR_<COLLECTIVE>_INTRA_ALGORITHM (auto: MPICH's own choice). "nb"
# (the non-blocking schedule) and "smp" (node-aware; one node here) are left out.
candidates() {
  [ "$MPI_ALGOS" = sweep ] || { echo auto; return; }
  case $1 in
    allreduce) echo "auto recursive_doubling reduce_scatter_allgather" ;;
    broadcast) echo "auto binomial scatter_recursive_doubling_allgather scatter_ring_allgather" ;;
    allgather) echo "auto brucks recursive_doubling ring" ;;
  esac
}

echo "run.sh: MPICH $version ($device), UCX_TLS=$UCX_TLS, $NP ranks, sizes $MIN..$MAX" \
  "x$FACTOR, $ITERS iterations ($WARMUP warmup), algorithms: $MPI_ALGOS; results in $OUT"
status=0
for c in $COLLECTIVES; do
  args=(-c "$c" -b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" -w "$WARMUP")
  var=MPIR_CVAR_${c^^}_INTRA_ALGORITHM
  [ "$c" = broadcast ] && var=MPIR_CVAR_BCAST_INTRA_ALGORITHM
  rm -f "$OUT/mpich-shm-$c".*.txt
  rc=0
  for a in $(candidates "$c"); do
    echo "run.sh: $c: MPICH shm, $var=$a"
    env "$var=$a" timeout -k 5 "$RUN_TIMEOUT" mpirun.mpich -np "$NP" "$OUT/mpich_bench" \
      "${args[@]}" -a "$a" > "$OUT/mpich-shm-$c.$a.txt" || rc=$?
  done
  python3 "$here/../best_of.py" "$OUT/mpich-shm-$c.txt" "$OUT/mpich-shm-$c".*.txt ||
    { [ "$rc" -ne 0 ] || rc=1; }
  if [ "$rc" -ne 0 ]; then
    echo "run.sh: MPICH $c failed (status $rc); see $OUT/mpich-shm-$c.*.txt" >&2
    status=$rc
  fi
  cat "$OUT/mpich-shm-$c.txt"
done
exit "$status"

#!/usr/bin/env bash
# tandem-perf next to Open MPI on this host: allreduce, broadcast and allgather on NP ranks,
# over shared memory and over TCP loopback, same sizes, iterations and columns; prints both
# tables side by side.
#
#   bench/openmpi/run.sh                     # 2 ranks, 8 B .. 128 MiB x4, 20 iterations
#   MIN=1K MAX=16M FACTOR=2 ITERS=50 WARMUP=10 NP=4 COLLECTIVES="allreduce" bench/openmpi/run.sh
#   MPI_ALGOS=sweep WITH_TANDEM=0 bench/openmpi/run.sh   # Open MPI only, its fastest algorithm
#
# MPI_ALGOS=default (the default) runs coll/tuned's own decision; MPI_ALGOS=sweep also forces
# each algorithm that differs on few ranks (coll_tuned_<collective>_algorithm) and keeps, per
# size and column, the fastest (bench/best_of.py; the last column names it). Every run is killed
# after RUN_TIMEOUT seconds (default 900). WITH_TANDEM=0 skips tandem-perf.
# BUILD_DIR (default: <repo>/build) must hold bin/tandemrun and bin/tandem-perf (make build).
# Installs Debian's openmpi-bin and libopenmpi-dev when mpicc.openmpi/mpirun.openmpi
# are missing (as root).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"
OUT=${OUT:-$BUILD_DIR/bench-openmpi}
MPI_ALGOS=${MPI_ALGOS:-default}
WITH_TANDEM=${WITH_TANDEM:-1}

# Open MPI's own names: with MPICH installed too, plain mpicc/mpirun may be MPICH's.
if ! command -v mpicc.openmpi >/dev/null || ! command -v mpirun.openmpi >/dev/null; then
  install_packages "Open MPI" openmpi-bin libopenmpi-dev
fi
for b in tandemrun tandem-perf; do
  if [ "$WITH_TANDEM" = 1 ] && [ ! -x "$BUILD_DIR/bin/$b" ]; then
    echo "run.sh: $BUILD_DIR/bin/$b is missing: build tandem first (make build) or set BUILD_DIR" >&2
    exit 1
  fi
done

mkdir -p "$OUT"
mpicc.openmpi -O2 -std=c11 -o "$OUT/mpi_bench" "$here/mpi_bench.c"

# ob1 so that the btl choice below is what runs (not UCX); no CMA single-copy, which
# containers often forbid (MPI_ALGOS=sweep over shared memory also tries it: candidate "cma").
# --oversubscribe also makes Open MPI yield the core while it polls: on a machine busy with
# other work its small messages then take microseconds, not whole scheduler slices.
mpirun_flags=(--allow-run-as-root -np "$NP" --bind-to none --oversubscribe --mca pml ob1)

# Candidates "number:name" of coll_tuned_<collective>_algorithm (0: tuned's own decision). On 2
# ranks the others collapse into these (a two-rank ring, pairwise exchange and two_proc send the
# same messages).
candidates() {  # COLLECTIVE NET
  local net=$2
  [ "$MPI_ALGOS" = sweep ] || { echo "0:tuned"; return; }
  case $1 in
    allreduce) echo "0:tuned 3:recursive_doubling 4:ring 6:rabenseifner" ;;
    broadcast) echo "0:tuned 1:basic_linear 6:binomial 8:scatter_allgather" ;;
    allgather) echo "0:tuned 3:recursive_doubling 4:ring 6:two_proc" ;;
  esac
  [ "$net" != shm ] || echo "0:cma"  # tuned's decision with vader's CMA single copy
}

# run_mpi NET COLLECTIVE BTL-FLAGS...: every candidate into mpi-NET-COLLECTIVE.ALGO.txt, the
# fastest per size into mpi-NET-COLLECTIVE.txt. Returns non-zero if a run failed.
run_mpi() {
  local net=$1 c=$2 rc=0 spec n name mca
  shift 2
  mca=$c
  [ "$c" = broadcast ] && mca=bcast
  rm -f "$OUT/mpi-$net-$c".*.txt
  for spec in $(candidates "$c" "$net"); do
    n=${spec%%:*} name=${spec#*:}
    local forced=()
    [ "$n" = 0 ] || forced=(--mca coll_tuned_use_dynamic_rules 1 --mca "coll_tuned_${mca}_algorithm" "$n")
    local copy=none
    [ "$name" != cma ] || copy=cma
    local bad=0
    timeout -k 5 "$RUN_TIMEOUT" mpirun.openmpi "${mpirun_flags[@]}" "$@" "${forced[@]}" \
      --mca btl_vader_single_copy_mechanism "$copy" "$OUT/mpi_bench" "${args[@]}" -a "$name" \
      > "$OUT/mpi-$net-$c.$name.txt" || bad=$?
    if [ "$bad" -ne 0 ]; then
      # CMA is optional: where the system forbids it the other candidates stand.
      if [ "$name" = cma ]; then
        echo "run.sh: Open MPI with CMA single copy failed (status $bad); left out" >&2
        rm -f "$OUT/mpi-$net-$c.$name.txt"
      else
        rc=$bad
      fi
    fi
  done
  python3 "$here/../best_of.py" "$OUT/mpi-$net-$c.txt" "$OUT/mpi-$net-$c".*.txt ||
    { [ "$rc" -ne 0 ] || rc=1; }
  [ "$rc" -eq 0 ] || echo "run.sh: Open MPI $net $c failed (status $rc); see $OUT/mpi-$net-$c.*.txt" >&2
  return "$rc"
}

echo "run.sh: $NP ranks, sizes $MIN..$MAX x$FACTOR, $ITERS iterations ($WARMUP warmup), algorithms: $MPI_ALGOS; results in $OUT"
status=0
for c in $COLLECTIVES; do
  args=(-c "$c" -b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" -w "$WARMUP")
  echo "run.sh: $c: Open MPI shm, Open MPI tcp$([ "$WITH_TANDEM" = 1 ] && echo ", tandem shm, tandem tcp")"
  run_mpi shm "$c" --mca btl self,vader || status=$?
  run_mpi tcp "$c" --mca btl self,tcp --mca btl_tcp_if_include lo || status=$?
  [ "$WITH_TANDEM" = 1 ] || continue
  timeout -k 5 "$RUN_TIMEOUT" "$BUILD_DIR/bin/tandemrun" --nproc-per-node "$NP" \
    "$BUILD_DIR/bin/tandem-perf" "${args[@]}" --json "$OUT/tandem-shm-$c.json" \
    > "$OUT/tandem-shm-$c.txt" || status=$?
  TANDEM_SHM_DISABLE=1 timeout -k 5 "$RUN_TIMEOUT" "$BUILD_DIR/bin/tandemrun" --nproc-per-node "$NP" \
    "$BUILD_DIR/bin/tandem-perf" "${args[@]}" --json "$OUT/tandem-tcp-$c.json" \
    > "$OUT/tandem-tcp-$c.txt" || status=$?
done
if [ "$WITH_TANDEM" = 1 ]; then
  python3 "$here/compare.py" "$OUT" $COLLECTIVES
else
  for c in $COLLECTIVES; do cat "$OUT/mpi-shm-$c.txt" "$OUT/mpi-tcp-$c.txt"; done
fi
exit "$status"

#!/usr/bin/env bash
# Gloo on this host, to read next to tandem-perf over TCP: NP ranks on 127.0.0.1, Gloo's TCP
# transport, rendezvous through a FileStore in a fresh temporary directory; same sizes,
# iterations and columns as tandem-perf (see gloo_bench.cpp for the method).
#
#   bench/gloo/run.sh                 # allreduce, broadcast, allgather; 2 ranks; 8 B..128 MiB x4
#   COLLECTIVES=allreduce NP=4 MIN=1K MAX=16M FACTOR=2 ITERS=50 WARMUP=10 bench/gloo/run.sh
#   bench/gloo/run.sh -v              # extra flags go to gloo_bench (-v: every candidate)
#
# Results: $OUT/gloo-tcp-<collective>.txt and .json (OUT defaults to <repo>/build/bench-gloo).
# With WITH_TANDEM=1 (default: when $BUILD_DIR/bin has tandemrun and tandem-perf) it also runs
# tandem-perf over TCP (TANDEM_SHM_DISABLE=1) into tandem-tcp-<collective>.txt and prints both
# side by side. Every run is killed after RUN_TIMEOUT seconds (default 900), so nothing hangs.
# Installs Debian's libgloo-dev when its headers or library are missing (as root).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"
OUT=${OUT:-$BUILD_DIR/bench-gloo}
OP_TIMEOUT=${OP_TIMEOUT:-60}
CXX=${CXX:-g++}
if [ -z "${WITH_TANDEM:-}" ]; then
  WITH_TANDEM=0
  [ -x "$BUILD_DIR/bin/tandemrun" ] && [ -x "$BUILD_DIR/bin/tandem-perf" ] && WITH_TANDEM=1
fi

if [ ! -f /usr/include/gloo/allreduce.h ] || [ ! -e /usr/lib/libgloo.so ]; then
  install_packages Gloo libgloo-dev
fi

mkdir -p "$OUT"
bin="$OUT/gloo_bench"
if [ ! -x "$bin" ] || [ "$here/gloo_bench.cpp" -nt "$bin" ] ||
  [ "$here/gloo_candidates.hpp" -nt "$bin" ]; then
  echo "run.sh: compiling $bin"
  "$CXX" -O2 -std=c++17 -Wall -Wextra -pthread -o "$bin.tmp" "$here/gloo_bench.cpp" -lgloo
  mv "$bin.tmp" "$bin"
fi

store=$(mktemp -d "${TMPDIR:-/tmp}/gloo-bench-store.XXXXXX")
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$store"
}
trap cleanup EXIT

# Runs NP ranks of gloo_bench with "$@"; rank 0's stdout goes to the file $1. Returns the first
# failing rank's status (the others are then stopped), 0 when all succeed.
run_gloo() {
  local out=$1 r rc=0 status
  shift
  rm -rf "$store"/*
  pids=()
  for ((r = 0; r < NP; r++)); do
    if [ "$r" -eq 0 ]; then
      RANK=$r WORLD_SIZE=$NP timeout -k 5 "$RUN_TIMEOUT" "$bin" --store "$store" \
        --timeout "$OP_TIMEOUT" "$@" >"$out" &
    else
      RANK=$r WORLD_SIZE=$NP timeout -k 5 "$RUN_TIMEOUT" "$bin" --store "$store" \
        --timeout "$OP_TIMEOUT" "$@" >/dev/null &
    fi
    pids+=($!)
  done
  local left=("${pids[@]}") done p rest
  while [ "${#left[@]}" -gt 0 ]; do
    status=0
    done=
    wait -n -p done "${left[@]}" || status=$?
    [ -n "$done" ] || break  # nothing left to wait for
    rest=()
    for p in "${left[@]}"; do [ "$p" = "$done" ] || rest+=("$p"); done
    left=("${rest[@]}")
    if [ "$status" -ne 0 ] && [ "$rc" -eq 0 ]; then
      rc=$status
      for p in "${left[@]}"; do kill "$p" 2>/dev/null || true; done
    fi
  done
  pids=()
  [ "$rc" -eq 124 ] && echo "run.sh: gloo_bench ran past $RUN_TIMEOUT s and was killed" >&2
  return "$rc"
}

echo "run.sh: $NP ranks on 127.0.0.1, sizes $MIN..$MAX x$FACTOR, $ITERS iterations" \
  "($WARMUP warmup); results in $OUT"
status=0
for c in $COLLECTIVES; do
  args=(-c "$c" -b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" -w "$WARMUP")
  echo "run.sh: $c: Gloo tcp"
  run_gloo "$OUT/gloo-tcp-$c.txt" "${args[@]}" --json "$OUT/gloo-tcp-$c.json" "$@" || status=$?
  cat "$OUT/gloo-tcp-$c.txt"
  if [ "$WITH_TANDEM" = 1 ]; then
    echo "run.sh: $c: tandem tcp"
    TANDEM_SHM_DISABLE=1 timeout -k 5 "$RUN_TIMEOUT" "$BUILD_DIR/bin/tandemrun" \
      --nproc-per-node "$NP" "$BUILD_DIR/bin/tandem-perf" "${args[@]}" \
      --json "$OUT/tandem-tcp-$c.json" >"$OUT/tandem-tcp-$c.txt" || status=$?
    python3 "$here/compare.py" "$OUT" "$c" || true
  fi
done
exit "$status"

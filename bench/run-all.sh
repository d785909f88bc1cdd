#!/usr/bin/env bash
# tandem beside Open MPI, MPICH and Gloo in one run: allreduce, broadcast and allgather of f32 on
# NP ranks of this host, 8 B .. 128 MiB x4, every library at its own fastest algorithm per size;
# one table (Markdown, CSV, JSON) and one plot of busbw against size. The whole sequence runs
# ROUNDS times (default 3); each series' row is the median of its rounds.
#
#   bench/run-all.sh                                  # everything, ~12 min on 2 idle cores
#   ITERS=50 WARMUP=10 COLLECTIVES="broadcast allgather" bench/run-all.sh
#   UPDATE_DOCS=1 bench/run-all.sh                    # also the plot to docs/, table to docs/benchmarks.md
#
# Series (file prefix in $OUT):
#   tandem-shm  tandemrun + tandem-perf, the selector's choice (tandem-perf names it)
#   tandem-tcp  the same with TANDEM_SHM_DISABLE=1 (TCP loopback)
#   mpi-shm     Open MPI, ob1 + btl self,vader          (bench/openmpi/run.sh)
#   mpi-tcp     Open MPI, ob1 + btl self,tcp over lo     (bench/openmpi/run.sh)
#   mpich-shm   MPICH ch4:ucx, UCX_TLS=sm,self           (bench/mpich/run.sh)
#   gloo-tcp    Gloo's TCP transport on 127.0.0.1        (bench/gloo/run.sh)
# Fastest algorithm: tandem's selector; Gloo: every candidate probed per size
# (bench/gloo/gloo_bench.cpp); the MPIs: with MPI_ALGOS=sweep (the default here) one run per
# forced algorithm and per size the fastest (bench/best_of.py), MPI_ALGOS=default for their
# own decision only. The collectives are interleaved: each one runs for every library before
# the next collective starts, so that a change in the machine's load hits all of them; then
# the next round. Per series, size and column the round with the median mean time is kept
# (bench/best_of.py --median): a single run on a shared VM varies by up to 40 %.
#
# Environment: MIN MAX FACTOR ITERS WARMUP NP COLLECTIVES (as tandem-perf's -b -e -f -n -w), ROUNDS,
# SMALL_MAX SMALL_ITERS SMALL_WARMUP (sizes up to SMALL_MAX, default 8K, run in a pass of their
# own with 2000 iterations after 200 warm-up), MID_MAX MID_ITERS MID_WARMUP (the sizes above
# SMALL_MAX up to MID_MAX, default 2M, in a second pass with 200 iterations after 20 warm-up;
# ITERS and WARMUP are the larger sizes'),
# LIBS (default "tandem openmpi mpich gloo"), OUT (default <repo>/build/bench-all), BUILD_DIR
# (default <repo>/build; holds bin/tandemrun and bin/tandem-perf), RUN_TIMEOUT (seconds per
# run, default 900), PLOT_TITLE, UPDATE_DOCS=1 (copy busbw.png to docs/bench-busbw.png and
# results.md into docs/benchmarks.md between <!-- bench-all:begin --> and <!-- bench-all:end -->).
# Writes $OUT/results.{md,csv,json}, $OUT/busbw.png, the merged tables and, in
# $OUT/round<k>-small, -mid and -large, every pass's own tables.
# Installs the libraries from Debian when missing (as root): openmpi-bin libopenmpi-dev, mpich
# libmpich-dev, libgloo-dev, gnuplot-nox.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
export BUILD_DIR=${BUILD_DIR:-$repo/build}
export OUT=${OUT:-$BUILD_DIR/bench-all}
export MIN=${MIN:-8} MAX=${MAX:-128M} FACTOR=${FACTOR:-4} ITERS=${ITERS:-20}
export WARMUP=${WARMUP:-5} NP=${NP:-2} RUN_TIMEOUT=${RUN_TIMEOUT:-900}
export MPI_ALGOS=${MPI_ALGOS:-sweep} ROUNDS=${ROUNDS:-3}
# Sizes up to SMALL_MAX run in a pass of their own with SMALL_ITERS iterations: the mean of 20
# sub-microsecond calls mostly measures how slowly the first ones start.
SMALL_MAX=${SMALL_MAX:-8K} SMALL_ITERS=${SMALL_ITERS:-2000} SMALL_WARMUP=${SMALL_WARMUP:-200}
# Sizes above that up to MID_MAX too: 20 calls of a few microseconds are over in 0.1 ms, so one
# preemption of either rank by the VM's own processes (30-60 us) or a first call's page faults
# decide their mean; 200 calls average that out and still take under a second per size.
MID_MAX=${MID_MAX:-2M} MID_ITERS=${MID_ITERS:-200} MID_WARMUP=${MID_WARMUP:-20}
COLLECTIVES=${COLLECTIVES:-"allreduce broadcast allgather"}
LIBS=${LIBS:-"tandem openmpi mpich gloo"}

has() { case " $LIBS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if has tandem; then
  for b in tandemrun tandem-perf; do
    if [ ! -x "$BUILD_DIR/bin/$b" ]; then
      echo "run-all.sh: $BUILD_DIR/bin/$b is missing: build tandem first (make build) or set BUILD_DIR" >&2
      exit 1
    fi
  done
fi
if ! command -v gnuplot >/dev/null; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "run-all.sh: installing gnuplot-nox"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends gnuplot-nox ||
      { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends gnuplot-nox; }
  else
    echo "run-all.sh: gnuplot is missing (sudo apt-get install -y gnuplot-nox); no plot" >&2
  fi
fi

case $ROUNDS in
  '' | *[!0-9]* | 0) echo "run-all.sh: ROUNDS must be a whole number ≥ 1 (got '$ROUNDS')" >&2; exit 2 ;;
esac
min_b=$(numfmt --from=iec "$MIN") && max_b=$(numfmt --from=iec "$MAX") &&
  split_b=$(numfmt --from=iec "$SMALL_MAX") && mid_b=$(numfmt --from=iec "$MID_MAX") ||
  { echo "run-all.sh: MIN, MAX, SMALL_MAX and MID_MAX are sizes such as 8, 32K, 128M" >&2; exit 2; }
[ "$mid_b" -ge "$split_b" ] ||
  { echo "run-all.sh: MID_MAX ($MID_MAX) must be at least SMALL_MAX ($SMALL_MAX)" >&2; exit 2; }
# The first size of the sequence MIN, MIN x FACTOR, ... above $1.
first_above() {
  awk -v s="$min_b" -v f="$FACTOR" -v m="$1" \
    'BEGIN { if (f <= 1) exit 1; while (s <= m) s *= f; printf "%d", s }'
}
first_mid=$(first_above "$split_b") && first_large=$(first_above "$mid_b") ||
  { echo "run-all.sh: FACTOR must be above 1 (got '$FACTOR')" >&2; exit 2; }
mkdir -p "$OUT"
rm -f "$OUT"/*.txt "$OUT"/*.json "$OUT"/*.dat "$OUT"/results.* "$OUT"/busbw.png
rm -rf "$OUT"/round[0-9]*
base=$OUT
log=$base/run-all.log
echo "run-all.sh: $NP ranks, sizes $MIN..$MAX x$FACTOR, $ITERS iterations ($WARMUP warmup)," \
  "libraries: $LIBS, MPI algorithms: $MPI_ALGOS, $ROUNDS round(s); tables in $OUT, log in $log"

# One library's script for one collective; its output goes to the log, a failure is reported
# and remembered but does not stop the others.
status=0
step() {
  local name=$1 rc=0
  shift
  echo "run-all.sh: $(date -u +%H:%M:%S) round $round/$ROUNDS $c $MIN..$MAX: $name"
  "$@" >>"$log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "run-all.sh: $c: $name failed (status $rc); see $log" >&2
    status=$rc
  fi
}
tandem() {
  local net=$1
  shift
  env "$@" timeout -k 5 "$RUN_TIMEOUT" "$BUILD_DIR/bin/tandemrun" --nproc-per-node "$NP" \
    "$BUILD_DIR/bin/tandem-perf" -c "$c" -b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" \
    -w "$WARMUP" --json "$OUT/tandem-$net-$c.json" >"$OUT/tandem-$net-$c.txt"
}

# Every library for collective $c, sizes $2..$3 with $4 iterations ($5 warm-up), into a
# directory of its own ($1): the libraries' scripts take these from the environment.
run_pass() {
  export OUT=$base/round$round-$1 MIN=$2 MAX=$3 ITERS=$4 WARMUP=$5
  mkdir -p "$OUT"
  if has tandem; then
    step "tandem shm" tandem shm TANDEM_SHM_DISABLE=0
    step "tandem tcp" tandem tcp TANDEM_SHM_DISABLE=1
  fi
  has openmpi && step "Open MPI vader + tcp" env COLLECTIVES="$c" WITH_TANDEM=0 "$here/openmpi/run.sh"
  has mpich && step "MPICH shm" env COLLECTIVES="$c" "$here/mpich/run.sh"
  has gloo && step "Gloo tcp" env COLLECTIVES="$c" WITH_TANDEM=0 "$here/gloo/run.sh"
  return 0
}
all=("$MIN" "$MAX" "$ITERS" "$WARMUP")
for round in $(seq 1 "$ROUNDS"); do
  for c in $COLLECTIVES; do
    if [ "$min_b" -le "$split_b" ]; then
      run_pass small "${all[0]}" "$((max_b < split_b ? max_b : split_b))" "$SMALL_ITERS" "$SMALL_WARMUP"
    fi
    if [ "$first_mid" -le "$max_b" ] && [ "$first_mid" -le "$mid_b" ]; then
      run_pass mid "$first_mid" "$((max_b < mid_b ? max_b : mid_b))" "$MID_ITERS" "$MID_WARMUP"
    fi
    if [ "$first_large" -le "$max_b" ]; then
      run_pass large "$first_large" "${all[1]}" "${all[2]}" "${all[3]}"
    fi
  done
done
export OUT=$base MIN=${all[0]} MAX=${all[1]} ITERS=${all[2]} WARMUP=${all[3]}
# Per series, size and column, the round with the median mean time. Wrong values of any round
# are summed into the merged table, where collect.py reports them.
# Each library's table of a collective is <series>-<collective>.txt (its per-algorithm
# candidates add one more suffix, so they are not matched).
for c in $COLLECTIVES; do
  for name in $(cd "$base" && ls round*/*-"$c".txt 2>/dev/null | xargs -rn1 basename | sort -u); do
    python3 "$here/best_of.py" --median "$base/$name" "$base"/round*/"$name" || true
  done
done

# What ran, for the table's footnote.
{
  echo "tandem=$(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)"
  has openmpi && echo "Open MPI=$(mpirun.openmpi --version 2>/dev/null | sed -n '1s/.*) //p')"
  has mpich && echo "MPICH=$(mpichversion 2>/dev/null | sed -n 's/^MPICH Version:[[:space:]]*//p')" \
    "($(mpichversion 2>/dev/null | sed -n 's/^MPICH Device:[[:space:]]*//p'), UCX" \
    "$(dpkg-query -W -f '${Version}' libucx0 2>/dev/null || echo unknown))"
  has gloo && echo "Gloo=$(dpkg-query -W -f '${Version}' libgloo-dev 2>/dev/null || echo unknown) (Debian libgloo-dev)"
  echo "CPU=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) cores"
  echo "kernel=$(uname -r)"
  echo "params=ranks $NP, ITERS $ITERS ($SMALL_ITERS up to $SMALL_MAX, $MID_ITERS up to $MID_MAX)," \
    "WARMUP $WARMUP ($SMALL_WARMUP, $MID_WARMUP)," \
    "MPI_ALGOS $MPI_ALGOS, ROUNDS $ROUNDS (median)"
} >"$OUT/versions.txt"

python3 "$here/collect.py" "$OUT" $COLLECTIVES || status=$?
if command -v gnuplot >/dev/null; then
  title=${PLOT_TITLE:-"busbw against size: $NP ranks, f32; allreduce and allgather out-of-place, broadcast in-place"}
  gnuplot -e "dir='$OUT'; out='$OUT/busbw.png'; colls='$COLLECTIVES'; title='$title'" \
    "$here/plot.gp" && echo "run-all.sh: plot: $OUT/busbw.png"
fi
# UPDATE_DOCS=1: the plot to docs/, the tables into docs/benchmarks.md between its bench-all markers.
if [ "${UPDATE_DOCS:-0}" = 1 ]; then
  mkdir -p "$repo/docs"
  [ ! -f "$OUT/busbw.png" ] || cp "$OUT/busbw.png" "$repo/docs/bench-busbw.png"
  python3 - "$repo/docs/benchmarks.md" "$OUT/results.md" <<'PY'
import sys
readme, results = sys.argv[1], open(sys.argv[2]).read()
text = open(readme).read()
begin, end = "<!-- bench-all:begin -->\n", "<!-- bench-all:end -->"
i, j = text.find(begin), text.find(end)
if i < 0 or j < i:
    sys.exit("run-all.sh: no bench-all markers in " + readme)
open(readme, "w").write(text[:i + len(begin)] + results + text[j:])
PY
  echo "run-all.sh: updated docs/bench-busbw.png and the table in docs/benchmarks.md"
fi
exit "$status"

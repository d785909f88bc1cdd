#!/usr/bin/env bash
# Setup across "hosts": HOSTS network namespaces of this machine on one bridge (10.216.0.0/24),
# RANKS ranks in each (shared memory inside a namespace, TCP between them), one tandemrun per
# namespace (--nnodes HOSTS), tandem-perf's 8 B and 1 MiB allreduce. Reports the whole run, the
# slowest rank's setup, store requests and connections per rank (from TANDEM_DEBUG=INFO) and
# the allreduce p50, then tears the namespaces down. Needs root and iproute2.
#
#   bash bench/scale/hosts.sh                       # HOSTS=8 RANKS=4 BUILD_DIR=build
#   PERF_ARGS="-b 16K -e 4M -f 4 -n 30 -w 3" TANDEM_ALGO=allreduce=ring HOSTS=16 RANKS=1 \
#     bash bench/scale/hosts.sh                     # other sizes, a forced algorithm
# With PERF_ARGS, node 0's tandem-perf table is printed after the summary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BUILD_DIR=$(cd "${BUILD_DIR:-build}" && pwd)
HOSTS=${HOSTS:-8}
RANKS=${RANKS:-4}
OUT=${OUT:-$BUILD_DIR/bench-scale-hosts}
PERF_ARGS=${PERF_ARGS:-}
read -r -a perf_args <<<"${PERF_ARGS:--b 8 -e 1M -f 131072 -n 200 -w 20}"
PORT=${PORT:-29611}
[ "$(id -u)" -eq 0 ] || { echo "hosts.sh: network namespaces need root" >&2; exit 1; }
mkdir -p "$OUT"
rm -f "$OUT"/node*.log
ns() { echo "tscale$1"; }
cleanup() {
  for i in $(seq 0 $((HOSTS - 1))); do ip netns del "$(ns "$i")" 2>/dev/null || true; done
  ip link del tscalebr 2>/dev/null || true
}
trap cleanup EXIT
cleanup
ip link add tscalebr type bridge
ip link set tscalebr up
for i in $(seq 0 $((HOSTS - 1))); do
  n=$(ns "$i")
  ip netns add "$n"
  ip link add "tsv$i" type veth peer name "tsp$i"
  ip link set "tsp$i" master tscalebr up
  ip link set "tsv$i" netns "$n"
  ip netns exec "$n" ip addr add "10.216.0.$((i + 1))/24" dev "tsv$i"
  ip netns exec "$n" ip link set "tsv$i" up
  ip netns exec "$n" ip link set lo up
done
start=$(date +%s.%N)
pids=()
for i in $(seq 0 $((HOSTS - 1))); do
  ip netns exec "$(ns "$i")" env TANDEM_STORE_TOKEN=scale-bench TANDEM_DEBUG=INFO \
    TANDEM_DEBUG_SUBSYS=INIT,STORE "$BUILD_DIR/bin/tandemrun" --nnodes "$HOSTS" --node-rank "$i" \
    --master-addr 10.216.0.1 --master-port "$PORT" --nproc-per-node "$RANKS" \
    "$BUILD_DIR/bin/tandem-perf" -c allreduce "${perf_args[@]}" \
    >"$OUT/node$i.log" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
end=$(date +%s.%N)
[ "$rc" -eq 0 ] || { echo "hosts.sh: a node failed; see $OUT/node*.log" >&2; exit 1; }
IFS=$'\t' read -r setup reqs conns memory server < <(python3 "$here/info_lines.py" "$OUT"/node*.log)
p50() {  # node 0's p50 at $1 bytes
  sed -E 's/^\[rank 0\]: *//' "$OUT/node0.log" | awk -v b="$1" '$1 == b && NF > 7 {print $7}'
}
echo "| hosts x ranks | whole run | setup, slowest rank | store requests per rank | connections per rank | memory per rank (of it shared) | 8 B p50 | 1 MiB p50 |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
echo "| $HOSTS x $RANKS | $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.2f", b - a}') s | $setup ms | $reqs | $conns | $memory | $(p50 8) us | $(p50 1048576) us |"
if [ -n "$PERF_ARGS" ]; then
  grep -E '^\[rank 0\]: +([0-9]|#  +size)' "$OUT/node0.log" || true
fi

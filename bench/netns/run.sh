#!/usr/bin/env bash
# Allreduce between two "hosts" of this machine: two network namespaces joined by a veth
# pair whose both ends are limited to RATE (default 10 Gbit/s; "none": no limit) with tbf.
# Runs tandem-perf with 1 rank per namespace (the flat ring over tcp) and with 2 per namespace
# (shared memory inside a namespace: the hierarchical allreduce), then with UCX=1 tandem over
# UCX's tcp transport (1 rank per namespace), then Open MPI's TCP btl (and with UCX=1 its UCX
# pml over UCX's tcp) with 1 rank per namespace when mpicc/mpirun are installed, and tears
# everything down.
#
#   bench/netns/run.sh                              # 1 MiB .. 256 MiB x2, 10 iterations
#   MIN=32M MAX=256M ITERS=5 RATE=10gbit MTU=9000 STREAMS="1 2 4" bench/netns/run.sh
#   MIN=32M MAX=128M PPN=1 UCX=1 RATE=none bench/netns/run.sh   # tandem tcp / UCX, Open MPI
#
# STREAMS: the TANDEM_SOCKETS_PER_PEER values to run (1 rank per namespace; default: the
# built-in default only). PPN: ranks per namespace for the tandem runs (default "1 2").
# BUILD_DIR (default <repo>/build) must hold bin/tandemrun and bin/tandem-perf. Needs root and
# iproute2 (ip, tc).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
BUILD_DIR=${BUILD_DIR:-$repo/build}
MIN=${MIN:-1M}
MAX=${MAX:-256M}
FACTOR=${FACTOR:-2}
ITERS=${ITERS:-10}
WARMUP=${WARMUP:-3}
RATE=${RATE:-10gbit}
MTU=${MTU:-1500}
PPN=${PPN:-"1 2"}
STREAMS=${STREAMS:-default}
OUT=${OUT:-$BUILD_DIR/bench-netns}
PORT=${PORT:-29517}
UCX=${UCX:-0}
UCX_SEG=${UCX_SEG:-512k}

if [ "$(id -u)" -ne 0 ]; then
  echo "run.sh: network namespaces need root" >&2
  exit 1
fi
for t in ip tc; do
  command -v "$t" >/dev/null || { echo "run.sh: $t (iproute2) is missing" >&2; exit 1; }
done
for b in tandemrun tandem-perf; do
  if [ ! -x "$BUILD_DIR/bin/$b" ]; then
    echo "run.sh: $BUILD_DIR/bin/$b is missing: build tandem first (make build) or set BUILD_DIR" >&2
    exit 1
  fi
done

ns_a=tdmbench-$$-a
ns_b=tdmbench-$$-b
addr_a=10.214.$(($$ % 200 + 20)).1
addr_b=10.214.$(($$ % 200 + 20)).2
cleanup() {
  ip netns delete "$ns_a" 2>/dev/null || true
  ip netns delete "$ns_b" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

ip netns add "$ns_a"
ip netns add "$ns_b"
ip link add "tdmb$$a" type veth peer name "tdmb$$b"
ip link set "tdmb$$a" netns "$ns_a"
ip link set "tdmb$$b" netns "$ns_b"
for side in a b; do
  ns=ns_$side
  addr=addr_$side
  ip -n "${!ns}" link set "tdmb$$$side" name tdm0
  ip -n "${!ns}" link set tdm0 mtu "$MTU"
  ip -n "${!ns}" addr add "${!addr}/24" dev tdm0
  ip -n "${!ns}" link set lo up
  ip -n "${!ns}" link set tdm0 up
  # Both directions at RATE; a burst of 1 MB so the shaper itself does not cost throughput,
  # and at most 10 ms of queue before it drops.
  if [ "$RATE" != none ]; then
    tc -n "${!ns}" qdisc add dev tdm0 root tbf rate "$RATE" burst 1mb latency 10ms
  fi
done

mkdir -p "$OUT"
echo "run.sh: namespaces $ns_a ($addr_a) and $ns_b ($addr_b), veth mtu $MTU, tbf $RATE each way"
echo "run.sh: sizes $MIN..$MAX x$FACTOR, $ITERS iterations ($WARMUP warmup); results in $OUT"

args=(-c allreduce -b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" -w "$WARMUP")

# tandemrun on both "hosts"; $1 ranks per namespace, $2 a name for the output files, then
# environment assignments for the workers.
run_tandem() {
  local ppn=$1 name=$2
  shift 2
  local pids=()
  for i in 0 1; do
    local ns=$ns_a
    [ "$i" = 1 ] && ns=$ns_b
    ip netns exec "$ns" env "$@" TANDEM_STORE_TOKEN=netns-bench \
      "$BUILD_DIR/bin/tandemrun" --nnodes 2 --node-rank "$i" --nproc-per-node "$ppn" \
      --master-addr "$addr_a" --master-port "$PORT" \
      "$BUILD_DIR/bin/tandem-perf" "${args[@]}" --json "$OUT/$name.json" \
      > "$OUT/$name.node$i.txt" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  echo "== tandem, $ppn rank(s) per namespace ($name)"
  grep -v '^\[rank [1-9]' "$OUT/$name.node0.txt" | sed 's/^\[rank 0\]: //'
  return $rc
}

for ppn in $PPN; do
  for s in $STREAMS; do
    if [ "$s" = default ]; then
      run_tandem "$ppn" "tandem-ppn$ppn" TANDEM_DEBUG=WARN
    else
      run_tandem "$ppn" "tandem-ppn$ppn-streams$s" TANDEM_SOCKETS_PER_PEER="$s"
    fi
  done
done
if [ "$UCX" = 1 ]; then
  # UCX's tcp transport on the veth (no RDMA device here).
  # UCX_SEG: UCX's tcp segment size (its default 8 KiB tx / 64 KiB rx; 512k measured 1.3x
  # faster for 32-128 MiB here), for tandem's and Open MPI's UCX runs alike.
  run_tandem 1 tandem-ucx-ppn1 TANDEM_DEBUG=WARN TANDEM_TRANSPORT=ucx UCX_TLS=tcp \
    UCX_NET_DEVICES=tdm0 UCX_TCP_TX_SEG_SIZE="$UCX_SEG" UCX_TCP_RX_SEG_SIZE="$UCX_SEG"
fi

if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  mpicc -O2 -std=c11 -o "$OUT/mpi_bench" "$repo/bench/openmpi/mpi_bench.c"
  # Each rank enters its namespace by rank number. The launcher serves PMIx on this
  # namespace's loopback: pmix_forward.py makes it reachable from the rank's namespace.
  # Only the TCP btl, on the veth.
  cat > "$OUT/in_ns.sh" <<EOF
#!/bin/bash
set -euo pipefail
ns=$ns_a
[ "\$OMPI_COMM_WORLD_RANK" = 1 ] && ns=$ns_b
port=\${PMIX_SERVER_URI41##*:}
coproc fwd { exec python3 "$here/pmix_forward.py" "\$ns" "\$port"; }
read -r ready <&"\${fwd[0]}"
[ "\$ready" = ready ] || { echo "in_ns.sh: no PMIx forwarder in \$ns" >&2; exit 1; }
rc=0
ip netns exec "\$ns" "\$@" || rc=\$?
kill "\$fwd_PID" 2>/dev/null || true
exit \$rc
EOF
  chmod +x "$OUT/in_ns.sh"
  echo "== Open MPI, tcp btl, 1 rank per namespace"
  if mpirun --allow-run-as-root -np 2 --bind-to none --oversubscribe --mca pml ob1 \
    --mca btl self,tcp --mca btl_tcp_if_include tdm0 \
    "$OUT/in_ns.sh" "$OUT/mpi_bench" "${args[@]}" > "$OUT/mpi-tcp.txt" 2>&1; then
    cat "$OUT/mpi-tcp.txt"
  else
    echo "run.sh: Open MPI failed across the namespaces (output in $OUT/mpi-tcp.txt):"
    tail -5 "$OUT/mpi-tcp.txt"
  fi
  if [ "$UCX" = 1 ]; then
    echo "== Open MPI, ucx pml (UCX's tcp), 1 rank per namespace"
    # Open MPI 4.1 takes UCX only on RDMA devices unless told any transport will do.
    if mpirun --allow-run-as-root -np 2 --bind-to none --oversubscribe --mca pml ucx \
      --mca pml_ucx_tls any --mca pml_ucx_devices any \
      -x UCX_TLS=tcp -x UCX_NET_DEVICES=tdm0 -x UCX_TCP_TX_SEG_SIZE="$UCX_SEG" \
      -x UCX_TCP_RX_SEG_SIZE="$UCX_SEG" \
      "$OUT/in_ns.sh" "$OUT/mpi_bench" "${args[@]}" > "$OUT/mpi-ucx.txt" 2>&1; then
      cat "$OUT/mpi-ucx.txt"
    else
      echo "run.sh: Open MPI over UCX failed across the namespaces (output in $OUT/mpi-ucx.txt):"
      tail -5 "$OUT/mpi-ucx.txt"
    fi
  fi
else
  echo "run.sh: Open MPI is not installed: skipped (apt-get install openmpi-bin libopenmpi-dev)"
fi
if [ "$RATE" != none ]; then
  for ns in "$ns_a" "$ns_b"; do
    echo "run.sh: tbf in $ns: $(tc -n "$ns" -s qdisc show dev tdm0 | grep -o 'dropped [0-9]*')"
  done
fi

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
BUILD_DIR=${BUILD_DIR:-build}
SIZES=${SIZES:-16 64 128 256}
OUT=${OUT:-$BUILD_DIR/bench-scale}
mkdir -p "$OUT"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
SHM_DISABLE=$([ "${SHM:-0}" = 1 ] && echo 0 || echo 1)
echo "| ranks | whole run | setup, slowest rank | store requests per rank | connections per rank | memory per rank (of it shared) |"
echo "|---:|---:|---:|---:|---:|---:|"
for n in $SIZES; do
  log="$OUT/setup-$n.log"
  start=$(date +%s.%N)
  TANDEM_SHM_DISABLE=$SHM_DISABLE TANDEM_DEBUG=INFO TANDEM_DEBUG_SUBSYS=INIT \
    "$BUILD_DIR/bin/tandemrun" --nproc-per-node "$n" "$BUILD_DIR/bin/tandem-perf" \
    -c allreduce -b 8 -e 8 -n 1 -w 0 >"$log" 2>&1 || { echo "| $n | failed: see $log |"; continue; }
  end=$(date +%s.%N)
  python3 - "$log" "$n" "$start" "$end" <<'PY'
import re, sys
log, n, start, end = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
text = open(log, errors="replace").read()
setup = [float(m) for m in re.findall(r"set up in ([0-9.]+) ms with", text)]
reqs = [int(m) for m in re.findall(r"set up in [0-9.]+ ms with ([0-9]+) store requests", text)]
conns = []
for m in re.finditer(r"connected in [0-9.]+ ms: shm to \[([^\]]*)\], tcp to \[([^\]]*)\] \(([0-9]+) stream", text):
    shm = len([x for x in m.group(1).split(",") if x])
    tcp = len([x for x in m.group(2).split(",") if x])
    conns.append(shm + tcp * (1 + int(m.group(3))))  # a control connection each, data streams over tcp
mem = [(float(a), float(b)) for a, b in re.findall(
    r"process memory ([0-9.]+) MiB resident \(([0-9.]+) MiB of it shared memory\)", text)]
memory = f"{max(a for a, _ in mem):.1f} MiB ({max(b for _, b in mem):.1f} MiB)" if mem else "?"
print(f"| {n} | {end - start:.2f} s | {max(setup):.0f} ms | {max(reqs)} | {max(conns)} | {memory} |"
      if setup and reqs and conns else f"| {n} | {end - start:.2f} s | (no INFO lines) | | | |")
PY
done

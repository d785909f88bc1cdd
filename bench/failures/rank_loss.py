#!/usr/bin/env python3
"""What a rank's death costs the main job: the survivors going on without it
(training.on_rank_loss=continue, tandemrun --on-worker-loss continue), the same with a
replacement that joins them (--max-replacements 1), and the whole job restarted from its last
checkpoint (tandemrun --max-restarts 1), for the same kill.

    python3 bench/failures/rank_loss.py [--ranks 4] [--kill-at 30] [--trials 3] [--netns]

Each run: build/bin/fashion_mnist under build/bin/tandemrun on this host, --ranks ranks, 4096
training images, global batch 96 (the continue runs' world of ranks - 1 keeps it when it
divides 96), a progress line every step, rank 1 SIGKILLed after step --kill-at (the restart
runs: a checkpoint every 10 steps). Every output line is stamped on arrival; printed per run:

  kill->next_step  the victim's "killing this rank" line to the first progress line of a
                   step after it (continue: the survivors' redone step; restart: the first step
                   of the restarted, resumed round)
  start->full      replace only: tandemrun's note that the replacement starts to the first
                   progress line after rank 0's "gained rank" (the step back at full size)
  result           the job's result line

and the medians per mode.

--netns: across two "hosts" instead, network namespaces joined by a veth pair (root and
iproute2; torn down at the end), --ranks / 2 ranks on each, one tandemrun per namespace
(--nnodes 2); rank 1 is then on the first host and its survivors reach the second over TCP.
"""
import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TANDEMRUN = os.path.join(ROOT, "build", "bin", "tandemrun")
PROGRAM = os.path.join(ROOT, "build", "bin", "fashion_mnist")
STEP_RE = re.compile(r"^\[rank 0\]: epoch \d+/\d+ step \d+/\d+ \(total (\d+)/\d+\)")


@contextlib.contextmanager
def namespaces():
    """Two namespaces joined by a veth pair: yields (ns_a, ns_b, addr_a)."""
    tag = os.getpid() % 100000
    ns = [f"tdmrl{tag}a", f"tdmrl{tag}b"]
    addrs = [f"10.214.{tag % 250}.1", f"10.214.{tag % 250}.2"]

    def ip(*args):
        subprocess.run(["ip", *args], check=True)

    try:
        for n in ns:
            ip("netns", "add", n)
        ip("link", "add", f"tdmrl{tag}x", "type", "veth", "peer", "name", f"tdmrl{tag}y")
        for n, end, addr in zip(ns, (f"tdmrl{tag}x", f"tdmrl{tag}y"), addrs):
            ip("link", "set", end, "netns", n)
            ip("-n", n, "link", "set", end, "name", "tdm0")
            ip("-n", n, "addr", "add", f"{addr}/24", "dev", "tdm0")
            ip("-n", n, "link", "set", "lo", "up")
            ip("-n", n, "link", "set", "tdm0", "up")
        yield ns[0], ns[1], addrs[0]
    finally:
        for n in ns:
            subprocess.run(["ip", "netns", "delete", n], stderr=subprocess.DEVNULL)


def run(mode, ranks, kill_at, tmp, hosts=None):
    common = ["-o", "data.limit_train=4096", "-o", "data.limit_test=1024",
              "-o", "training.batch_size=96", "-o", "training.epochs=1",
              "-o", "log.progress=lines", "-o", "log.every_steps=1",
              "-o", "fault.kill_rank=1", "-o", f"fault.kill_at_step={kill_at}"]
    if mode == "continue":
        launcher = ["--on-worker-loss", "continue"]
        extra = ["-o", "training.on_rank_loss=continue"]
    elif mode == "replace":
        launcher = ["--on-worker-loss", "continue", "--max-replacements", "1"]
        extra = ["-o", "training.on_rank_loss=continue", "-o", "training.replacement_wait_s=60"]
    else:
        launcher = ["--max-restarts", "1"]
        extra = ["-o", f"checkpoint.dir={tmp}/ckpt-{time.monotonic_ns()}",
                 "-o", "checkpoint.every_steps=10"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if hosts is None:
        cmd = [TANDEMRUN, "--nproc-per-node", str(ranks)] + launcher + [PROGRAM] + common + extra
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env=env)]
    else:
        ns_a, ns_b, addr = hosts
        env["TANDEM_STORE_TOKEN"] = "rank-loss-bench"
        procs = []
        for node, n in enumerate((ns_a, ns_b)):
            cmd = (["ip", "netns", "exec", n, TANDEMRUN, "--nnodes", "2", "--node-rank",
                    str(node), "--master-addr", addr, "--master-port", "29611",
                    "--nproc-per-node", str(ranks // 2)]
                   + launcher + [PROGRAM] + common + extra)
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True, env=env))
    p = procs[0]  # node 0 runs rank 0 (progress, result) and rank 1 (the victim)
    killed = next_step = started = gained = full = None
    result = ""
    for line in p.stdout:
        now = time.monotonic()
        if killed is None and "fault.kill_at_step: killing this rank" in line:
            killed = now
        elif killed is not None and next_step is None and STEP_RE.match(line):
            next_step = now
        if started is None and "a new worker starts to join them" in line:
            started = now
        if gained is None and "gained rank" in line:
            gained = now
        elif gained is not None and full is None and STEP_RE.match(line):
            full = now
        if "result:" in line:
            result = line.strip()
    rc = p.wait()
    for other in procs[1:]:
        other.stdout.read()
        rc = rc or other.wait()
    if rc != 0 or killed is None or next_step is None:
        sys.exit(f"{mode}: exit {rc}, kill seen {killed is not None}, next step seen "
                 f"{next_step is not None}: {' '.join(cmd)}")
    if mode == "replace" and (started is None or full is None):
        sys.exit(f"replace: the replacement's start or join not seen: {' '.join(cmd)}")
    return next_step - killed, (full - started if mode == "replace" else None), result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--kill-at", type=int, default=30)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--netns", action="store_true",
                    help="two namespace hosts, --ranks / 2 ranks each (root)")
    args = ap.parse_args()
    if args.netns:
        with namespaces() as hosts:
            measure(args, hosts)
    else:
        measure(args, None)


def measure(args, hosts):
    times = {"continue": [], "replace": [], "restart": []}
    full = []
    with tempfile.TemporaryDirectory() as tmp:
        for t in range(args.trials):
            for mode in times:
                took, back, result = run(mode, args.ranks, args.kill_at, tmp, hosts)
                times[mode].append(took)
                if back is not None:
                    full.append(back)
                print(f"trial {t} {mode}: kill->next_step {took * 1e3:.0f} ms"
                      + (f", start->full {back * 1e3:.0f} ms" if back is not None else "")
                      + f" | {result}", flush=True)
    for mode, v in times.items():
        print(f"row: mode={mode} ranks={args.ranks}{' netns' if hosts else ''} trials={len(v)} "
              f"kill_to_next_step_ms={statistics.median(v) * 1e3:.0f} "
              f"(min {min(v) * 1e3:.0f}, max {max(v) * 1e3:.0f})"
              + (f" start_to_full_size_ms={statistics.median(full) * 1e3:.0f} "
                 f"(min {min(full) * 1e3:.0f}, max {max(full) * 1e3:.0f})"
                 if mode == "replace" else ""))


if __name__ == "__main__":
    main()

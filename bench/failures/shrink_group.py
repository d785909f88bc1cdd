#!/usr/bin/env python3
"""dist.shrink_group on backend tandem after a kill: the time from a rank's SIGKILL to the
survivors' first all_reduce on the shrunk group, over plain processes (no launcher).

    .venv/bin/python bench/failures/shrink_group.py [--ranks 3] [--kill 1] [--trials 8]

Each trial runs tests/python/workers/shrink.py (docs/python.md's recipe: a DDP loop that
catches PeerLostError, agrees on the lost ranks, shrink_group()s them away and redoes the
step) on --ranks processes over a FileStore, the ranks --kill SIGKILLing themselves at step 3
between their forward and their backward. Each survivor reports the time from the victims'
kill (their time stamp in the store) to the end of its first all_reduce on the shrunk group.
Printed: each trial's survivors, then the median, min and max over every survivor of every
trial.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(ROOT, "tests", "python", "workers", "shrink.py")
BUILD = os.environ.get("TANDEM_BUILD_DIR", os.path.join(ROOT, "build"))


def trial(ranks, kill):
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, OMP_NUM_THREADS="1", INIT="file://" + os.path.join(d, "store"),
                   REPORT_DIR=d, KILL=",".join(map(str, kill)), KILL_STEP="3",
                   WORLD_SIZE=str(ranks),
                   PYTHONPATH=os.path.join(BUILD, "python") + os.pathsep
                   + os.environ.get("PYTHONPATH", ""))
        procs = [subprocess.Popen([sys.executable, WORKER], env=dict(env, RANK=str(r)),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for r in range(ranks)]
        outs = [p.communicate(timeout=300)[0] for p in procs]
        times = []
        for r in range(ranks):
            if r in kill:
                continue
            if procs[r].returncode != 0:
                sys.exit(f"rank {r} exited {procs[r].returncode}:\n{outs[r][-3000:]}")
            with open(os.path.join(d, f"rank{r}.json")) as f:
                times.append(json.load(f)["recovered_in"])
        return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--kill", default="1", help="comma-separated ranks to kill")
    ap.add_argument("--trials", type=int, default=8)
    args = ap.parse_args()
    kill = [int(r) for r in args.kill.split(",")]
    every = []
    for t in range(args.trials):
        times = trial(args.ranks, kill)
        every += times
        print(f"trial {t}: " + ", ".join(f"{x * 1e3:.0f} ms" for x in times), flush=True)
    print(f"row: ranks={args.ranks} killed={args.kill} trials={args.trials} "
          f"kill_to_first_all_reduce_ms={statistics.median(every) * 1e3:.0f} "
          f"(min {min(every) * 1e3:.0f}, max {max(every) * 1e3:.0f})")


if __name__ == "__main__":
    main()

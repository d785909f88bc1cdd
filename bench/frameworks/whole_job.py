#!/usr/bin/env python3
"""The Lightning and Accelerate runs of tests/python/frameworks as whole jobs (tandemrun, 2
ranks, start-up included) on Gloo and on tandem, interleaved ROUNDS times; prints the median
wall time of each and every round's.

    PYTHONPATH=build/python OMP_NUM_THREADS=1 .venv/bin/python bench/frameworks/whole_job.py [ROUNDS]

Lightning: workers/lightning_fit.py ddp (fit 2 epochs, a checkpoint, a resumed third epoch,
validate, test); Accelerate: workers/accelerate_fit.py (8 steps).
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("BUILD_DIR", os.path.join(REPO, "build"))
WORKERS = os.path.join(REPO, "tests", "python", "frameworks", "workers")
JOBS = {"Lightning DDP": ["lightning_fit.py", "ddp"], "Accelerate": ["accelerate_fit.py"]}


def run(job, backend):
    script, *args = JOBS[job]
    with tempfile.TemporaryDirectory() as reports, tempfile.TemporaryDirectory() as shared:
        env = dict(os.environ, REPORT_DIR=reports, SHARED_DIR=shared, OMP_NUM_THREADS="1",
                   TANDEM_PYTHON=sys.executable,
                   PYTHONPATH=os.path.join(BUILD, "python"))
        t = time.perf_counter()
        p = subprocess.run([os.path.join(BUILD, "bin", "tandemrun"), "--nproc-per-node", "2",
                            sys.executable, os.path.join(WORKERS, script), backend, *args],
                           env=env, capture_output=True, text=True, timeout=600)
        took = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"{job} on {backend} failed:\n{p.stderr[-3000:]}")
    return took


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    print("| job | Gloo s | tandem s | tandem/Gloo | Gloo per round | tandem per round |")
    print("|---|---:|---:|---:|---|---|")
    for job in JOBS:
        times = {"gloo": [], "tandem": []}
        for _ in range(rounds):
            for backend in times:
                times[backend].append(run(job, backend))
        g, t = statistics.median(times["gloo"]), statistics.median(times["tandem"])
        print(f"| {job} | {g:.2f} | {t:.2f} | {t / g:.2f} | "
              f"{', '.join(f'{x:.2f}' for x in times['gloo'])} | "
              f"{', '.join(f'{x:.2f}' for x in times['tandem'])} |")


if __name__ == "__main__":
    main()

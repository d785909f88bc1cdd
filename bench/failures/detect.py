#!/usr/bin/env python3
"""How fast the survivors of a SIGKILLed rank on the same host hear of it, by the size of the
dead process: the time from the kill to the survivor's failed all_reduce, on backend tandem
(shared memory), on tandem without shared memory (TANDEM_SHM_DISABLE=1) and on Gloo.

    .venv/bin/python bench/failures/detect.py [--gib 0,2] [--trials 5]

Each trial starts 2 processes (torch.distributed over a FileStore; OMP_NUM_THREADS=1). Rank 1
first fills a tensor of --gib GiB (a process that large takes the kernel that long to tear
down), then both run all_reduce in a loop; rank 1 writes its CLOCK_MONOTONIC time to the store
and SIGKILLs itself between two of its calls. Rank 0 reports the time from that stamp to the
moment its all_reduce failed. Printed: a "trial:" line per run, then for each backend and size
the median, min and max over the trials.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("TANDEM_BUILD_DIR", os.path.join(ROOT, "build"))
BACKENDS = {"tandem": ("tandem", {}), "tandem-noshm": ("tandem", {"TANDEM_SHM_DISABLE": "1"}),
            "gloo": ("gloo", {})}


def rank_main(rank, backend, init, gib):
    import signal
    import time
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    if backend == "tandem":
        import tandem.torch  # noqa: F401  registers the backend
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    store = dist.distributed_c10d._get_default_store()
    ballast = torch.ones(int(gib * (1 << 28))) if rank == 1 and gib > 0 else None  # noqa: F841
    t = torch.ones(1024)
    dist.barrier()
    for step in range(1_000_000):
        if rank == 1 and step == 20:
            store.set("killed_at", repr(time.monotonic()))
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            dist.all_reduce(t)
        except Exception:  # noqa: BLE001 - what it says is not measured here
            failed = time.monotonic()
            print(f"detected {(failed - float(store.get('killed_at'))) * 1000:.1f}", flush=True)
            os._exit(0)
    os._exit(1)


def trial(name, gib):
    backend, extra = BACKENDS[name]
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, OMP_NUM_THREADS="1", **extra,
                   PYTHONPATH=os.path.join(BUILD, "python") + os.pathsep
                   + os.environ.get("PYTHONPATH", ""))
        init = "file://" + os.path.join(d, "store")
        procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), backend, init,
                                   str(gib)], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for r in range(2)]
        outs = [p.communicate(timeout=300)[0] for p in procs]
        for line in outs[0].splitlines():
            if line.startswith("detected "):
                return float(line.split()[1])
        sys.exit(f"{name}: rank 0 exited {procs[0].returncode}:\n{outs[0][-3000:]}")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        rank_main(int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", default="0,2", help="comma-separated sizes of the dead process")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--backends", default=",".join(BACKENDS))
    args = ap.parse_args()
    rows = []
    for gib in [float(g) for g in args.gib.split(",")]:
        for name in args.backends.split(","):
            times = []
            for _ in range(args.trials):
                times.append(trial(name, gib))
                print(f"trial: backend={name} gib={gib:g} kill_to_error_ms={times[-1]:.1f}",
                      flush=True)
            rows.append(f"row: backend={name} gib={gib:g} median_ms={statistics.median(times):.1f}"
                        f" min_ms={min(times):.1f} max_ms={max(times):.1f}")
    print("\n".join(rows))


if __name__ == "__main__":
    main()

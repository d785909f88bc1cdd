#!/usr/bin/env python3
"""How long making a 2-rank process group takes, as torchft's configure() makes one per quorum:
15 groups in a row over one TCPStore, each on a fresh prefix, one all_reduce each, then closed.
Prints the median, min and max of the making (the slower of the two ranks' medians).

    PYTHONPATH=build/python OMP_NUM_THREADS=1 .venv/bin/python bench/frameworks/group_setup.py
    TANDEM_SHM_DISABLE=1 PYTHONPATH=build/python ... bench/frameworks/group_setup.py tandem
"""
import datetime
import json
import os
import subprocess
import sys
import time

GROUPS = 15


def rank_main(rank, backend, port):
    import torch
    import torch.distributed as dist
    import tandem.torch
    timeout = datetime.timedelta(seconds=30)
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timeout=timeout)
    times = []
    for i in range(GROUPS):
        prefixed = dist.PrefixStore(f"group{i}/", store)
        t0 = time.perf_counter()
        if backend == "tandem":
            pg = tandem.torch._create(prefixed, rank, 2, timeout)
        else:
            pg = dist.ProcessGroupGloo(prefixed, rank, 2, timeout)
        times.append((time.perf_counter() - t0) * 1000)
        pg.allreduce([torch.ones(4)]).wait()
        if backend == "tandem":
            pg._shutdown()
    times.sort()
    print(json.dumps({"median": times[GROUPS // 2], "min": times[0], "max": times[-1]}))


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--rank":
        rank_main(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
        return
    backends = sys.argv[1:] or ["gloo", "tandem"]
    for i, backend in enumerate(backends):
        port = 29700 + i
        procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), backend, str(port)],
                                  stdout=subprocess.PIPE, text=True) for r in range(2)]
        outs = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
        worst = max(outs, key=lambda o: o["median"])
        print(f"{backend}{' (TANDEM_SHM_DISABLE=1)' if os.environ.get('TANDEM_SHM_DISABLE') and backend == 'tandem' else ''}: "
              f"median {worst['median']:.1f} ms, min {worst['min']:.1f}, max {worst['max']:.1f}")


if __name__ == "__main__":
    main()

"""Blocks of 2 MiB all_reduces through backend tandem's own call, each followed by a cache-line
round trip between the machine's CPU 0 and CPU 1 (bench/host/pingpong.cpp, run by rank 0
while rank 1 waits in a barrier): rank 0 prints "<µs per all_reduce>us/pp<round trip>ns" per
block, to see whether a slow block goes with a slow crossing between the CPUs.

  g++ -O2 -std=c++20 -o /tmp/pingpong bench/host/pingpong.cpp
  tandemrun --nproc-per-node 2 bench/torch_backend/slow_mode.py --pingpong /tmp/pingpong
"""

import argparse
import subprocess
import time

import torch
import torch.distributed as dist

import tandem.torch  # noqa: F401


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pingpong", required=True, help="the built bench/host/pingpong.cpp")
    p.add_argument("--blocks", type=int, default=12)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--bytes", type=int, default=2 << 20)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("tandem")
    rank = dist.get_rank()
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    t = torch.ones(a.bytes // 4)
    rows = []
    for _ in range(a.blocks):
        t0 = time.perf_counter()
        for _ in range(a.calls):
            backend._all_reduce_direct(t)
        us = (time.perf_counter() - t0) / a.calls * 1e6
        if rank == 0:
            rt = subprocess.run([a.pingpong, "100000"], capture_output=True, text=True,
                                check=True).stdout.strip()
            rows.append(f"{us:.0f}us/pp{rt}ns")
        dist.barrier()
    if rank == 0:
        print(" ".join(rows), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

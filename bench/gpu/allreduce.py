"""dist.all_reduce on CUDA tensors, 8 B to --max bytes, one rank per process (tandemrun or
torchrun sets RANK, WORLD_SIZE and LOCAL_RANK); rank r uses cuda:(r % GPUs). Rank 0 prints one
JSON line per size:

  {"backend": "tandem", "world": 2, "bytes": 8, "us": 7.9, "algbw_GBps": ..., "busbw_GBps": ...}

us is the mean of --iters calls after --warmup (the stream synchronised once around them);
busbw = algbw x 2(n-1)/n, NCCL's convention (0 for one rank).

  tandemrun --nproc-per-node 2 python bench/gpu/allreduce.py --backend tandem
"""

import argparse
import datetime
import json
import os
import time

import torch
import torch.distributed as dist


def sizes(max_bytes):
    n = 8
    while n <= max_bytes:
        yield n
        n *= 4


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="tandem")
    p.add_argument("--max", type=int, default=256 << 20, help="largest message in bytes")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--budget", type=float, default=0.5, help="seconds of timed calls per size")
    a = p.parse_args()
    if a.backend == "tandem":
        import tandem.torch  # noqa: F401
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group(a.backend, timeout=datetime.timedelta(seconds=120),
                            device_id=device if a.backend == "nccl" else None)
    for nbytes in sizes(a.max):
        x = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
        for _ in range(a.warmup):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        # Every rank runs the same number of calls: rank 0's estimate, broadcast.
        t0 = time.perf_counter()
        dist.all_reduce(x)
        torch.cuda.synchronize()
        one = torch.tensor([time.perf_counter() - t0], device=device)
        dist.broadcast(one, 0)
        iters = int(max(5, min(2000, a.budget / max(one.item(), 1e-6))))
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        s = (time.perf_counter() - t0) / iters
        want = world * (world + 1) / 2 if nbytes == 8 else None
        if want is not None:  # a correctness probe on the smallest size
            y = torch.full((2,), float(rank + 1), device=device)
            dist.all_reduce(y)
            assert y[0].item() == want, (y, want)
        algbw = x.numel() * 4 / s / 1e9
        if rank == 0:
            print(json.dumps({"backend": a.backend, "world": world, "bytes": x.numel() * 4,
                              "us": s * 1e6, "iters": iters, "algbw_GBps": algbw,
                              "busbw_GBps": algbw * 2 * (world - 1) / world,
                              "multi_rank_gpu": os.environ.get("NCCL_MULTI_RANK_GPU_ENABLE", "")}),
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""torch.distributed collectives timed through one backend, as nccl-tests prints them.

    tandemrun --nproc-per-node 2 bench/torch_backend/collectives.py --backend tandem

For each collective (all_reduce, broadcast, all_gather) and size from --min to --max bytes
(x --factor), rank 0 prints one line
    row: backend=B collective=C bytes=N iters=I time_us=T algbw=A busbw=W
T: mean time per call over I timed calls after --warmup, the slowest rank's (max over ranks).
algbw = bytes / T; busbw = algbw x 2(n-1)/n for all_reduce, (n-1)/n for all_gather, x1 for
broadcast (nccl-tests' formulas). float32 tensors; all_gather (all_gather_into_tensor, one output
tensor) counts its output's bytes.

With --direct (backend tandem), each all_reduce size is also timed through the backend's own
blocking call (Communicator::allreduce on the tensor's memory, no torch.distributed around it),
in alternating blocks with the torch call in the same process, so that both see the same
machine state; rank 0 prints
    direct: bytes=N torch_us=T direct_us=D
(the means over every block of each).
"""
import argparse
import time

import torch
import torch.distributed as dist


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def direct_vs_torch(t, call, iters, size_b, rank, blocks=6):
    """Alternating blocks of `call` (torch) and of the backend's own allreduce on `t`."""
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    direct = lambda: backend._all_reduce_direct(t)  # noqa: E731
    per = max(3, iters // blocks)
    spent = {"torch": 0.0, "direct": 0.0}
    for _ in range(blocks):
        for name, fn in (("torch", call), ("direct", direct)):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(per):
                fn()
            spent[name] += time.perf_counter() - t0
    mean = torch.tensor([spent["torch"], spent["direct"]], dtype=torch.float64) / (per * blocks)
    dist.all_reduce(mean, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(f"direct: bytes={size_b} torch_us={mean[0].item() * 1e6:.2f} "
              f"direct_us={mean[1].item() * 1e6:.2f}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="tandem")
    p.add_argument("--min", default="8")
    p.add_argument("--max", default="128M")
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--collectives", default="all_reduce,broadcast,all_gather")
    p.add_argument("--time-budget", type=float, default=0.5,
                   help="seconds of timed calls per size (the iteration count follows)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--direct", action="store_true",
                   help="also time all_reduce through tandem's own call, alternating with torch's")
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.backend == "tandem":
        import tandem.torch  # noqa: F401
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    factor = {"all_reduce": 2 * (world - 1) / world, "all_gather": (world - 1) / world,
              "broadcast": 1.0}
    size = parse_size(args.min)
    sizes = []
    while size <= parse_size(args.max):
        sizes.append(size)
        size *= args.factor
    for coll in args.collectives.split(","):
        for nbytes in sizes:
            n = max(1, nbytes // 4)
            if coll == "all_gather":
                n = max(1, n // world)
                # The one-tensor form torch 2.x's own code (FSDP, DTensor) calls.
                out = torch.empty(n * world)
                t = torch.ones(n)
                call = lambda: dist.all_gather_into_tensor(out, t)  # noqa: E731
            elif coll == "broadcast":
                t = torch.ones(n)
                call = lambda: dist.broadcast(t, src=0)  # noqa: E731
            else:
                t = torch.ones(n)
                call = lambda: dist.all_reduce(t)  # noqa: E731
            for _ in range(args.warmup):
                call()
            # Every rank runs the same count: rank 0's estimate from one timed call.
            t0 = time.perf_counter()
            call()
            est = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.broadcast(est, src=0)
            iters = int(max(5, min(20000, args.time_budget / max(est.item(), 1e-7))))
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                call()
            mean = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
            dist.all_reduce(mean, op=dist.ReduceOp.MAX)
            us = mean.item() * 1e6
            size_b = n * 4 * (world if coll == "all_gather" else 1)
            algbw = size_b / (us * 1e-6) / 1e9
            if rank == 0:
                print(f"row: backend={args.backend} collective={coll} bytes={size_b} "
                      f"iters={iters} time_us={us:.2f} algbw={algbw:.3f} "
                      f"busbw={algbw * factor[coll]:.3f}", flush=True)
            if args.direct and coll == "all_reduce":
                direct_vs_torch(t, call, iters, size_b, rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""What each piece of torch 2.x's training stack costs on one backend, one rank per process under
tandemrun or torchrun: rank 0 prints one line per component,

  result: component=<c> backend=<b> world=<n> ms=<median> what=<what one timed unit is>

each the median of --iters timed units after --warmup untimed ones (a step, a call, a save).

  tandemrun --nproc-per-node 2 bench/torch_backend/stack.py --backend tandem
"""

import argparse
import datetime
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

import tandem.torch  # noqa: F401


def timed(fn, warmup, iters):
    """Median milliseconds of fn() over `iters` calls after `warmup` untimed ones; every rank
    starts each call together (a barrier before it, outside the time)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="tandem")
    p.add_argument("--dim", type=int, default=1024, help="the MLP's and the tensors' width")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    a = p.parse_args()

    dist.init_process_group(a.backend, timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    d = a.dim
    results = []

    def report(component, ms, what):
        results.append(f"result: component={component} backend={a.backend} world={world} "
                       f"ms={ms:.3f} what={what}")

    # Tensor parallel: a Colwise/Rowwise MLP, forward, backward and an optimizer step.
    torch.manual_seed(0)
    mlp = parallelize_module(
        nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)), mesh,
        {"0": ColwiseParallel(), "2": RowwiseParallel()})
    opt = torch.optim.SGD(mlp.parameters(), lr=1e-3)
    x = torch.randn(32, d)

    def tp_step():
        mlp(x).sum().backward()
        opt.step()
        opt.zero_grad()
    report("tp_mlp_step", timed(tp_step, a.warmup, a.iters), f"32x{d}_mlp_4x_step")

    # DTensor: Shard(0) -> Replicate (all_gather) and Shard(0) -> Shard(1) (all_to_all).
    full = torch.randn(d, d)
    sharded = distribute_tensor(full, mesh, [Shard(0)])
    report("dtensor_shard_to_replicate",
           timed(lambda: sharded.redistribute(mesh, [Replicate()]).to_local(), a.warmup, a.iters),
           f"{d}x{d}_f32")
    report("dtensor_shard0_to_shard1",
           timed(lambda: sharded.redistribute(mesh, [Shard(1)]).to_local(), a.warmup, a.iters),
           f"{d}x{d}_f32")

    # Functional collectives, eagerly and compiled (what torch.compile traces).
    t = torch.randn(d * 64)

    def eager():
        return funcol.all_reduce(t, "sum", mesh).wait()

    compiled = torch.compile(lambda v: funcol.all_reduce(v * 2, "sum", mesh) + 1,
                             backend="aot_eager")
    report("funcol_all_reduce_eager", timed(eager, a.warmup, a.iters), f"{d * 64 * 4 // 1024}KiB")
    report("funcol_all_reduce_compiled", timed(lambda: compiled(t), a.warmup, a.iters),
           f"{d * 64 * 4 // 1024}KiB_aot_eager")

    # batch_isend_irecv: a ring in both directions, one coalesced block.
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    bufs = [torch.randn(d * 64) for _ in range(4)]

    def ring():
        ops = [dist.P2POp(dist.isend, bufs[0], nxt), dist.P2POp(dist.irecv, bufs[1], prv),
               dist.P2POp(dist.isend, bufs[2], prv), dist.P2POp(dist.irecv, bufs[3], nxt)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    report("batch_isend_irecv_ring", timed(ring, a.warmup, a.iters),
           f"2x{d * 64 * 4 // 1024}KiB_each_way")

    # Object collectives (pickled, uint8 tensors on the CPU).
    obj = {"rank": rank, "names": [f"layer{i}.weight" for i in range(200)]}
    out = [None] * world
    report("all_gather_object", timed(lambda: dist.all_gather_object(out, obj), a.warmup, a.iters),
           "dict_of_200_names")

    # Distributed checkpoint: the TP model's state dict saved by every rank to one directory.
    with tempfile.TemporaryDirectory() as tmp:
        root = [tmp if rank == 0 else None]
        dist.broadcast_object_list(root, src=0)
        n = [0]

        def save():
            n[0] += 1
            dcp.save(mlp.state_dict(), checkpoint_id=os.path.join(root[0], f"c{n[0]}"))
        report("dcp_save", timed(save, 1, max(3, a.iters // 4)), f"tp_mlp_{8 * d * d * 4 >> 20}MiB")
        dist.barrier()

    if rank == 0:
        print("\n".join(results), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

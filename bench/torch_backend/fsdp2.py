"""FSDP2 (fully_shard) on a small transformer language model with synthetic tokens, one rank per
process under tandemrun or torchrun: rank 0 prints one line,

  result: backend=<b> world=<n> steps=<s> ms_per_step=<median> final_loss=<l> params=<p>

timing every step after the warm-up ones (median), the loss of the last step averaged over the
ranks. The tokens come from a fixed seed, so every backend trains on the same data.

  tandemrun --nproc-per-node 2 bench/torch_backend/fsdp2.py --backend tandem
"""

import argparse
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

import tandem.torch  # noqa: F401

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
from train_lm import build_model  # noqa: E402  (the same transformer LM)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="tandem")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--bf16", action="store_true", help="bf16 parameters, fp32 reduction")
    a = p.parse_args()

    dist.init_process_group(a.backend, timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build_model(a)
    params = sum(t.numel() for t in model.parameters())
    mesh = init_device_mesh("cpu", (world,))
    mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
          if a.bf16 else MixedPrecisionPolicy())
    for b in model.blocks:
        fully_shard(b, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1 + rank)
    times, loss = [], None
    for step in range(a.warmup + a.steps):
        # Synthetic language: the next token is a fixed function of the previous one.
        start = torch.randint(0, a.vocab, (a.batch, 1), generator=g)
        seq = (start + torch.arange(a.seq + 1) * 7) % a.vocab
        t0 = time.perf_counter()
        logits = model(seq[:, :-1])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), seq[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    final = loss.detach().reshape(1).double()
    dist.all_reduce(final)
    if rank == 0:
        print(f"result: backend={a.backend} world={world} steps={a.steps} "
              f"ms_per_step={statistics.median(times):.2f} final_loss={final.item() / world:.4f} "
              f"params={params}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""A 2-rank DDP script as a user writes it, for any launcher (torchrun, tandemrun): backend
"tandem" from `import tandem.torch` alone, a small model trained with DDP, and the final
weights checked against the same model trained in this one process on the whole global
batch (what DDP's averaged gradients must equal). Prints "ddp_check: OK rank R world W" or
raises."""

import datetime

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import tandem.torch  # noqa: F401

dist.init_process_group("tandem", timeout=datetime.timedelta(seconds=120))
rank, world = dist.get_rank(), dist.get_world_size()
assert dist.get_backend() == "tandem", dist.get_backend()


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))


g = torch.Generator().manual_seed(1)
steps, per_rank = 5, 8
xs = torch.randn(steps, world * per_rank, 16, generator=g)
ys = torch.randn(steps, world * per_rank, 4, generator=g)

ddp = DDP(model(), bucket_cap_mb=0.001)  # several buckets
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
ref = model()
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
for s in range(steps):
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    opt.zero_grad()
    nn.functional.mse_loss(ddp(xs[s][mine]), ys[s][mine]).backward()
    opt.step()
    ref_opt.zero_grad()
    nn.functional.mse_loss(ref(xs[s]), ys[s]).backward()
    ref_opt.step()

diff = max((a - b).abs().max().item() for a, b in zip(ddp.module.parameters(), ref.parameters()))
assert diff <= 1e-5, f"rank {rank}: DDP weights differ from the one-process reference by {diff}"
dist.destroy_process_group()
print(f"ddp_check: OK rank {rank} world {world} max_diff {diff:.2e}", flush=True)

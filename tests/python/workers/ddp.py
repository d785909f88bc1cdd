"""Trains the same small model twice on this rank, once with DDP over gloo and once with DDP
over a tandem group, from the same seed and data, and once more in one process on the global
batches (the reference), and writes the runs' losses and final weights (and their
differences) to the report."""

import datetime
import json
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import tandem.torch  # noqa: F401

# plain | no_sync | unused | bucket_view | fp16_hook | static_graph | future_hook
mode = sys.argv[1]
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
rank, world = dist.get_rank(), dist.get_world_size()
groups = {"gloo": dist.new_group(backend="gloo"), "tandem": dist.new_group(backend="tandem")}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.fc = nn.Linear(4 * 6 * 6, 10)
        if mode == "unused":
            self.unused = nn.Linear(3, 3)  # never in the graph: find_unused_parameters

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def average_hook(group, bucket):
    """A communication hook built on the future of an asynchronous all_reduce."""
    fut = dist.all_reduce(bucket.buffer(), group=group, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0].div_(world))


def train(backend):
    torch.manual_seed(1234)
    data = TensorDataset(torch.randn(96, 1, 8, 8), torch.randint(0, 10, (96,)))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=7)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = Net()
    ddp = DDP(model, process_group=groups[backend],
              find_unused_parameters=(mode == "unused"),
              gradient_as_bucket_view=(mode == "bucket_view"), bucket_cap_mb=0.001,
              static_graph=(mode == "static_graph"))
    if mode == "fp16_hook":
        ddp.register_comm_hook(groups[backend], default_hooks.fp16_compress_hook)
    if mode == "future_hook":
        ddp.register_comm_hook(groups[backend], average_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            accumulate = mode == "no_sync" and step % 2 == 0
            if accumulate:
                with ddp.no_sync():
                    nn.functional.cross_entropy(ddp(x), y).backward()
                continue
            loss = nn.functional.cross_entropy(ddp(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()]


def reference():
    """One process, no DDP: each step's gradient is the mean of every rank's mean-loss
    gradient on its shard of the step (what DDP's averaging makes of it)."""
    torch.manual_seed(1234)
    data = TensorDataset(torch.randn(96, 1, 8, 8), torch.randint(0, 10, (96,)))
    samplers = [DistributedSampler(data, num_replicas=world, rank=r, shuffle=True, seed=7)
                for r in range(world)]
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x_all, y_all = data.tensors
    for epoch in range(2):
        for s in samplers:
            s.set_epoch(epoch)
        shards = [list(s) for s in samplers]
        for step in range(math.ceil(len(shards[0]) / 8)):
            parts = [torch.tensor(sh[step * 8:(step + 1) * 8]) for sh in shards]
            loss = sum(nn.functional.cross_entropy(model(x_all[p]), y_all[p]) for p in parts)
            (loss / world).backward()
            if mode == "no_sync" and step % 2 == 0:
                continue
            opt.step()
            opt.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


gl, gw = train("gloo")
tl, tw = train("tandem")
rw = reference()
# The replicas of every rank must be identical too.
same = torch.cat([p.flatten() for p in tw])
peers = [torch.zeros_like(same) for _ in range(world)]
dist.all_gather(peers, same, group=groups["tandem"])
report = {
    "steps": len(tl),
    "loss_diff": max(abs(a - b) for a, b in zip(gl, tl)),
    "weight_diff": max((a - b).abs().max().item() for a, b in zip(gw, tw)),
    "reference_weight_diff": max((a - b).abs().max().item() for a, b in zip(rw, tw)),
    "replica_diff": max((p - same).abs().max().item() for p in peers),
    "loss_first_last": [tl[0], tl[-1]],
}
with open(os.path.join(os.environ["REPORT_DIR"], f"rank{rank}.json"), "w") as f:
    json.dump(report, f)
dist.destroy_process_group()

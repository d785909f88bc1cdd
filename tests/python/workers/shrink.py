"""docs/python.md's recipe for training on without a lost rank: a DDP loop that catches tandem's
PeerLostError, shrinks the group without the rank it names (dist.shrink_group), wraps the model
again and redoes the step. The ranks KILL (env, comma-separated) SIGKILL themselves at step
KILL_STEP, between their forward and their backward. Every surviving rank writes what it saw to REPORT_DIR/rank<r>.json:
the losses, a digest of its parameters, the group it ended in and the time from the kill to
its first all_reduce on the shrunk group."""

import datetime
import hashlib
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import tandem.torch

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
victims = [int(r) for r in os.environ.get("KILL", "1").split(",")]
kill_step = int(os.environ.get("KILL_STEP", "3"))
steps = int(os.environ.get("STEPS", "8"))
dist.init_process_group("tandem", init_method=os.environ["INIT"], rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=60))
store = dist.distributed_c10d._get_default_store()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
ddp = DDP(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
members = list(range(world))  # the original ranks of the current group, in order
losses, recovered_in = [], None


def batch(step, member):
    g = torch.Generator().manual_seed(1000 * step + member)
    x = torch.randn(8, 16, generator=g)
    return x, x.sum(dim=1, keepdim=True) * 0.1


step = 0
while step < steps:
    x, y = batch(step, rank)
    opt.zero_grad()
    loss = nn.functional.mse_loss(ddp(x), y)
    if rank in victims and step == kill_step:
        store.set(f"killed_at/{rank}", repr(time.monotonic()))
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        loss.backward()
    except RuntimeError as e:  # DDP re-raises the backend's PeerLostError as a RuntimeError
        if not tandem.torch.lost_ranks(str(e)):
            raise
        # The survivors agree on the lost ranks (ranks of the current group, not the original
        # ones after a first shrink): what shrink_group takes.
        lost = tandem.torch.agree_lost_ranks()
        group = dist.shrink_group(lost)
        members = [m for i, m in enumerate(members) if i not in lost]
        ddp = DDP(model, process_group=group)
        if recovered_in is None:
            t = torch.ones(1)
            dist.all_reduce(t)  # the first call on the shrunk group
            assert t.item() == len(members), (t.item(), members)
            recovered_in = time.monotonic() - max(
                float(store.get(f"killed_at/{r}")) for r in victims)
        continue  # redo this step on the survivors
    opt.step()
    losses.append(loss.item())
    step += 1

digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes()
                                 for p in model.parameters())).hexdigest()
with open(os.path.join(os.environ["REPORT_DIR"], f"rank{rank}.json"), "w") as f:
    json.dump({"losses": losses, "digest": digest, "members": members,
               "group_size": dist.get_world_size(), "group_rank": dist.get_rank(),
               "recovered_in": recovered_in}, f)
dist.destroy_process_group()
sys.exit(0)

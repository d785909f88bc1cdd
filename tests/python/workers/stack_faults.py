"""A rank misbehaves under FSDP2 or tensor parallel (mode in argv[1]); every rank writes what it
saw to the report: {"error": type name, "message": str, "elapsed": seconds from the
misbehaviour to the error}.

  fsdp2_kill   rank 1 is SIGKILLed in the middle of a backward pass of an FSDP2 model
  tp_kill      rank 1 is SIGKILLed in the middle of a backward pass of a tensor-parallel MLP
  fsdp2_skip   rank 1 skips a layer in forward: its all-gathers no longer match rank 0's"""

import datetime
import os
import signal
import socket
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh

import misbehaviour
import tandem.torch  # noqa: F401

mode = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("tandem", init_method=os.environ["INIT"], rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=float(os.environ.get("PG_TIMEOUT",
                                                                                "60"))))
misbehaving = rank == 1


def report(**kv):
    misbehaviour.report(rank, **kv)


class Layers(nn.Module):
    """Layers of different widths: a skipped layer changes the next collective's size."""

    def __init__(self, skip=False):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(3)])
        self.layers[1] = nn.Sequential(nn.Linear(16, 48), nn.ReLU(), nn.Linear(48, 16))
        self.skip = skip

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            if not (self.skip and i == 1):
                x = torch.relu(layer(x))
        return x.sum()


def die_in_backward(t):
    def hook(grad):
        report(error=None, message="killed itself")
        misbehaviour.mark()
        os.kill(os.getpid(), signal.SIGKILL)
        return grad
    t.register_hook(hook)


def build():
    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (world,))
    if mode == "tp_kill":
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                       parallelize_module)
        model = nn.Sequential(nn.Linear(16, 48), nn.ReLU(), nn.Linear(48, 16))
        parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        return model
    from torch.distributed.fsdp import fully_shard
    model = Layers()
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


try:
    model = build()
    x = torch.randn(8, 16)
    for step in range(5):
        if mode == "fsdp2_skip" and step == 2:
            if misbehaving:
                model.skip = True
            misbehaviour.mark()
        h = model(x)
        loss = h.sum() if h.dim() else h
        if misbehaving and step == 2 and mode.endswith("_kill"):
            die_in_backward(h)
        loss.backward()
    report(error=None, message="no error")
except Exception as e:  # noqa: BLE001 - the point of the test
    report(error=type(e).__name__, message=str(e),
           dist_backend_error=isinstance(e, dist.DistBackendError), host=socket.gethostname(),
           elapsed=misbehaviour.since_misbehaviour())

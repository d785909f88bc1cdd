"""Joins backend "tandem" (init method from argv[1], default env://), all-reduces rank + 1 and
prints "rank R/W sum S argv A" on every rank."""

import os
import sys

import torch
import torch.distributed as dist

import tandem.torch  # noqa: F401

init = sys.argv[1] if len(sys.argv) > 1 and "://" in sys.argv[1] else "env://"
kw = {}
if init != "env://":
    kw = {"rank": int(os.environ["RANK"]), "world_size": int(os.environ["WORLD_SIZE"])}
dist.init_process_group("tandem", init_method=init, **kw)
r, w = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(r + 1)])
dist.all_reduce(t)
print(f"rank {r}/{w} sum {t.item():g} argv {sys.argv[1:]}", flush=True)
dist.destroy_process_group()

"""A new process takes a lost rank's place through torch 2.14's reconfigure (plain processes,
a tcp:// store hosted by rank 0). Ranks 0, 1 and 2 configure uuid 1 and all_reduce; rank 1
then SIGKILLs itself, and ranks 0 and 2 get PeerLostError from the next all_reduce. The test
then starts a replacement (REPLACEMENT=1, rank 1), which makes the group with
enable_reconfigure=True and publishes its handle; the three configure uuid 2 in rank order,
the replacement takes the model from rank 0 (a broadcast, no file) and all all_reduce. Each
rank writes REPORT_DIR/rank<r>.json (the replacement rank1-replacement.json)."""

import datetime
import json
import os
import signal

import torch
import torch.distributed as dist

import tandem.torch

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
replacement = os.environ.get("REPLACEMENT") == "1"
dist.init_process_group("tandem", init_method=os.environ["INIT"], rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=60), enable_reconfigure=True)
store = dist.distributed_c10d._get_default_store()
report = {}


def configure(uuid, members):
    store.set(f"handle/{uuid}/{rank}", dist._get_reconfigure_handle())
    handles = [store.get(f"handle/{uuid}/{m}").decode() for m in members]
    dist._reconfigure(uuid=uuid, handles=handles).wait()


def total(value):
    t = torch.tensor([float(value)])
    dist.all_reduce(t)
    return t.item()


torch.manual_seed(rank)
model = torch.nn.Linear(4, 2)
if not replacement:
    configure(1, [0, 1, 2])
    report["first"] = total(rank + 1)
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        total(1)
        report["after_kill"] = "ran"
    except tandem.torch.PeerLostError as e:
        report["after_kill"] = str(e)
configure(2, [0, 1, 2])
for p in model.parameters():
    dist.broadcast(p.data, src=0)
report["rank"], report["size"] = dist.get_rank(), dist.get_world_size()
report["second"] = total(rank + 1)
report["weights"] = [round(v, 6) for v in model.weight.flatten().tolist()]

name = "rank1-replacement" if replacement else f"rank{rank}"
with open(os.path.join(os.environ["REPORT_DIR"], f"{name}.json"), "w") as f:
    json.dump(report, f)
dist.destroy_process_group()

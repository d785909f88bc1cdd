"""torch 2.14's reconfigure API on backend tandem (under tandemrun): a group made with
enable_reconfigure=True has no members until dist._reconfigure; then its members change three
times without a new process group: every rank in rank order (uuid 1), every rank but 1 in
reverse order (uuid 2), every rank as a set (uuid 3). Each member all_reduces its original
rank + 1 in each. Rank 0 then tries a used uuid and two wrong handle lists, and all ranks
all_reduce once more. Each rank writes what it saw to REPORT_DIR/rank<r>.json."""

import datetime
import json
import os

import torch
import torch.distributed as dist

import tandem.torch

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("tandem", timeout=datetime.timedelta(seconds=60),
                        enable_reconfigure=True)
store = dist.distributed_c10d._get_default_store()
report = {"supports": dist._supports_reconfigure()}


def refusal(call):
    try:
        call()
        return "accepted"
    except tandem.torch.InvalidArgumentError as e:
        return str(e)


def contribution():
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    return t.item()


report["before"] = refusal(contribution)

configs = []
for uuid, members, as_set in ((1, list(range(world)), False),
                              (2, [m for m in reversed(range(world)) if m != 1], False),
                              (3, list(range(world)), True)):
    if rank not in members:
        continue
    # The out-of-band exchange of handles: here through the job's store.
    store.set(f"handle/{uuid}/{rank}", dist._get_reconfigure_handle())
    handles = [store.get(f"handle/{uuid}/{m}").decode() for m in members]
    dist._reconfigure(uuid=uuid, handles=set(handles) if as_set else handles).wait()
    configs.append({"uuid": uuid, "rank": dist.get_rank(), "size": dist.get_world_size(),
                    "sum": contribution()})
report["configs"] = configs

if rank == 0:
    mine = dist._get_reconfigure_handle()
    report["used_uuid"] = refusal(lambda: dist._reconfigure(uuid=1, handles=[mine]))
    report["not_mine"] = refusal(lambda: dist._reconfigure(uuid=7, handles=[mine + "x"]))
    report["not_tandem"] = refusal(lambda: dist._reconfigure(uuid=8, handles=["gloo:0:1:0:"]))
report["after"] = {"rank": dist.get_rank(), "size": dist.get_world_size(), "sum": contribution()}

with open(os.path.join(os.environ["REPORT_DIR"], f"rank{rank}.json"), "w") as f:
    json.dump(report, f)
dist.destroy_process_group()

"""What torch 2.x asks of a backend, on this rank (mode in argv[1], the backend string in
argv[2]): how the group was made, its Work objects, sequence numbers, sub-groups, shutdown and
a second init, TORCH_DISTRIBUTED_DEBUG=DETAIL. Writes what it saw to the report."""

import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

import tandem.torch  # noqa: F401

mode, backend = sys.argv[1], sys.argv[2]
report = {}
timeout = datetime.timedelta(seconds=120)


def init():
    kw = {}
    if mode == "device_id" and torch.cuda.is_available():
        kw["device_id"] = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend, timeout=timeout, **kw)


def cpu_device_id():
    # torch binds a group to an accelerator only: without CUDA it refuses a CPU device itself,
    # before any backend is asked (the last init of this script: the refused one leaves its
    # rendezvous behind).
    try:
        dist.init_process_group(backend, timeout=timeout, device_id=torch.device("cpu"))
        report["cpu_device_id"] = "accepted"
        dist.destroy_process_group()
    except ValueError as e:
        report["cpu_device_id"] = str(e)


def expected_sum(world, n):
    # rank r contributes r + 1 + i at index i
    return torch.tensor([sum(r + 1 + i for r in range(world)) for i in range(n)],
                        dtype=torch.float32)


def all_reduce_ok(group=None, ranks=None):
    world = dist.get_world_size(group)
    me = dist.get_rank(group)
    t = torch.arange(7, dtype=torch.float32) + me + 1
    dist.all_reduce(t, group=group)
    return bool(torch.equal(t, expected_sum(world, 7)))


try:
    init()
    rank, world = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    report["get_backend"] = dist.get_backend()
    report["backend_name"] = pg._get_backend(torch.device("cpu")).name()
    report["all_reduce"] = all_reduce_ok()

    if mode == "debug_detail":
        # The ProcessGroupWrapper torch puts around the backend checks every call's shape
        # across ranks first (over a gloo helper group): a mismatch is named, not hung.
        try:
            dist.all_reduce(torch.ones(4 + rank))
            report["mismatch"] = "no error"
        except RuntimeError as e:
            report["mismatch"] = str(e)
    else:
        # torch's ProcessGroup answers sequence numbers for its own backends only ("custom
        # does not yet support"); the backend object answers for tandem.
        be = pg._get_backend(torch.device("cpu"))
        seq0 = be._get_sequence_number_for_group()
        for _ in range(3):
            dist.all_reduce(torch.ones(3))
        report["seq_advanced"] = be._get_sequence_number_for_group() - seq0

        # Work as torch's own backends give it.
        t = torch.full((1000,), float(rank + 1))
        w = dist.all_reduce(t, async_op=True)
        report["wait"] = w.wait(timeout=datetime.timedelta(seconds=60))
        report["is_completed"] = w.is_completed()
        report["exception"] = repr(w.exception())
        res = w.result()
        want = float(sum(range(1, world + 1)))
        report["result"] = len(res) == 1 and bool(torch.all(res[0] == want))
        fut = dist.all_reduce(torch.ones(5), async_op=True).get_future()
        value = fut.wait()
        report["future"] = bool(torch.all(value[0] == world))
        chained = dist.all_reduce(torch.ones(2), async_op=True).get_future().then(
            lambda f: f.value()[0] * 2)
        report["future_then"] = bool(torch.all(chained.wait() == 2 * world))

        # Sub-groups: every rank, and the even ranks alone.
        sub = dist.new_group(backend="tandem")
        report["new_group"] = all_reduce_ok(sub)
        evens = list(range(0, world, 2))
        g = dist.new_group(ranks=evens, backend="tandem")
        if rank in evens:
            report["new_group_ranks"] = all_reduce_ok(g)
            report["group_backend"] = dist.get_backend(g)

        # destroy_process_group shuts the backend down (the peers are told), and a second
        # init in the same process makes a working group again.
        dist.destroy_process_group()
        init()
        report["reinit"] = all_reduce_ok()
    dist.destroy_process_group()
    if mode == "device_id" and not torch.cuda.is_available():
        cpu_device_id()
except Exception as e:  # noqa: BLE001 - reported, the test says what failed
    report["error"] = f"{type(e).__name__}: {e}"

with open(os.path.join(os.environ["REPORT_DIR"], f"rank{os.environ['RANK']}.json"), "w") as f:
    json.dump(report, f)

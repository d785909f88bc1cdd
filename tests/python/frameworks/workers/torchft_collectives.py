"""Every collective torchft issues, through torchft's process-group interface, on one rank of
ProcessGroupTandem (or torchft's ProcessGroupGloo). argv[1] is a JSON object: backend, rank,
world, store_port (the test's TCPStore on 127.0.0.1), report (the JSON file to write).

Phase 1: configure(rank, world) and run each call with values that differ per rank, each
checked against a reference computed here without communication. Phase 2 (ranks 0 and 1;
rank 2 leaves after phase 1, as a replica leaves a quorum): configure again on a new store
prefix with the two ranks swapped, check an all_reduce, then abort() with a receive in flight:
the receive fails, errored() says so; the peer's next all_reduce fails too, its wait()
returning False. The report: {"checked": [names], "failed": {name: why},
"phase2": {...}}."""

import json
import sys
import time
from datetime import timedelta

import torch
from torch.distributed import TCPStore
from torch.distributed.distributed_c10d import (AllgatherOptions, AllreduceCoalescedOptions,
                                                AllreduceOptions, AllToAllOptions,
                                                BarrierOptions, BroadcastOptions, ReduceOp,
                                                ReduceScatterOptions)

cfg = json.loads(sys.argv[1])
torch.set_num_threads(1)
rank, n = cfg["rank"], cfg["world"]
timeout = timedelta(seconds=20)
if cfg["backend"] == "tandem":
    from tandem.torchft import ProcessGroupTandem
    pg = ProcessGroupTandem(timeout=timeout)
else:
    from torchft.process_group import ProcessGroupGloo
    pg = ProcessGroupGloo(timeout=timeout)

checked, failed = [], {}


def check(name, got, want):
    checked.append(name)
    got, want = list(got), list(want)
    for i, (g, w) in enumerate(zip(got, want)):
        if g.dtype != w.dtype or g.shape != w.shape or not torch.equal(g, w):
            failed[name] = f"output {i}: got {g.tolist()}, want {w.tolist()}"
            return
    if len(got) != len(want):
        failed[name] = f"{len(got)} outputs, want {len(want)}"


def values(r, count, scale=1.0, dtype=torch.float32):
    """What rank r contributes: distinct per rank and per element."""
    return (torch.arange(count, dtype=torch.float64) * scale + 100 * r + 1).to(dtype)


addr = f"127.0.0.1:{cfg['store_port']}"
pg.configure(f"{addr}/phase1", "replica_0", rank, n)
assert pg.size() == n, pg.size()
assert pg.getBackendName() == ("torchft-tandem" if cfg["backend"] == "tandem" else "torchft-gloo")

# all_reduce, as the Manager issues it (AllreduceOptions, SUM) and as ProcessGroup callers do
# (a bare ReduceOp), on a float and an integer tensor.
t = values(rank, 7)
opts = AllreduceOptions()
opts.reduceOp = ReduceOp.SUM
pg.allreduce([t], opts).wait()
check("allreduce(AllreduceOptions SUM)", [t], [sum(values(r, 7) for r in range(n))])
t = values(rank, 5, dtype=torch.int64)
pg.allreduce([t], ReduceOp.MAX).wait()
check("allreduce(ReduceOp.MAX, int64)", [t], [values(n - 1, 5, dtype=torch.int64)])
# What torchft's DDP comm hook does: the future of the Manager's all_reduce carries the tensor.
t = values(rank, 3)
fut = pg.allreduce([t], ReduceOp.SUM).get_future()
fut.wait()
check("allreduce future", [t], [sum(values(r, 3) for r in range(n))])

t0, t1 = values(rank, 4), values(rank, 6, scale=-2.0)
pg.allreduce_coalesced([t0, t1], AllreduceCoalescedOptions()).wait()
check("allreduce_coalesced", [t0, t1], [sum(values(r, 4) for r in range(n)),
                                        sum(values(r, 6, scale=-2.0) for r in range(n))])

outs = [[torch.zeros(5) for _ in range(n)]]
pg.allgather(outs, [values(rank, 5)], AllgatherOptions()).wait()
check("allgather", outs[0], [values(r, 5) for r in range(n)])

out0, out1 = torch.zeros(n * 2), torch.zeros(n * 3, dtype=torch.int64)
pg.allgather_into_tensor_coalesced([out0, out1],
                                   [values(rank, 2), values(rank, 3, dtype=torch.int64)],
                                   AllgatherOptions()).wait()
check("allgather_into_tensor_coalesced", [out0, out1],
      [torch.cat([values(r, 2) for r in range(n)]),
       torch.cat([values(r, 3, dtype=torch.int64) for r in range(n)])])
# The quantized all_reduce's shapes: a [world, X] uint8 output, one row of another as input.
src = (values(rank, n * 4) % 251).to(torch.uint8).view(n, -1)
out = torch.zeros(n, 4, dtype=torch.uint8)
pg.allgather_into_tensor_coalesced([out], [torch.split(src, 1)[rank]], AllgatherOptions()).wait()
check("allgather_into_tensor_coalesced (row of a matrix)", [out],
      [torch.stack([(values(r, n * 4) % 251).to(torch.uint8).view(n, -1)[r] for r in range(n)])])


# all_to_all with uneven splits, and the even [world, X] form the quantized collectives use.
def split(src, dst):
    return 1 + (src + 2 * dst) % 3


def block(src, dst):
    return torch.full((split(src, dst),), 1000.0 * src + dst) + torch.arange(split(src, dst))


inp = torch.cat([block(rank, j) for j in range(n)])
out = torch.zeros(sum(split(i, rank) for i in range(n)))
pg.alltoall_base(out, inp, [split(i, rank) for i in range(n)], [split(rank, j) for j in range(n)],
                 AllToAllOptions()).wait()
check("alltoall_base (uneven splits)", [out], [torch.cat([block(i, rank) for i in range(n)])])
inp = (values(rank, n * 3) % 251).to(torch.uint8).view(n, -1)
out = torch.zeros(n, 3, dtype=torch.uint8)
pg.alltoall_base(out, inp, [], [], AllToAllOptions()).wait()
check("alltoall_base (even, uint8 [world, X])", [out],
      [torch.stack([(values(i, n * 3) % 251).to(torch.uint8).view(n, -1)[rank] for i in range(n)])])

pg.barrier(BarrierOptions()).wait()
checked.append("barrier")

t = values(rank, 6)
bopts = BroadcastOptions()
bopts.rootRank = n - 1
pg.broadcast([t], bopts).wait()
check("broadcast(root n-1)", [t], [values(n - 1, 6)])
t = values(rank, 2, dtype=torch.int64)
pg.broadcast_one(t, 1).wait()
check("broadcast_one(root 1)", [t], [values(1, 2, dtype=torch.int64)])


# reduce_scatter (refused by torchft's Gloo group): rank r's output is the sum over ranks i of
# rank i's r-th input.
def rs_input(i, r, count):
    return values(i, count, scale=r + 1.0)


if cfg["backend"] == "tandem":
    out = torch.zeros(4)
    ropts = ReduceScatterOptions()
    ropts.reduceOp = ReduceOp.SUM
    pg.reduce_scatter([out], [[rs_input(rank, r, 4) for r in range(n)]], ropts).wait()
    check("reduce_scatter(SUM)", [out], [sum(rs_input(i, rank, 4) for i in range(n))])
    out = torch.zeros(3)
    ropts = ReduceScatterOptions()
    ropts.reduceOp = ReduceOp.MAX
    pg.reduce_scatter([out], [[rs_input(rank, r, 3) for r in range(n)]], ropts).wait()
    check("reduce_scatter(MAX)", [out], [rs_input(n - 1, rank, 3)])
    out0, out1 = torch.zeros(2), torch.zeros(5)
    ropts = ReduceScatterOptions()
    ropts.reduceOp = ReduceOp.SUM
    pg.reduce_scatter_tensor_coalesced(
        [out0, out1], [torch.cat([rs_input(rank, r, 2) for r in range(n)]),
                       torch.cat([rs_input(rank, r, 5) for r in range(n)])], ropts).wait()
    check("reduce_scatter_tensor_coalesced", [out0, out1],
          [sum(rs_input(i, rank, 2) for i in range(n)),
           sum(rs_input(i, rank, 5) for i in range(n))])
else:
    try:
        pg.reduce_scatter([torch.zeros(1)], [[torch.zeros(1)] * n], ReduceScatterOptions())
        failed["gloo reduce_scatter"] = "torchft's Gloo group did not refuse reduce_scatter"
    except RuntimeError:
        pass

# send/recv as torchft's PGTransport sends a checkpoint: rank 0 posts, to every other rank, an
# int64 length (tag 1), a uint8 buffer (tag 2) and tensors (tags 3, 4) before waiting for any;
# the receivers post one receive at a time, in tag order.
payload = [torch.arange(9, dtype=torch.float32) * 0.5, torch.arange(300, dtype=torch.int32)]
buf = torch.arange(1000, dtype=torch.int64).remainder(256).to(torch.uint8)
if rank == 0:
    works = []
    for dst in range(1, n):
        works.append(pg.send([torch.tensor([buf.numel()], dtype=torch.int64)], dst, 1))
        works.append(pg.send([buf], dst, 2))
        for i, p in enumerate(payload):
            works.append(pg.send([p.view(torch.uint8)], dst, 3 + i))
    for w in works:
        w.wait(timeout)
    checked.append("send")
else:
    length = torch.zeros(1, dtype=torch.int64)
    pg.recv([length], 0, 1).wait(timeout)
    got_buf = torch.empty(int(length.item()), dtype=torch.uint8)
    pg.recv([got_buf], 0, 2).wait(timeout)
    got = []
    for i, p in enumerate(payload):
        t = torch.empty(p.numel() * p.element_size(), dtype=torch.uint8)
        pg.recv([t], 0, 3 + i).wait(timeout)
        got.append(t.view(p.dtype))
    check("send/recv (PGTransport's pattern)", [length, got_buf, *got],
          [torch.tensor([buf.numel()]), buf, *payload])

phase2 = {}
if rank < 2:
    # A new quorum: a new store prefix, the ranks swapped, one rank fewer.
    me, peer = 1 - rank, rank
    pg.configure(f"{addr}/phase2", "replica_0", me, 2)
    phase2["size"] = pg.size()
    t = values(me, 3)
    pg.allreduce([t], ReduceOp.SUM).wait()
    phase2["allreduce_ok"] = torch.equal(t, values(0, 3) + values(1, 3))
    phase2["errored_before_abort"] = repr(pg.errored())
    store = TCPStore("127.0.0.1", cfg["store_port"], is_master=False, wait_for_workers=False,
                     timeout=timeout)
    if me == 1:
        # Nobody sends this: abort() must end the wait, and errored() must report it.
        pending = pg.recv([torch.zeros(1)], peer, 99)
        t0 = time.monotonic()
        pg.abort()
        try:
            pending.wait(timeout)
            phase2["pending_after_abort"] = "completed"
        except Exception as e:  # noqa: BLE001 - what the test looks at
            phase2["pending_after_abort"] = f"{type(e).__name__}: {e}"
        phase2["abort_to_error_s"] = time.monotonic() - t0
        phase2["errored_after_abort"] = repr(pg.errored())
        store.set("aborted", "1")
    else:
        store.wait(["aborted"], timeout)
        # A collective with the peer gone: wait() says False instead of raising (torchft's
        # DDP hook needs that), the future and errored() carry tandem's error.
        w = pg.allreduce([torch.ones(2)], ReduceOp.SUM)
        phase2["collective_wait_after_peer_abort"] = w.wait()
        try:
            w.get_future().wait()
            phase2["future_after_peer_abort"] = "completed"
        except Exception as e:  # noqa: BLE001 - what the test looks at
            phase2["future_after_peer_abort"] = type(e).__name__
        phase2["errored_after_peer_abort"] = type(pg.errored()).__name__
        pg.shutdown()

with open(cfg["report"], "w") as f:
    json.dump({"checked": checked, "failed": failed, "phase2": phase2}, f)

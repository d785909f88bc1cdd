"""One rank misbehaves (mode in argv[1]); every rank writes what it saw to the report:
{"error": type name, "message": str, "elapsed": seconds from the misbehaviour to the error}."""

import datetime
import os
import signal
import socket
import sys

import torch
import torch.distributed as dist

import misbehaviour
import tandem.torch

mode = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
timeout = datetime.timedelta(seconds=float(os.environ.get("PG_TIMEOUT", "60")))
init = os.environ["INIT"]
dist.init_process_group("tandem", init_method=init, rank=rank, world_size=world, timeout=timeout)


def report(**kv):
    misbehaviour.report(rank, **kv)


t = torch.ones(1 << 16)
for _ in range(5):
    dist.all_reduce(t)
dist.barrier()
# Every rank is past the barrier before one misbehaves: a rank that left the barrier first and
# aborted could otherwise fail another's barrier, outside the part of this script that reports.
store = dist.distributed_c10d._get_default_store()
store.set(f"past-barrier/{rank}", "1")
store.wait([f"past-barrier/{r}" for r in range(world)], datetime.timedelta(seconds=60))

if mode == "exit_in_flight":
    works = [dist.all_reduce(torch.ones(1 << 22), async_op=True) for _ in range(4)]
    report(error=None, message="exited with collectives in flight")
    sys.exit(0)

misbehaving = rank == 1
try:
    if mode == "kill" and misbehaving:
        report(error=None, message="killed itself")
        misbehaviour.mark()
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "stop" and misbehaving:
        report(error=None, message="stopped itself")
        misbehaviour.mark()
        os.kill(os.getpid(), signal.SIGSTOP)
        sys.exit(0)
    if mode == "abort" and misbehaving:
        report(error=None, message="aborted its group")
        misbehaviour.mark()
        dist.group.WORLD.abort()
        sys.exit(0)
    if mode == "mismatch":
        misbehaviour.mark()
        dist.all_reduce(torch.ones(4 + rank))
    else:
        for _ in range(100000):
            dist.all_reduce(t)
    report(error=None, message="no error")
except Exception as e:  # noqa: BLE001 - the point of the test
    report(error=type(e).__name__, message=str(e), runtime_error=isinstance(e, RuntimeError),
           dist_backend_error=isinstance(e, dist.DistBackendError), host=socket.gethostname(),
           elapsed=misbehaviour.since_misbehaviour())

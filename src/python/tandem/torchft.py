"""torchft's fault-tolerant process group on backend "tandem".

    from tandem.torchft import ProcessGroupTandem
    from torchft import Manager

    manager = Manager(pg=ProcessGroupTandem(timeout=timedelta(seconds=30)), ...)

torchft's Manager calls configure() once per quorum, with a fresh store prefix; each call makes
a new tandem communicator of the quorum's replicas (the old one is closed first: tandem never
repairs a communicator, it makes a new one, which is what torchft asks of a process group). A
replica that dies fails the survivors' calls in flight with tandem's PeerLostError naming it;
the Manager then skips that step and the next quorum configures a group without it.

The collectives the Manager, its DDP wrapper, LocalSGD/DiLoCo and PGTransport issue go to
tandem's c10d backend unchanged, including reduce_scatter and reduce_scatter_tensor_coalesced,
which torchft's Gloo group refuses. How a failure reaches the caller follows torchft's NCCL
group, the one torchft's Manager is written for: a collective's wait() does not raise, it
returns False; the error is in the work's future and in errored(), which the Manager reads
before it commits a step. (torchft 0.2.0's DDP communication hook asserts when wait() raises,
which the wait() of torchft's Gloo group does when a peer dies.) send and recv raise from
wait(), as PGTransport needs to stop a checkpoint transfer that failed.
"""

from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup as _C10dProcessGroup

try:
    from torchft.process_group import ProcessGroupWrapper as _Wrapper
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"tandem.torchft needs torchft ({e}): pip install torchft==0.2.0") from e

import tandem.torch

__all__ = ["ProcessGroupTandem"]

_CUSTOM = _C10dProcessGroup.BackendType.CUSTOM


class _CollectiveWork(dist._Work):
    """A collective's work as torchft's Manager expects it: wait() returns False instead of
    raising, and the group's errored() holds the error."""

    def __init__(self, work, record) -> None:
        super().__init__()
        self._work = work
        self._record = record

    def wait(self, timeout: Optional[timedelta] = None) -> bool:
        try:
            return self._work.wait() if timeout is None else self._work.wait(timeout)
        except Exception as e:  # noqa: BLE001 - kept for errored(); the future has it too
            self._record(e)
            return False

    def get_future(self):
        return self._work.get_future()

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def is_success(self) -> bool:
        return self._work.is_success()

    def exception(self):
        return self._work.exception()

    def result(self):
        return self._work.result()

    def synchronize(self) -> None:
        self._work.synchronize()

    def block_current_stream(self) -> None:
        self._work.block_current_stream()


class ProcessGroupTandem(_Wrapper):
    """A reconfigurable process group on backend "tandem", for torchft's Manager.

    Args:
        timeout: the deadline of every call and of the communicator's setup in configure()
            (tandem's timeout of the group).
    """

    def __init__(self, timeout: timedelta = timedelta(seconds=60)) -> None:
        super().__init__(timeout=timeout)
        self._errored: Optional[Exception] = None
        # Works of an earlier quorum's group that fail after configure() must not mark the
        # new one.
        self._generation = 0
        self._pending = []  # this group's works that errored() has not seen complete

    def getBackendName(self) -> str:
        return "torchft-tandem"

    def _create_pg(self, store, rank: int, world_size: int) -> _C10dProcessGroup:
        self._generation += 1
        self._errored = None
        self._pending = []
        backend = tandem.torch._create(store, rank, world_size, self._timeout)
        pg = _C10dProcessGroup(store, rank, world_size)
        pg._set_default_backend(_CUSTOM)
        devices = [torch.device("cpu")]
        if torch.cuda.is_available():
            devices.append(torch.device("cuda"))
        for device in devices:
            pg._register_backend(device, _CUSTOM, backend)
        if self._group_world_size and self._group_rank is not None:
            # The name torchft's Gloo and NCCL groups give theirs (flight recorder dumps).
            pg._set_group_name(f"torchft_quorum_{self._quorum_id}_rank_"
                               f"{self._group_rank % self._group_world_size}")
        return pg

    def configure(self, store_addr: str, replica_id: str, rank: int, world_size: int,
                  *args, **kwargs) -> None:
        """Makes the group of a new quorum (torchft's Manager calls it with a fresh store
        prefix each time). The last quorum's group is closed first: quietly when it is
        healthy (its peers are told this rank left on purpose), by abort() when it failed."""
        if self._pg is not None and self.errored() is None:
            self.shutdown()
        super().configure(store_addr, replica_id, rank, world_size, *args, **kwargs)

    def _recorder(self):
        generation = self._generation

        def record(e: Exception) -> None:
            if generation == self._generation and self._errored is None:
                self._errored = e

        return record

    def _watch(self, work):
        # errored() looks at the works in flight when it is asked (the Manager asks before it
        # commits a step), so that a call nobody waited for still counts. No callback on the
        # work's future: tandem completes futures on a thread of its own, and a Python callback
        # there could still be running when the interpreter exits.
        self._pending.append(work)
        if len(self._pending) > 256:
            self._check_pending()
        return self._recorder()

    def _check_pending(self) -> None:
        record, still = self._recorder(), []
        for work in self._pending:
            if not work.is_completed():
                still.append(work)
                continue
            try:
                work.wait()  # completed: raises its error (tandem's class), if any, at once
            except Exception as e:  # noqa: BLE001 - kept for errored()
                record(e)
        self._pending = still

    def _wrap_work(self, work, opts):
        return _CollectiveWork(work, self._watch(work))

    def send(self, tensors, dst_rank: int, tag: int):
        work = self.parent.send(tensors, dst_rank, tag)
        self._watch(work)
        return work

    def recv(self, tensors, src_rank: int, tag: int):
        work = self.parent.recv(tensors, src_rank, tag)
        self._watch(work)
        return work

    def errored(self) -> Optional[Exception]:
        """The first failure of a call on the current quorum's group, or None."""
        self._check_pending()
        return self._errored

    def abort(self, errored: bool = True) -> None:
        """Fails the calls in flight at once (the peers are told) and drops the group."""
        if errored and self._errored is None:
            self._errored = RuntimeError("the tandem process group was aborted")
        super().abort(errored=errored)

    def shutdown(self) -> None:
        """Closes the group; the peers are told this rank left on purpose."""
        pg, self._pg = self._pg, None
        if pg is not None:
            pg.shutdown()

"""The torch.distributed backend "tandem".

    import tandem.torch                      # registers the backend
    dist.init_process_group("tandem")         # env://, tcp://, file://, timeout=, new_group()

Collectives run on tandem's communicator: shared memory between the ranks of one host, TCP
between hosts, the fastest algorithm per call. Failures raise TandemError (a RuntimeError,
torch's DistBackendError where it exists) with tandem's message: which collective, which rank
was lost or stalled, and what to do.
"""

import atexit
import re
import weakref

import torch
import torch.distributed as dist


def _check_torch_release():
    # The extension links torch's C++ libraries, whose ABI changes from one release (X.Y) to
    # the next: another release would fail on a missing symbol, or worse, load.
    try:
        from tandem import _build
    except ImportError:  # a source tree without a build: the extension's import says more
        return
    built = _build.TORCH_VERSION.split("+")[0].split(".")[:2]
    have = torch.__version__.split("+")[0].split(".")[:2]
    if built != have:
        raise ImportError(
            f"tandem was built for torch {_build.TORCH_VERSION}, but this interpreter has torch "
            f"{torch.__version__}: install the tandem wheel built for torch {'.'.join(have)} "
            f"(tandem-<version>+torch{'.'.join(have)}), or build one against this torch: "
            f"`make wheel` in a clone whose .venv has it, or `pip install <clone>` here "
            f"(docs/python.md#wheels)")


_check_torch_release()

from tandem import _backend  # noqa: E402 - after the check above

BACKEND = "tandem"

_Base = getattr(dist, "DistBackendError", RuntimeError)


class TandemError(_Base):
    """A collective of backend "tandem" failed; str() is tandem's report."""

    code = "Internal"


class PeerLostError(TandemError):
    """A rank of the group died or closed its connections."""

    code = "PeerLost"

    @property
    def ranks(self):
        """The ranks of the group this error names as lost (as "rank N (host H, pid P)"), in
        the order named: what to pass to dist.shrink_group."""
        return lost_ranks(str(self))


def agree_lost_ranks(group=None, timeout=None):
    """After a PeerLostError: the ranks of `group` (the default group when None) that its
    surviving ranks agree to leave out, for dist.shrink_group. Every survivor calls it; each
    publishes the ranks it saw lost through the store and the first to have every rank
    accounted for decides for all (Communicator::agree_lost), so two ranks lost at once are
    left out together even where each survivor heard of one. A rank that neither answers nor
    is named lost is left out at `timeout` (a timedelta; the group's timeout when None)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device("cpu"))
    wait = timeout.total_seconds() if timeout is not None else 0.0
    return list(backend._agree_lost(wait))


def lost_ranks(message):
    """The ranks a PeerLost report names as lost ("rank N (host H, pid P)"), in the order
    named, each once: also for the message of an error that torch re-raised as another type
    (DDP's backward, for one). A rank named after "reported by " relayed the loss: not lost."""
    seen = []
    for m in re.finditer(r"(?<!reported by )rank (\d+) \(host [^,]*, pid \d+\)", message):
        r = int(m.group(1))
        if r not in seen:
            seen.append(r)
    return seen


class CollectiveTimeoutError(TandemError):
    """A collective passed its deadline (init_process_group's timeout=, or wait(timeout))."""

    code = "Timeout"


class MismatchError(TandemError):
    """The ranks called different collectives, sizes or dtypes."""

    code = "Mismatch"


class AbortedError(TandemError):
    """The group was aborted or shut down (by this rank or a peer)."""

    code = "Aborted"


class InvalidArgumentError(TandemError):
    """The call cannot run as given (unsupported dtype or op, wrong sizes)."""

    code = "InvalidArgument"


_CLASSES = {c.code: c for c in (PeerLostError, CollectiveTimeoutError, MismatchError,
                                AbortedError, InvalidArgumentError)}


def error_class(code):
    """The exception class for a tandem error code (used by the extension)."""
    return _CLASSES.get(code, TandemError)


_groups = weakref.WeakSet()


def _create(store, rank, size, timeout, **options):
    pg = _backend.create(store, rank, size, timeout, **options)
    _groups.add(pg)
    return pg


def _create_extended(opts, backend_options):
    # torch 2.14's form: it carries enable_reconfigure (a group whose members come later,
    # through dist._reconfigure) and the global ranks that make a process's handle stable.
    ranks = list(opts.global_ranks_in_group or [])
    stable = ranks[opts.group_rank] if opts.group_rank < len(ranks) else opts.group_rank
    return _create(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                   enable_reconfigure=bool(opts.enable_reconfigure), stable_rank=stable)


# torch 2.14 and later tell a backend about enable_reconfigure only through the extended form.
_OPTIONS = getattr(dist.distributed_c10d, "_DistributedBackendOptions", None)
_EXTENDED = _OPTIONS is not None and hasattr(_OPTIONS(), "enable_reconfigure")


@atexit.register
def _close_groups():
    # A normal interpreter exit is a goodbye, not a lost peer: the other ranks are told.
    for pg in list(_groups):
        pg._shutdown()
    # No future callback may run once the interpreter finalizes (it would end the process).
    _backend._stop_futures()


def register():
    """Registers backend "tandem" (importing this module already does; a second call does
    nothing). For settings that name a function to call in every worker process, such as
    Ray's runtime_env={"worker_process_setup_hook": "tandem.torch.register"}."""
    if BACKEND.upper() not in dist.Backend._plugins:
        # One backend object per group serves CPU and CUDA tensors (CUDA through tandem's CUDA
        # backend: NCCL, or CUDA IPC between the ranks of one host).
        if _EXTENDED:
            dist.Backend.register_backend(BACKEND, _create_extended, extended_api=True,
                                          devices=["cpu", "cuda"])
        else:
            dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "cuda"])


register()

"""Exits while a Python callback on a collective's future still runs (what torchft, DDP hooks
and any add_done_callback user leave behind): the process must exit 0, not abort because the
thread that completes futures ran Python code while the interpreter finalized."""

import torch
import torch.distributed as dist

import tandem.torch  # noqa: F401

dist.init_process_group("tandem")
t = torch.ones(1000)
for _ in range(20):
    w = dist.all_reduce(t, async_op=True)
    w.get_future().add_done_callback(lambda f: sum(range(20000)))
    w.wait()
# The last callback is long: it is still running, or still queued, when the script ends.
w = dist.all_reduce(t, async_op=True)
w.get_future().add_done_callback(lambda f: sum(range(200000)))

"""Hugging Face Accelerate on backend "tandem". On the CPU Accelerate makes its process group
with Gloo whatever it is asked (docs/python.md says where and what to do instead): a script that
makes the "tandem" group before the Accelerator trains on tandem, and gives Gloo's losses and
parameters."""

import os
import sys

import pytest

pytest.importorskip("accelerate", reason="accelerate is not installed "
                    "(scripts/framework-requirements.txt)")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from conftest import run_ranks  # noqa: E402

WORKER = os.path.join("..", "frameworks", "workers", "accelerate_fit.py")


def test_accelerate_keeps_a_tandem_group_made_first_and_trains_as_on_gloo():
    tandem, _ = run_ranks(WORKER, 2, args=["tandem"], timeout=300)
    gloo, _ = run_ranks(WORKER, 2, args=["gloo"], timeout=300)
    for t, g in zip(tandem, gloo):
        assert t["backend"] == "tandem", "Accelerate replaced the group"
        assert len(t["losses"]) == 4
        assert t["losses"] == g["losses"]
        assert t["params"] == g["params"]
    assert tandem[0]["params"] == tandem[1]["params"]


def test_accelerate_replaces_any_cpu_backend_but_mpi_with_gloo(monkeypatch):
    # What docs/python.md cites: PartialState._prepare_backend on a multi-process CPU run.
    from accelerate.state import PartialState
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    backend, _ = PartialState._prepare_backend(object(), cpu=True, backend="tandem")
    assert backend == "gloo"

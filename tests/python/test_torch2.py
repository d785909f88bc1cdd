"""Backend "tandem" as torch 2.x users select it: init_process_group("tandem"),
"cpu:tandem,cuda:tandem", device_id=, new_group(backend="tandem"), destroy and init again,
and TORCH_DISTRIBUTED_DEBUG=DETAIL; torch's Work API on its results."""

import pytest

from conftest import run_ranks

WORK_KEYS = {"wait": True, "is_completed": True, "exception": "None", "result": True,
             "future": True, "future_then": True, "new_group": True, "reinit": True}


@pytest.mark.parametrize("mode,backend", [("plain", "tandem"),
                                          ("plain", "cpu:tandem,cuda:tandem"),
                                          ("device_id", "tandem")])
def test_group_and_work(mode, backend):
    reports, proc = run_ranks("torch2.py", nproc=3, args=[mode, backend], timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for rank, r in enumerate(reports):
        assert "error" not in r, f"rank {rank}: {r}"
        assert r["get_backend"] == backend, r
        assert r["backend_name"] == "tandem", r
        assert r["all_reduce"] is True, r
        assert r["seq_advanced"] >= 3, r
        for k, v in WORK_KEYS.items():
            assert r[k] == v, f"rank {rank}: {k} = {r[k]!r}, want {v!r}"
        if mode == "device_id" and "cpu_device_id" in r:  # no GPU: torch's own refusal
            assert "must be an accelerator" in r["cpu_device_id"], r
        if rank % 2 == 0:
            assert r["new_group_ranks"] is True and r["group_backend"] == "tandem", r
        else:
            assert "new_group_ranks" not in r, r


def test_debug_detail_names_a_mismatch():
    reports, proc = run_ranks("torch2.py", nproc=2, args=["debug_detail", "tandem"],
                              env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, timeout=300)
    for rank, r in enumerate(reports):
        assert "error" not in r, f"rank {rank}: {r}"
        assert r["all_reduce"] is True, r
        assert "mismatch" in r["mismatch"].lower(), f"rank {rank}: {r['mismatch']}"

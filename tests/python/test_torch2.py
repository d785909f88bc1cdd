"""Backend "tandem" as torch 2.x users select it: init_process_group("tandem"),
"cpu:tandem,cuda:tandem", device_id=, new_group(backend="tandem"), destroy and init again,
and TORCH_DISTRIBUTED_DEBUG=DETAIL; torch's Work API on its results; torch 2.14's reconfigure."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile

import pytest
import torch
import torch.distributed as dist

from conftest import run_ranks, worker, worker_env

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


@pytest.mark.skipif(not hasattr(dist, "_reconfigure"),
                    reason=f"dist._reconfigure is torch 2.14's; this is torch {torch.__version__}")
def test_reconfigure_changes_the_members_of_one_group():
    # workers/reconfigure.py on 3 ranks: members [0, 1, 2], then [2, 0], then {0, 1, 2}.
    reports, proc = run_ranks("reconfigure.py", nproc=3, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    want = {0: [(1, 0, 3, 6.0), (2, 1, 2, 4.0), (3, 0, 3, 6.0)],
            1: [(1, 1, 3, 6.0), (3, 1, 3, 6.0)],
            2: [(1, 2, 3, 6.0), (2, 0, 2, 4.0), (3, 2, 3, 6.0)]}
    for r, rep in enumerate(reports):
        assert rep["supports"] is True, rep
        assert "enable_reconfigure=True and has no members yet" in rep["before"], rep
        got = [(c["uuid"], c["rank"], c["size"], c["sum"]) for c in rep["configs"]]
        assert got == want[r], f"rank {r}: {got}"
        assert rep["after"] == {"rank": r, "size": 3, "sum": 6.0}, rep
    assert "uuid 1 was used already" in reports[0]["used_uuid"], reports[0]
    assert "this rank's handle" in reports[0]["not_mine"], reports[0]
    assert "is not a handle of backend 'tandem'" in reports[0]["not_tandem"], reports[0]


@pytest.mark.skipif(not hasattr(dist, "_reconfigure"),
                    reason=f"dist._reconfigure is torch 2.14's; this is torch {torch.__version__}")
def test_a_new_process_takes_a_lost_ranks_place_through_reconfigure():
    # workers/reconfigure_replace.py: rank 1 of 3 is SIGKILLed; once it is gone a replacement
    # starts as rank 1, and the three reconfigure into one group and train on.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as d:
        def start(rank, extra=None):
            env = worker_env({"RANK": str(rank), "WORLD_SIZE": "3", "REPORT_DIR": d,
                              "INIT": f"tcp://127.0.0.1:{port}", **(extra or {})})
            return subprocess.Popen([sys.executable, worker("reconfigure_replace.py")], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        procs = [start(r) for r in range(3)]
        try:
            procs[1].communicate(timeout=120)
            assert procs[1].returncode == -signal.SIGKILL, procs[1].returncode
            procs.append(start(1, {"REPLACEMENT": "1"}))
            for p in (procs[0], procs[2], procs[3]):
                out, err = p.communicate(timeout=120)
                assert p.returncode == 0, err[-4000:]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        reports = {}
        for name in ("rank0", "rank2", "rank1-replacement"):
            with open(os.path.join(d, f"{name}.json")) as f:
                reports[name] = json.load(f)
    for name, r in (("rank0", 0), ("rank2", 2)):
        rep = reports[name]
        assert rep["first"] == 6.0, rep
        assert "rank 1" in rep["after_kill"], rep
        assert (rep["rank"], rep["size"], rep["second"]) == (r, 3, 6.0), rep
    new = reports["rank1-replacement"]
    assert (new["rank"], new["size"], new["second"]) == (1, 3, 6.0), new
    assert new["weights"] == reports["rank0"]["weights"] == reports["rank2"]["weights"], reports

"""Failures are tandem's, not gloo's: a rank killed mid-collective, a frozen rank, mismatched
collectives and an exit with collectives in flight, each seen by plain processes (no launcher
to stop the survivors for them)."""

import json
import os
import signal
import subprocess
import sys
import tempfile

import pytest

from conftest import tandemrun, worker, worker_env


def run(mode, nproc=3, env=None, timeout=120):
    with tempfile.TemporaryDirectory() as d:
        procs = []
        for r in range(nproc):
            e = worker_env({"RANK": str(r), "WORLD_SIZE": str(nproc),
                            "INIT": "file://" + os.path.join(d, "store"), "REPORT_DIR": d,
                            **(env or {})})
            procs.append(subprocess.Popen([sys.executable, worker("faults.py"), mode], env=e,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        outs = []
        try:
            for r, p in enumerate(procs):
                if mode == "stop" and r == 1:
                    continue
                outs.append(p.communicate(timeout=timeout))
        finally:
            for p in procs:  # the frozen rank, or everyone after a time-out
                if p.poll() is None:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                    p.wait()
        reports = {}
        for r in range(nproc):
            path = os.path.join(d, f"rank{r}.json")
            assert os.path.exists(path), f"rank {r} wrote no report: {outs}"
            with open(path) as f:
                reports[r] = json.load(f)
        return reports, procs


def test_killed_rank_is_named_on_every_survivor():
    reports, _ = run("kill")
    dead = reports[1]["pid"]
    for r in (0, 2):
        rep = reports[r]
        assert rep["error"] == "PeerLostError", rep
        assert rep["runtime_error"] and rep["dist_backend_error"], rep
        assert "rank 1" in rep["message"] and str(dead) in rep["message"], rep
        assert rep["host"] in rep["message"], rep
        print(f"rank {r} raised {rep['elapsed']:.2f} s after rank 1 was killed")


def test_abort_on_one_rank_is_named_on_every_other():
    reports, _ = run("abort")
    for r in (0, 2):
        rep = reports[r]
        assert rep["error"] in ("AbortedError", "PeerLostError"), rep
        assert rep["dist_backend_error"], rep
        assert "rank 1" in rep["message"], rep


def test_frozen_rank_fails_the_others_at_the_group_timeout():
    reports, _ = run("stop", env={"PG_TIMEOUT": "4"})
    for r in (0, 2):
        rep = reports[r]
        assert rep["error"] in ("CollectiveTimeoutError", "AbortedError"), rep
    # The survivor that waited on rank 1 names it; the other may be told only that this
    # survivor aborted (whichever timed out first tells the other).
    assert any("rank 1" in reports[r]["message"] for r in (0, 2)), reports


def test_mismatched_collectives_are_named():
    reports, _ = run("mismatch", nproc=2, env={"PG_TIMEOUT": "20"})
    for r in (0, 1):
        rep = reports[r]
        assert rep["error"] in ("MismatchError", "AbortedError"), rep
        assert "mismatch" in rep["message"].lower(), rep


def test_exit_with_collectives_in_flight_is_clean():
    reports, procs = run("exit_in_flight", nproc=2, timeout=60)
    for r, p in enumerate(procs):
        assert p.returncode == 0, (r, p.returncode)
        assert reports[r]["message"] == "exited with collectives in flight"


def test_exit_while_a_future_callback_runs_is_clean():
    # Before tandem.torch's atexit handler stopped the futures' thread, every run of this
    # aborted ("terminate called without an active exception").
    p = tandemrun(["--nproc-per-node", "2", sys.executable, worker("exit_callbacks.py")],
                  timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "terminate called" not in p.stdout + p.stderr


def run_workers(d, script, args, nproc, env, stderr=subprocess.PIPE):
    """`script` (tests/python/workers) on `nproc` plain processes over a FileStore in `d`,
    reporting to `d`; waits for them (120 s each) and kills any left. Returns (procs, outs):
    outs[r] is rank r's (stdout, stderr)."""
    procs = []
    for r in range(nproc):
        e = worker_env({"RANK": str(r), "WORLD_SIZE": str(nproc),
                        "INIT": "file://" + os.path.join(d, "store"), "REPORT_DIR": d,
                        **(env or {})})
        procs.append(subprocess.Popen([sys.executable, worker(script)] + args, env=e,
                                      stdout=subprocess.PIPE, stderr=stderr, text=True))
    outs = []
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return procs, outs


def run_stack(mode, nproc, env=None):
    with tempfile.TemporaryDirectory() as d:
        _, outs = run_workers(d, "stack_faults.py", [mode], nproc, env)
        reports = {}
        for r in range(nproc):
            path = os.path.join(d, f"rank{r}.json")
            assert os.path.exists(path), \
                f"rank {r} wrote no report; its stderr ends:\n{outs[r][1][-3000:] if outs else ''}"
            with open(path) as f:
                reports[r] = json.load(f)
        return reports


@pytest.mark.parametrize("mode", ["fsdp2_kill", "tp_kill"])
def test_rank_killed_under_the_stack_is_named(mode):
    # The group's timeout is 60 s: an error before it is the failure detector, not a deadline.
    reports = run_stack(mode, 3)
    dead = reports[1]["pid"]
    for r in (0, 2):
        rep = reports[r]
        assert rep["error"] == "PeerLostError", rep
        assert rep["dist_backend_error"], rep
        assert "rank 1" in rep["message"] and str(dead) in rep["message"], rep
        print(f"{mode}: rank {r} raised {rep['elapsed']:.2f} s after rank 1 was killed")


def test_rank_skipping_an_fsdp2_layer_is_named():
    reports = run_stack("fsdp2_skip", 2)
    for r in (0, 1):
        rep = reports[r]
        assert rep["error"] in ("MismatchError", "AbortedError"), rep
        assert "mismatch" in rep["message"].lower(), rep
        print(f"rank {r}: {rep['message'][:300]}")


def shrink_run(world, kill):
    """workers/shrink.py on `world` ranks with the ranks `kill` SIGKILLed at step 3: the
    survivors' reports (the killed ranks must have died by the signal)."""
    with tempfile.TemporaryDirectory() as d:
        procs, outs = run_workers(d, "shrink.py", [], world,
                                  {"KILL": ",".join(map(str, kill)), "KILL_STEP": "3"},
                                  stderr=subprocess.STDOUT)
        outs = [out for out, _ in outs]
        reports = {}
        for r in range(world):
            if r in kill:
                assert procs[r].returncode == -signal.SIGKILL, outs[r]
                continue
            assert procs[r].returncode == 0, outs[r]
            with open(os.path.join(d, f"rank{r}.json")) as f:
                reports[r] = json.load(f)
        return reports


def test_survivors_shrink_the_group_and_train_on():
    # docs/python.md's recipe (workers/shrink.py): rank 1 of 3 is SIGKILLed between its forward
    # and its backward at step 3; ranks 0 and 2 catch the PeerLostError, agree on the lost
    # rank, shrink_group([1]) and finish the 8 steps as a group of 2, with identical parameters.
    reports = shrink_run(3, [1])
    assert reports[0]["digest"] == reports[2]["digest"], reports
    for r, rep in reports.items():
        assert rep["members"] == [0, 2], rep
        assert rep["group_size"] == 2 and rep["group_rank"] == (0 if r == 0 else 1), rep
        assert len(rep["losses"]) == 8, rep
        print(f"rank {r}: first all_reduce on the shrunk group "
              f"{rep['recovered_in'] * 1e3:.0f} ms after the kill")


def test_survivors_of_two_ranks_lost_together_agree_on_both():
    # Ranks 1 and 2 of 4 die at the same step: each survivor may hear of only one, yet
    # agree_lost_ranks() gives both the same two, and they go on as a group of 2.
    reports = shrink_run(4, [1, 2])
    assert reports[0]["digest"] == reports[3]["digest"], reports
    for r, rep in reports.items():
        assert rep["members"] == [0, 3], rep
        assert rep["group_size"] == 2 and rep["group_rank"] == (0 if r == 0 else 1), rep
        assert len(rep["losses"]) == 8, rep


def test_lost_ranks_are_the_dead_ones_not_those_that_relayed_the_loss():
    # A survivor that heard of rank 2's death from ranks 1 and 0 names them after
    # "reported by": they are alive, and lost_ranks() leaves them out.
    message = ("rank 2 (host vm, pid 9379) died or closed its connection. Also lost: rank 5 "
               "(host b, pid 3) (reported by rank 1 (host vm, pid 9378), which lost it first) "
               "(reported by rank 0 (host vm, pid 9376), which lost it first)")
    p = subprocess.run([sys.executable, "-c",
                        "import sys, tandem.torch as t; print(t.lost_ranks(sys.argv[1]))",
                        message], env=worker_env({}), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[2, 5]", p.stdout

"""torchft, unchanged, on backend "tandem" (tandem.torchft.ProcessGroupTandem): its Manager,
Lighthouse, DDP wrapper and checkpoint transports, in real processes on 127.0.0.1.

- a healthy run gives the parameters of the same run on torchft's ProcessGroupGloo, bit for
  bit, and of a reference computed here without communication;
- every collective torchft issues, reduce_scatter included (torchft's Gloo group refuses it),
  against references; a second configure() on a new prefix; abort() with a call in flight;
- a replica SIGKILLed mid-step: the survivor's all_reduce fails with tandem's PeerLostError,
  the survivor commits steps alone, the restarted replica heals from it through PGTransport
  (the checkpoint goes over ProcessGroupTandem's send/recv) and both end equal;
- two ranks per replica group: one ProcessGroupTandem per group rank across the replicas."""

import importlib.util
import json
import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("torchft", reason="torchft is not installed (pip install torchft==0.2.0, "
                    "scripts/framework-requirements.txt)")

import torch  # noqa: E402
from torch.distributed import TCPStore  # noqa: E402
from torchft._torchft import LighthouseServer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers")
sys.path.insert(0, os.path.join(HERE, ".."))
from conftest import worker_env  # noqa: E402

# The workers' model and data, for the reference computed here.
_spec = importlib.util.spec_from_file_location("torchft_model",
                                               os.path.join(WORKERS, "torchft_model.py"))
torchft_model = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(torchft_model)

WAIT = 120  # seconds any one process may take; a test that passes takes a fraction of it


class Job:
    """The processes of one test: each writes its output to <tmp>/<name>.log and its report to
    <tmp>/<name>.json; whatever still runs at the end is killed."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = {}

    def start(self, name, script, cfg):
        cfg = {**cfg, "report": str(self.tmp / f"{name}.json")}
        log = open(self.tmp / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen(
            [sys.executable, os.path.join(WORKERS, script), json.dumps(cfg)],
            env=worker_env(), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        return self.procs[name]

    def logs(self):
        out = []
        for name in self.procs:
            with open(self.tmp / f"{name}.log") as f:
                out.append(f"--- {name} (exit {self.procs[name].poll()}):\n{f.read()[-3000:]}")
        return "\n".join(out)

    def wait(self, name, timeout=WAIT):
        try:
            return self.procs[name].wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.close()
            raise AssertionError(f"{name} did not finish in {timeout} s\n{self.logs()}")

    def finish(self, *names):
        """Waits for `names` to exit 0; returns their reports."""
        for name in names:
            rc = self.wait(name)
            assert rc == 0, f"{name} exited {rc}\n{self.logs()}"
        reports = []
        for name in names:
            with open(self.tmp / f"{name}.json") as f:
                reports.append(json.load(f))
        return reports

    def close(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.fixture
def job(tmp_path):
    j = Job(tmp_path)
    yield j
    j.close()


@pytest.fixture
def lighthouse():
    made = []

    def make(min_replicas, **kw):
        lh = LighthouseServer(bind="[::]:0", min_replicas=min_replicas, **kw)
        made.append(lh)
        return "http://127.0.0.1:" + lh.address().rsplit(":", 1)[1]

    yield make
    for lh in made:
        lh.shutdown()


def master_store():
    return TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)


def reference(logs, group_rank, steps):
    """The parameters after `steps` steps, trained here without communication: each step
    averages the gradients of the replicas that took part in it (logs[replica][step]), over
    the step's number of participants, as torchft's Manager does."""
    model, opt = torchft_model.model_and_optimizer()
    for step in range(steps):
        entries = [log[step] for log in logs]
        assert all(e["step"] == step and e["committed"] for e in entries), entries
        total = [torch.zeros_like(p) for p in model.parameters()]
        for replica, e in enumerate(entries):
            if e["participating"]:
                model.zero_grad()
                x, y = torchft_model.batch(replica, group_rank, step)
                torchft_model.loss(model, x, y).backward()
                total = [t + p.grad for t, p in zip(total, model.parameters())]
        for p, t in zip(model.parameters(), total):
            p.grad = t / entries[0]["participants"]
        opt.step()
    return {k: v.double().flatten().tolist() for k, v in model.state_dict().items()}


def test_healthy_run_equals_gloo_and_the_reference(job, lighthouse):
    # Each replica runs on tandem, then on torchft's Gloo group, in the same process.
    addrs = [lighthouse(min_replicas=2), lighthouse(min_replicas=2)]
    for r in range(2):
        job.start(f"replica{r}", "torchft_train.py",
                  {"runs": [["tandem", addrs[0]], ["gloo", addrs[1]]], "replica": r,
                   "group_rank": 0, "group_world_size": 1, "store_port": None, "replicas": 2,
                   "steps": 5})
    runs = [rep["runs"] for rep in job.finish("replica0", "replica1")]
    tandem, gloo = [r[0] for r in runs], [r[1] for r in runs]
    assert [r["backend"] for r in tandem + gloo] == ["torchft-tandem"] * 2 + ["torchft-gloo"] * 2
    for r in tandem:
        assert [e["step"] for e in r["log"]] == list(range(5)), r["log"]
        assert all(e["committed"] and e["participants"] == 2 and e["error"] is None
                   for e in r["log"]), r["log"]
    # torchft's first quorum syncs replica 1 from replica 0 (init_sync): it sits step 0 out.
    assert [e["participating"] for e in tandem[1]["log"]] == [False] + [True] * 4
    for t, g in zip(tandem, gloo):
        assert t["log"] == g["log"]
        assert t["params"] == g["params"], "differs from the same run on torchft's Gloo group"
    assert tandem[0]["params"] == tandem[1]["params"]
    want = reference([r["log"] for r in tandem], 0, 5)
    untrained = reference([[]], 0, 0)
    assert tandem[0]["params"] != untrained
    for name, got in tandem[0]["params"].items():
        torch.testing.assert_close(torch.tensor(got), torch.tensor(want[name]), rtol=1e-6,
                                   atol=1e-7, msg=name)


COLLECTIVES = [
    "allreduce(AllreduceOptions SUM)", "allreduce(ReduceOp.MAX, int64)", "allreduce future",
    "allreduce_coalesced", "allgather", "allgather_into_tensor_coalesced",
    "allgather_into_tensor_coalesced (row of a matrix)", "alltoall_base (uneven splits)",
    "alltoall_base (even, uint8 [world, X])", "barrier", "broadcast(root n-1)",
    "broadcast_one(root 1)", "reduce_scatter(SUM)", "reduce_scatter(MAX)",
    "reduce_scatter_tensor_coalesced", "send/recv (PGTransport's pattern)"]


def test_every_torchft_collective_reconfigure_and_abort(job):
    store = master_store()
    for r in range(3):
        job.start(f"rank{r}", "torchft_collectives.py",
                  {"backend": "tandem", "rank": r, "world": 3, "store_port": store.port})
    reports = job.finish("rank0", "rank1", "rank2")
    for r, rep in enumerate(reports):
        assert rep["failed"] == {}, f"rank {r}: {rep['failed']}"
        want = [c for c in COLLECTIVES if c != "send/recv (PGTransport's pattern)" or r > 0]
        assert sorted(rep["checked"]) == sorted(want + (["send"] if r == 0 else []))
    # The second quorum: ranks 0 and 1 swapped, a group of two.
    for rep in reports[:2]:
        assert rep["phase2"]["size"] == 2 and rep["phase2"]["allreduce_ok"]
        assert rep["phase2"]["errored_before_abort"] == "None"
    aborted = reports[0]["phase2"]
    assert aborted["pending_after_abort"].startswith("AbortedError"), aborted
    assert "the tandem process group was aborted" in aborted["errored_after_abort"]
    # torchft's Gloo group ends such a wait at its timeout; tandem's abort ends it now.
    assert aborted["abort_to_error_s"] < 10, aborted
    # The peer's collective after that: wait() returns False (torchft's DDP hook asserts when
    # it raises), the future and errored() have tandem's error.
    peer = reports[1]["phase2"]
    assert peer["collective_wait_after_peer_abort"] is False, peer
    assert peer["future_after_peer_abort"] in ("AbortedError", "PeerLostError"), peer
    assert peer["errored_after_peer_abort"] in ("AbortedError", "PeerLostError"), peer


def test_killed_replica_heals_from_the_survivor(job, lighthouse):
    # min_replicas=1: the survivor goes on alone; a dead replica is noticed by the
    # lighthouse after 1 s without heartbeats.
    addr = lighthouse(min_replicas=1, join_timeout_ms=30000, heartbeat_timeout_ms=1000)
    control = master_store()
    common = {"backend": "tandem", "group_rank": 0, "group_world_size": 1, "store_port": None,
              "lighthouse": addr, "control_port": control.port, "replicas": 2,
              "transport": "pg", "after_join": 3}
    both = ["ready/0/0", "ready/1/0"]
    job.start("survivor", "torchft_train.py", {**common, "replica": 0, "role": "survivor",
                                                "solo_steps": 2, "start_after": both})
    job.start("victim", "torchft_train.py", {**common, "replica": 1, "role": "victim",
                                              "steps": 100, "kill_at": 2, "start_after": both})
    rc = job.wait("victim")
    assert rc == -signal.SIGKILL, f"the victim exited {rc}\n{job.logs()}"
    job.start("replacement", "torchft_train.py", {**common, "replica": 1, "role": "replacement"})
    survivor, replacement = [rep["runs"][0] for rep in job.finish("survivor", "replacement")]

    log = survivor["log"]
    assert [e["committed"] for e in log[:2]] == [True, True]
    failure = log[2]
    assert failure["step"] == 2 and not failure["committed"], log
    assert failure["error"].startswith("PeerLostError") and "rank 1" in failure["error"], failure
    solo = [e for e in log[3:] if e["participants"] == 1]
    assert len(solo) >= 2 and all(e["committed"] for e in solo), log
    assert log[3]["quorum"] > failure["quorum"], "no new quorum (and group) after the failure"
    # The replacement's first step heals it (it sits the step out), at the survivor's step.
    first = replacement["log"][0]
    assert not first["participating"] and first["committed"], replacement["log"]
    assert replacement["final_step"] > replacement["log"][0]["step"] + len(replacement["log"])
    assert survivor["join_step"] == replacement["join_step"] is not None
    assert survivor["final_step"] == replacement["final_step"] == survivor["join_step"] + 3
    assert survivor["params"] == replacement["params"]


def test_two_ranks_per_replica_group(job, lighthouse):
    addr = lighthouse(min_replicas=2)
    stores = [master_store() for _ in range(2)]
    for replica in range(2):
        for rank in range(2):
            job.start(f"r{replica}g{rank}", "torchft_train.py",
                      {"backend": "tandem", "replica": replica, "group_rank": rank,
                       "group_world_size": 2, "store_port": stores[replica].port,
                       "lighthouse": addr, "replicas": 2, "steps": 3})
    reports = [rep["runs"][0] for rep in job.finish("r0g0", "r0g1", "r1g0", "r1g1")]
    by = {(r["replica"], r["group_rank"]): r for r in reports}
    for rank in range(2):
        a, b = by[(0, rank)], by[(1, rank)]
        assert a["params"] == b["params"], f"group rank {rank}: the replicas differ"
        want = reference([a["log"], b["log"]], rank, 3)
        for name, got in a["params"].items():
            torch.testing.assert_close(torch.tensor(got), torch.tensor(want[name]), rtol=1e-6,
                                       atol=1e-7, msg=f"group rank {rank}: {name}")
    # Each group rank's gradients were averaged in its own group: their models differ.
    assert by[(0, 0)]["params"] != by[(0, 1)]["params"]


def test_import_without_torchft_says_what_to_install():
    p = subprocess.run([sys.executable, "-c",
                        "import sys; sys.modules['torchft'] = None\n"
                        "import tandem.torchft"],
                       env=worker_env(), capture_output=True, text=True, timeout=WAIT)
    assert p.returncode != 0
    assert "ImportError: tandem.torchft needs torchft" in p.stderr, p.stderr
    assert "pip install torchft==0.2.0" in p.stderr

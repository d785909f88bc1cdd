"""Ray Train, unchanged, on backend "tandem": TorchTrainer with TorchConfig(backend="tandem") on a
local Ray cluster (2 CPUs, loopback) trains a DDP model (ray.train.torch.prepare_model) to the
same losses and final parameters as the same run on Gloo; and when a worker is SIGKILLed in the
middle of the run, the surviving worker's tandem PeerLostError, naming the lost rank and its
pid, is in Ray's logs, and FailureConfig(max_failures=1) restarts the workers from the last
checkpoint and the run ends with the parameters of the run that was not interrupted.

Ray's workers register backend "tandem" through ray.init(runtime_env={"worker_process_setup_hook":
"tandem.torch.register"}) (Ray imports and calls it first thing in every worker process),
before Ray Train's TorchConfig calls init_process_group("tandem") in them;
PYTHONPATH reaches them through runtime_env's env_vars.
One Ray cluster for the module (starting one costs ~10 s on 2 cores, a fit ~35 s)."""

import glob
import json
import os
import re
import sys
import tempfile
import threading

import pytest

pytest.importorskip("ray.train.torch",
                    reason="ray[train] is not installed (scripts/framework-requirements.txt)")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from conftest import PYTHONPATH  # noqa: E402

import ray  # noqa: E402
from ray.train import FailureConfig, RunConfig, ScalingConfig  # noqa: E402
from ray.train.torch import TorchConfig, TorchTrainer  # noqa: E402

WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers")
sys.path.insert(0, WORKERS)
import ray_train  # noqa: E402  (the train loop; Ray pickles it by reference)

STEPS = 8
KILL_STEP = 4
FIT_TIMEOUT = 240  # a fit takes ~35 s here, ~60 s with a restart

# The driver's own environment, read by ray.init and inherited by the cluster it starts:
# RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes Ray use 127.0.0.1 as the node's address (by
# default it replaces 127.0.0.1 with the address of the host's interface, which Ray Train then
# gives the workers as MASTER_ADDR).
DRIVER_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
# Every Ray worker process (controller and training workers): the built package and the train
# loop on the path; the controller polls the workers every 0.2 s instead of every 2 s (each
# ray.train.report waits for a poll: 1.6 s per step otherwise); Ray Train's own collectives
# (report's barrier) give up after 120 s instead of never.
WORKER_ENV = {"PYTHONPATH": os.pathsep.join([PYTHONPATH, WORKERS]), "OMP_NUM_THREADS": "1",
              "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2", "RAY_TRAIN_COLLECTIVE_TIMEOUT_S": "120"}


@pytest.fixture(scope="module")
def cluster():
    tmp = tempfile.TemporaryDirectory(prefix="ray", ignore_cleanup_errors=True)
    with pytest.MonkeyPatch.context() as mp:
        for k, v in DRIVER_ENV.items():
            mp.setenv(k, v)  # for the processes ray.init starts
        # ... and for this process, where Ray read it into a constant at import.
        mp.setattr(ray._private.ray_constants, "ENABLE_RAY_CLUSTER", False)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _temp_dir=tmp.name,
                 runtime_env={"env_vars": WORKER_ENV,
                              "worker_process_setup_hook": "tandem.torch.register"})
        try:
            session = ray._private.worker._global_node.get_session_dir_path()
            yield {"logs": os.path.join(session, "logs"), "tmp": tmp.name}
        finally:
            ray.shutdown()
            tmp.cleanup()


def fit(cluster, backend, kill_step=None):
    """Runs the TorchTrainer; returns (Result, per-rank reports). Bounded by FIT_TIMEOUT."""
    out = tempfile.mkdtemp(dir=cluster["tmp"])
    trainer = TorchTrainer(
        ray_train.train_loop,
        train_loop_config={"steps": STEPS, "out_dir": out, "kill_step": kill_step},
        scaling_config=ScalingConfig(num_workers=2),
        torch_config=TorchConfig(backend=backend, timeout_s=60),
        run_config=RunConfig(name=f"{backend}-{kill_step}",
                             storage_path=tempfile.mkdtemp(dir=cluster["tmp"]),
                             failure_config=FailureConfig(max_failures=1)))
    box = {}

    def run():
        try:
            box["result"] = trainer.fit()
        except BaseException as e:  # noqa: BLE001 - reported below
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(FIT_TIMEOUT)
    assert not t.is_alive(), f"TorchTrainer.fit on {backend} did not return within {FIT_TIMEOUT} s"
    if "error" in box:
        raise box["error"]
    reports = []
    for r in range(2):
        with open(os.path.join(out, f"rank{r}.json")) as f:
            reports.append(json.load(f))
    return box["result"], reports


@pytest.fixture(scope="module")
def tandem_run(cluster):
    return fit(cluster, "tandem")


def test_ray_train_on_tandem_equals_gloo(cluster, tandem_run):
    result, tandem = tandem_run
    assert result.error is None, result.error
    gloo_result, gloo = fit(cluster, "gloo")
    assert gloo_result.error is None, gloo_result.error
    for rank in range(2):
        assert tandem[rank]["backend"] == "tandem" and gloo[rank]["backend"] == "gloo"
        assert tandem[rank]["master_addr"] == "127.0.0.1", tandem[rank]["master_addr"]
        assert len(tandem[rank]["losses"]) == STEPS
        # Two ranks: DDP's averaged gradient is (a + b) / 2 on either backend, the same float.
        assert tandem[rank]["losses"] == gloo[rank]["losses"], f"rank {rank}: losses differ"
        assert tandem[rank]["params"] == gloo[rank]["params"], f"rank {rank}: parameters differ"
    assert tandem[0]["params"] == tandem[1]["params"], "the replicas differ"
    assert result.metrics["step"] == STEPS - 1 and result.checkpoint is not None
    first, last = (sum(tandem[r]["losses"][i] for r in range(2)) for i in (0, -1))
    assert last < first, f"did not learn: {tandem[0]['losses']}, {tandem[1]['losses']}"


def test_ray_train_restarts_after_a_worker_is_killed(cluster, tandem_run):
    result, reports = fit(cluster, "tandem", kill_step=KILL_STEP)
    assert result.error is None, f"the run did not recover: {result.error}"
    # The second attempt started from a checkpoint of the first (not from step 0) ...
    start = reports[0]["resumed_from"]
    assert start is not None and 1 <= start <= KILL_STEP, reports[0]
    assert result.metrics["step"] == STEPS - 1 and result.metrics["resumed_from"] == start
    # ... and, resuming exactly, ended where the uninterrupted run did.
    _, uninterrupted = tandem_run
    for rank in range(2):
        assert reports[rank]["params"] == uninterrupted[rank]["params"], f"rank {rank}"
        assert reports[rank]["losses"] == uninterrupted[rank]["losses"][start:], f"rank {rank}"
    # The surviving rank 0 failed with tandem's report naming rank 1 (its host and the pid
    # that rank 1 wrote before killing itself), and Ray kept it: in the logs it captures from
    # that worker (its stderr, worker-*.err, and Ray Train's worker log) and, when the
    # controller polled the workers after rank 0 failed, in the controller's reason for the
    # restart. That last part is a race in Ray, not in tandem: rank 0's error reached Ray's log
    # ~40 ms after the raylet saw rank 1 go, and a poll in between restarts on rank 1's death
    # alone, so which of the two the reason names is reported, not asserted.
    with open(os.path.join(reports[0]["out_dir"], "killed_pid")) as f:
        killed_pid = int(f.read())
    report = re.compile(r"\[PeerLost\] allreduce #\d+ \(f32 x \d+, \w+\) failed: rank 1 "
                        rf"\(host [^,]+, pid {killed_pid}\) died or closed its connection")
    found = set()
    for path in glob.glob(os.path.join(cluster["logs"], "**", "*"), recursive=True):
        if os.path.isfile(path):
            with open(path, errors="replace") as f:
                if report.search(f.read()):
                    found.add(os.path.relpath(path, cluster["logs"]))
    assert any(p.startswith("worker-") and p.endswith(".err") for p in found), found
    assert any(p.startswith("train/ray-train-app-worker-") for p in found), found
    retries = []
    for path in glob.glob(os.path.join(cluster["logs"], "train", "ray-train-sys-controller-*.log")):
        with open(path, errors="replace") as f:
            for line in f:
                message = json.loads(line).get("message", "")
                if "[FailurePolicy] RETRY" in message:
                    retries.append(message)
    # One restart, for the death of the worker whose pid rank 1 wrote: named Ray's way when
    # the controller saw the dead worker first, or in tandem's report when it saw rank 0's
    # error first (which a busy machine makes more likely).
    assert len(retries) == 1, f"Ray's controller retried {len(retries)} times: {retries}"
    in_controller = bool(report.search(retries[0]))
    assert f"pid={killed_pid}" in retries[0] or in_controller, retries[0]
    print(f"tandem's PeerLost report naming pid {killed_pid} is in: {sorted(found)}; "
          f"in the controller's reason for the restart: {in_controller}")

"""DeepSpeed, unchanged, on backend "tandem": ZeRO stages 1, 2 and 3 train the same MLP, in fp32
and in DeepSpeed's bf16 (bf16 model, fp32 master weights), to the same losses and final
parameters as DeepSpeed on Gloo, and as one process on the global batches
(workers/deepspeed_zero.py says what the run does). The tandem run is traced (TANDEM_TRACE),
which records every collective DeepSpeed sent, with its dtype and op."""

import collections
import json
import os
import sys
import tempfile

import pytest

pytest.importorskip("deepspeed",
                    reason="deepspeed is not installed (scripts/framework-requirements.txt)")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from conftest import run_ranks  # noqa: E402

WORKER = os.path.join("..", "frameworks", "workers", "deepspeed_zero.py")
STAGES = ["1", "2", "3"]
# The worker keeps DeepSpeed from JIT-compiling its CPU shared-memory op (deepspeed_shm_comm,
# used for inference all_reduce only): ~110 s on 2 cores on a fresh machine.
TIMEOUT = 600
STEPS = 6
ENV = {"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "DS_STEPS": str(STEPS)}


def collectives(trace_path, windows):
    """{stage: {phase: Counter of "group name dtype [op]"}} of rank 0's collectives in each
    stage's windows (phase "init": deepspeed.initialize, "train": the steps). Group "world" is
    the default group, "new_group" the clone of it that DeepSpeed makes for data parallelism."""
    with open(trace_path) as f:
        trace = json.load(f)
    base = float(trace.get("otherData", {}).get("ts_base_unix_us", 0))
    found = {s: {ph: collections.Counter() for ph in w} for s, w in windows.items()}
    for e in trace["traceEvents"]:
        if e.get("cat") != "collective" or e.get("ph") != "X" or e.get("pid") != 0:
            continue
        t = base + float(e["ts"])
        a = e.get("args", {})
        group = "world" if e.get("tid") == 1 else "new_group"
        parts = (group, e["name"].split(" #")[0], a.get("dtype"), a.get("op"))
        key = " ".join(str(v) for v in parts if v)
        for s, w in windows.items():
            for phase, (lo, hi) in w.items():
                if lo <= t <= hi:
                    found[s][phase][key] += 1
    return found


# Against one process in fp32, per dtype. fp32: the reference sums the two halves' losses
# before one backward pass where ZeRO sums two gradients, so the last bits differ (measured
# 6e-8 on losses of ~0.7, 3e-8 on parameters of ~0.3, over 6 steps). bf16: the model runs in
# bf16 (8-bit mantissa, relative rounding 2^-9) against the reference's fp32 (measured 6e-4
# on losses, 9e-4 on parameters).
TOLERANCE = {"fp32": 1e-6, "bf16": 1e-2}


@pytest.fixture(scope="module", params=["fp32", "bf16"])
def runs(request):
    """Both backends' runs of one dtype, the three stages in one process pair per backend."""
    env = {**ENV, "DS_DTYPE": request.param}
    gloo, p = run_ranks(WORKER, 2, args=["gloo"], timeout=TIMEOUT, env=env)
    assert p.returncode == 0, p.stderr[-4000:]
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "trace.json")
        tandem, p = run_ranks(WORKER, 2, args=["tandem"], timeout=TIMEOUT,
                              env={**env, "TANDEM_TRACE": trace})
        assert p.returncode == 0, p.stderr[-4000:]
        windows = {s: tandem[0]["stages"][s]["windows_us"] for s in STAGES}
        ops = collectives(trace, windows)
    return {"gloo": gloo, "tandem": tandem, "ops": ops, "dtype": request.param}


@pytest.mark.parametrize("stage", STAGES)
def test_deepspeed_zero_on_tandem_equals_gloo(runs, stage):
    for rank in range(2):
        t, g = runs["tandem"][rank], runs["gloo"][rank]
        assert t["backend"] == "tandem" and g["backend"] == "gloo"
        assert t["dtype"] == g["dtype"] == runs["dtype"]
        ts, gs = t["stages"][stage], g["stages"][stage]
        # Two ranks: every sum is a + b in either order, the same float on any backend and
        # algorithm, so DeepSpeed on tandem and on Gloo agree to the bit.
        assert ts["losses"] == gs["losses"], f"rank {rank}: losses differ from Gloo's"
        assert ts["params"] == gs["params"], f"rank {rank}: final parameters differ from Gloo's"
        tol = TOLERANCE[runs["dtype"]]
        assert ts["reference_loss_diff"] <= tol, f"rank {rank}: {ts['reference_loss_diff']}"
        assert ts["reference_param_diff"] <= tol, f"rank {rank}: {ts['reference_param_diff']}"
    # One model: the ranks' final (under ZeRO-3 gathered) parameters are the same.
    replicas = [runs["tandem"][r]["stages"][stage]["params"] for r in range(2)]
    assert replicas[0] == replicas[1], "the ranks' final parameters differ"
    losses = [runs["tandem"][r]["stages"][stage]["losses"] for r in range(2)]
    assert losses[0][-1] + losses[1][-1] < losses[0][0] + losses[1][0], f"did not learn: {losses}"


def test_deepspeed_collectives_on_tandem(runs):
    """What DeepSpeed sent through backend "tandem", per stage (TANDEM_TRACE of rank 0)."""
    ops = runs["ops"]
    summary = {s: {ph: dict(sorted(c.items())) for ph, c in p.items()} for s, p in ops.items()}
    print(f"DeepSpeed's collectives on tandem, {runs['dtype']}, rank 0, per ZeRO stage:",
          json.dumps(summary, indent=1))

    def count(stage, phase, what):
        """Calls of `what` ("allgather", "reduce_scatter f32 sum", ...) on either group."""
        return sum(n for k, n in ops[stage][phase].items()
                   if k.startswith(f"world {what}") or k.startswith(f"new_group {what}"))
    for s in STAGES:
        assert ops[s]["train"], f"stage {s}: no collective traced in the steps"
        # deepspeed.initialize broadcasts rank 0's parameters.
        assert count(s, "init", "broadcast") > 0, summary
    grad = "bf16" if runs["dtype"] == "bf16" else "f32"  # the gradients' dtype
    # ZeRO-3 gathers the partitioned parameters for the forward and again for the backward
    # pass, and reduce-scatters the gradients, every step.
    assert count("3", "train", "allgather") >= 2 * STEPS, summary
    assert count("3", "train", f"reduce_scatter {grad} sum") >= STEPS, summary
    # ZeRO-1 and -2 all-reduce the gradient buckets every step (here, with 1,348 gradients in
    # 512-element buckets, 3 a step), then all-gather the updated partitions.
    for s in ("1", "2"):
        assert count(s, "train", f"allreduce {grad} sum") >= 3 * STEPS, summary
        assert count(s, "train", "allgather") >= STEPS, summary

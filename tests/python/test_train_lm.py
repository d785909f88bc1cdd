"""bench/gpu/train_lm.py, the GPU training check, run on the CPU with a tiny model: DDP and FSDP2
through backend tandem on 2 ranks train exactly like the one-process reference of the same
global batch, and a rank killed mid-step is named on every survivor, whose device still runs a
new group."""

import json
import os
import subprocess
import sys

from conftest import HERE, worker_env

SCRIPT = os.path.join(HERE, "..", "..", "bench", "gpu", "train_lm.py")
TINY = ["--device", "cpu", "--dtype", "fp32", "--layers", "2", "--dim", "64", "--heads", "4",
        "--vocab", "128", "--seq", "32", "--batch", "4", "--steps", "5", "--warmup", "1"]


def train_lm(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], env=worker_env(), timeout=300,
                          capture_output=True, text=True)


def test_ddp_and_fsdp2_train_like_the_reference(tmp_path):
    out = ["--out", str(tmp_path)]
    for run in (["--nproc", "1", "--mode", "reference", "--world-batch", "2"],
                ["--nproc", "2", "--mode", "ddp"], ["--nproc", "2", "--mode", "fsdp2"]):
        r = train_lm("run", *run, *TINY, *out)
        assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    files = [str(tmp_path / f) for f in ("reference-none-2.json", "ddp-tandem-2.json",
                                         "fsdp2-tandem-2.json")]
    r = train_lm("compare", *files, "--rtol", "1e-5")
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    ref = json.load(open(files[0]))
    assert len(ref["losses"]) == 6 and ref["losses"][-1] < ref["losses"][0], ref
    # The comparison can fail: a run on other data is far off.
    r = train_lm("run", "--nproc", "1", "--mode", "reference", "--world-batch", "1", *TINY, *out)
    assert r.returncode == 0, r.stderr[-3000:]
    r = train_lm("compare", files[0], str(tmp_path / "reference-none-1.json"), "--rtol", "1e-5")
    assert r.returncode == 1, r.stdout


def test_killed_rank_is_named_and_the_device_runs_a_new_group(tmp_path):
    r = train_lm("run", "--nproc", "3", "--mode", "ddp", "--kill-rank", "1", "--kill-at", "3",
                 *TINY, "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    summary = json.load(open(tmp_path / "ddp-tandem-3-kill.json"))
    assert summary["exit_codes"][1] == -9, summary
    assert sorted(summary["survivors"]) == ["0", "2"], summary
    for rank, failure in summary["survivors"].items():
        assert "[PeerLost]" in failure["message"] and "rank 1" in failure["message"], failure
        assert failure["after_s"] < 5, failure
        assert failure["context_ok"] is True, failure
        print(f"rank {rank}: PeerLost {failure['after_s']:.3f} s into the step")

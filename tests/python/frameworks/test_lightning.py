"""PyTorch Lightning, unchanged, on backend "tandem": each strategy that Lightning runs on the
CPU gives the same parameters, metrics, all_gather and resumed fit as the same run on Gloo
(workers/lightning_fit.py says what the run does)."""

import os
import sys
import tempfile

import pytest

pl = pytest.importorskip("pytorch_lightning", reason="pytorch-lightning is not installed "
                         "(scripts/framework-requirements.txt)")
pytest.importorskip("torchmetrics", reason="torchmetrics is not installed")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from conftest import run_ranks  # noqa: E402

WORKER = os.path.join("..", "frameworks", "workers", "lightning_fit.py")


def fit(backend, strategy):
    with tempfile.TemporaryDirectory() as shared:
        reports, _ = run_ranks(WORKER, 2, args=[backend, strategy], timeout=300,
                               env={"SHARED_DIR": shared})
    return reports


@pytest.mark.parametrize("strategy", ["ddp", "model_parallel_fsdp", "model_parallel_tp"])
def test_lightning_run_equals_gloo(strategy):
    tandem, gloo = fit("tandem", strategy), fit("gloo", strategy)
    for rank, (t, g) in enumerate(zip(tandem, gloo)):
        assert t["backend"] == "tandem" and g["backend"] == "gloo"
        assert t["resumed_epoch"] == 3, "the resumed fit did not run its third epoch"
        assert t["gathered"] == [[0.0, 1.0], [1.0, 1.0]], t["gathered"]
        for key in ("params_after_fit", "params_after_resume", "fit_metrics", "validate",
                    "test", "gathered"):
            assert t[key] == g[key], f"rank {rank}: {key} differs from Gloo's"
    # The ranks hold one model.
    assert tandem[0]["params_after_resume"] == tandem[1]["params_after_resume"]
    # Training moved the parameters and the resumed epoch moved them again.
    assert tandem[0]["params_after_fit"] != tandem[0]["params_after_resume"]


def test_lightning_refuses_its_fsdp_strategy_on_the_cpu_for_every_backend():
    # docs/python.md says so: Lightning's accelerator connector, not the backend, refuses it.
    from pytorch_lightning.strategies import FSDPStrategy
    with pytest.raises(ValueError, match="requires a GPU accelerator"):
        pl.Trainer(accelerator="cpu", devices=2, strategy=FSDPStrategy(process_group_backend="gloo"))

"""torch's DistributedDataParallel on a tandem group trains exactly as on gloo: the same
losses and final weights from the same seed, in every mode users rely on."""

import pytest

from conftest import run_ranks


@pytest.mark.parametrize("mode", ["plain", "no_sync", "unused", "bucket_view", "fp16_hook"])
def test_ddp_matches_gloo(mode):
    reports, proc = run_ranks("ddp.py", nproc=2, args=[mode], timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for rank, r in enumerate(reports):
        assert r["steps"] >= 6, r
        assert r["loss_diff"] <= 1e-5, f"rank {rank}: {r}"
        assert r["weight_diff"] <= 1e-5, f"rank {rank}: {r}"
        assert r["replica_diff"] == 0, f"rank {rank}: {r}"
        assert r["loss_first_last"][1] < r["loss_first_last"][0], f"rank {rank} did not learn: {r}"

"""torch 2.x's training stack on backend "tandem", each part against a one-process reference
(workers/stack.py): FSDP2, DTensor on 1-D and 2-D meshes, tensor parallel, functional
collectives eagerly and under torch.compile, object collectives, distributed checkpoint saved
on 2 ranks and loaded on 3."""

import tempfile

import pytest

from conftest import run_ranks


def run_part(part, nproc, env=None, timeout=300):
    reports, proc = run_ranks("stack.py", nproc=nproc, args=[part], env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for rank, report in enumerate(reports):
        assert report, f"rank {rank} ran no check"
        for name, result in report.items():
            assert result == "ok", f"rank {rank}, {name}:\n{result}"
    return reports


@pytest.mark.parametrize("nproc", [2, 3])
def test_fsdp2(nproc):
    reports = run_part("fsdp2", nproc)
    assert set(reports[0]) == {"reshard_after_forward", "no_reshard_after_forward",
                               "bf16_params_fp32_reduce", "gradient_accumulation"}


@pytest.mark.parametrize("nproc", [2, 3, 4])
def test_dtensor(nproc):
    reports = run_part("dtensor", nproc)
    assert ("dtensor_2d" in reports[0]) == (nproc == 4)


@pytest.mark.parametrize("nproc", [2, 3])
def test_tensor_parallel(nproc):
    run_part("tp", nproc)


@pytest.mark.parametrize("nproc", [2, 3])
def test_functional_collectives(nproc):
    run_part("funcol", nproc)


def test_functional_collective_under_inductor():
    run_part("inductor", 2, timeout=600)


@pytest.mark.parametrize("nproc", [2, 3])
def test_object_collectives(nproc):
    run_part("objects", nproc)


def test_distributed_checkpoint_saved_on_2_loaded_on_3():
    with tempfile.TemporaryDirectory() as d:
        run_part("dcp_save", 2, env={"CHECKPOINT_DIR": d})
        run_part("dcp_load", 3, env={"CHECKPOINT_DIR": d})

"""Every collective x dtype x op x awkward size through backend "tandem", on 2 and 3 ranks,
against each rank's own reference (cases.py)."""

import pytest

import cases
from conftest import run_ranks

NAMES = list(cases.all_cases())


@pytest.fixture(scope="module", params=[2, 3], ids=["world2", "world3"])
def reports(request):
    reports, proc = run_ranks("collectives.py", nproc=request.param, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return reports


@pytest.mark.parametrize("name", NAMES)
def test_case(reports, name):
    for rank, report in enumerate(reports):
        assert report.get(name) == "ok", f"rank {rank}: {report.get(name, 'did not run')}"

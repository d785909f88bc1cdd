"""The compatibility matrix (matrix_cells.py) on Gloo and on tandem, 2 ranks each, in one run
of the same torch: tandem accepts every cell that NCCL or Gloo accepts, with the reference
result (NCCL's where NCCL defines one); it refuses only what both refuse, saying what to do
instead; and docs/python.md shows the table these runs make."""

import difflib
import re

import pytest

import matrix_cells as mc
import matrix_table as mt
from conftest import run_ranks

ADVICE = ("use ", "convert", "reduce ", "pass ", "multiply", "view(")


@pytest.fixture(scope="module")
def reports():
    gloo, _ = run_ranks("matrix.py", 2, args=["gloo"], timeout=600)
    tandem, _ = run_ranks("matrix.py", 2, args=["tandem"], timeout=600)
    return tandem, gloo


def cells():
    for c in mc.REDUCTIONS:
        for op in mc.OPS:
            for d in mc.DTYPES:
                yield f"{c} | {op} | {d}", mc.nccl_accepts(c, op, d)
    for c in mc.MOVES:
        for d in mc.DTYPES:
            yield f"{c} | - | {d}", mc.nccl_accepts(c, "-", d)


def test_gloo_ran_every_cell_and_gave_the_reference_where_it_accepts(reports):
    # The reference is Gloo's result wherever Gloo accepts a cell; a Gloo cell that differs
    # would make the reference, not tandem, the thing to question.
    _, gloo = reports
    bad = [f"{name}: {mt.outcome(gloo, name)}" for name, _ in cells()
           if mt.outcome(gloo, name).startswith("differs") or mt.outcome(gloo, name) == "missing"]
    assert not bad, "\n".join(bad)


def test_tandem_accepts_every_cell_nccl_or_gloo_accepts_with_the_reference_result(reports):
    tandem, gloo = reports
    bad = []
    for name, nccl in cells():
        if nccl or mt.accepted(mt.outcome(gloo, name)):
            got = mt.outcome(tandem, name)
            if got not in ("ok", "ran"):
                bad.append(f"{name}: {got} (NCCL {'accepts' if nccl else 'refuses'}, Gloo: "
                           f"{mt.outcome(gloo, name)[:60]})")
    assert not bad, f"{len(bad)} cells:\n" + "\n".join(bad)


def test_tandem_refuses_only_what_both_refuse_and_says_what_to_do(reports):
    tandem, gloo = reports
    bad = []
    for name, nccl in cells():
        got = mt.outcome(tandem, name)
        if got.startswith("differs"):
            bad.append(f"{name}: {got}")
        elif got.startswith("refused") and "tandem" in got and not any(a in got for a in ADVICE):
            bad.append(f"{name}: a refusal without advice: {got}")
    assert not bad, "\n".join(bad)


def test_layouts_tandem_accepts_what_gloo_accepts_and_gets_them_right(reports):
    tandem, gloo = reports
    bad = []
    for name in mc.layout_cells():
        got, g = mt.outcome(tandem, name), mt.outcome(gloo, name)
        if got.startswith("differs"):
            bad.append(f"{name}: {got}")
        elif not mt.accepted(got) and (mt.accepted(g) or g.startswith("crashes")):
            bad.append(f"{name}: {got} (Gloo: {g[:60]})")
    assert not bad, "\n".join(bad)


def test_a_coalesced_block_may_mix_dtypes_as_on_nccl(reports):
    # Gloo refuses it; NCCL groups the calls of a _coalescing_manager block whatever their dtypes.
    tandem, _ = reports
    assert mt.outcome(tandem, "layout: mixed dtypes | _coalescing_manager") == "ok"


def test_docs_show_this_matrix(reports):
    tandem, gloo = reports
    with open(mt.DOC) as f:
        page = f.read()
    # What each backend did is compared; the wording of another library's refusal is not.
    def outcomes_only(text):
        return re.sub(r"refused: [^|]*", "refused ", text)
    want = outcomes_only(mt.render(tandem, gloo))
    have = outcomes_only(mt.section_of(page) or "")
    diff = "\n".join(difflib.unified_diff(have.splitlines(), want.splitlines(), "docs",
                                          "this run", lineterm="", n=0))
    assert have == want, (
        "docs/python.md's matrix is not what this run gives: rewrite it with "
        "`TANDEM_BUILD_DIR=build .venv/bin/python tests/python/matrix_table.py`\n" + diff)

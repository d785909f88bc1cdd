"""The compatibility matrix as docs/python.md shows it, made from the reports of
workers/matrix.py on Gloo and on tandem (test_matrix.py runs both and checks the page against
this). Run directly, it runs both backends and rewrites the page's table:

    TANDEM_BUILD_DIR=build .venv/bin/python tests/python/matrix_table.py
"""

import os
import re
import sys

import matrix_cells as mc

BEGIN = "<!-- matrix: made by tests/python/matrix_table.py -->"
END = "<!-- matrix: end -->"
DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "python.md")


def outcome(reports, cell):
    """The cell's outcome over every rank: the first rank's that is not "ok"/"ran", else "ok"."""
    worst = "ok"
    for r in reports:
        v = r.get(cell, "missing")
        if v not in ("ok", "ran"):
            return v
        if v == "ran":
            worst = "ran"
    return worst


def accepted(v):
    return v in ("ok", "ran") or v.startswith("differs")


def letters(t, g, n):
    """'TGN' with '·' for each of tandem, Gloo, NCCL that refuses; a lower-case letter where the
    call ran and gave another result than the reference."""
    def one(letter, v):
        if v is None:
            return " "
        if isinstance(v, bool):
            return letter if v else "·"
        if v.startswith("differs"):
            return letter.lower()
        if v.startswith("crashes"):
            return "✗"
        return letter if accepted(v) else "·"
    return one("T", t) + one("G", g) + one("N", n)


def reduction_table(tandem, gloo):
    dnames = list(mc.DTYPES)
    lines = ["| dtype | " + " | ".join(mc.OPS) + " |",
             "|---|" + "---|" * len(mc.OPS)]
    notes = []
    for d in dnames:
        row = []
        for op in mc.OPS:
            cells = {c: letters(outcome(tandem, f"{c} | {op} | {d}"),
                                outcome(gloo, f"{c} | {op} | {d}"), mc.nccl_accepts(c, op, d))
                     for c in mc.REDUCTIONS}
            first = cells[mc.REDUCTIONS[0]]
            row.append(first)
            for c, v in cells.items():
                if v != first:
                    notes.append(f"{d} {op}, {c}: {v}")
        lines.append(f"| {d} | " + " | ".join(row) + " |")
    return lines, notes


def move_table(tandem, gloo):
    lines = ["| dtype | " + " | ".join(mc.MOVES) + " |", "|---|" + "---|" * len(mc.MOVES)]
    for d in mc.DTYPES:
        row = [letters(outcome(tandem, f"{c} | - | {d}"), outcome(gloo, f"{c} | - | {d}"),
                       mc.nccl_accepts(c, "-", d)) for c in mc.MOVES]
        lines.append(f"| {d} | " + " | ".join(row) + " |")
    return lines


def layout_table(tandem, gloo):
    lines = ["| tensor | collective | tandem | Gloo |", "|---|---|---|---|"]

    def say(v):
        if v in ("ok", "ran"):
            return "✓"
        if v.startswith("differs"):
            return "wrong result"
        if v.startswith("crashes"):
            return "process crashes"
        # Without the log prefix some messages carry ("[rank0]:[F1207 00:36:57.05 file:line] ").
        why = re.sub(r"\[rank\d+\]:\[[^\]]*\]\s*", "", v.split(": ", 2)[-1])
        return "refused: " + why[:90].replace("|", "/").strip()
    for cell in mc.layout_cells():
        shape, coll = cell[len("layout: "):].split(" | ")
        lines.append(f"| {shape} | {coll} | {say(outcome(tandem, cell))} | "
                     f"{say(outcome(gloo, cell))} |")
    return lines


def render(tandem, gloo):
    """The page's section between BEGIN and END (exclusive), as one string."""
    red, notes = reduction_table(tandem, gloo)
    out = [BEGIN, "",
           "Reductions (`all_reduce`, `reduce`, `reduce_scatter_tensor` in and out of place, "
           "`reduce_scatter`), each cell tandem, Gloo, NCCL: a letter where that backend "
           "accepts the call with the reference result, `·` where it refuses it:", ""]
    out += red
    if notes:
        out += ["", "Where a collective differs from `all_reduce`'s cell:", ""]
        out += [f"- {n}" for n in notes]
    out += ["", "Moves (no reduction), the same letters:", ""]
    out += move_table(tandem, gloo)
    out += ["", "Layouts and lists (float32, SUM), tandem against Gloo:", ""]
    out += layout_table(tandem, gloo)
    out += ["", END]
    return "\n".join(out)


def section_of(page):
    """The current section in `page` (BEGIN..END inclusive), or None."""
    if BEGIN not in page or END not in page:
        return None
    return page[page.index(BEGIN):page.index(END) + len(END)]


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from conftest import run_ranks  # noqa: PLC0415 - the tests' launcher helper
    gloo, _ = run_ranks("matrix.py", 2, args=["gloo"])
    tandem, _ = run_ranks("matrix.py", 2, args=["tandem"])
    with open(DOC) as f:
        page = f.read()
    old = section_of(page)
    if old is None:
        sys.exit(f"{DOC} has no section between '{BEGIN}' and '{END}'")
    with open(DOC, "w") as f:
        f.write(page.replace(old, render(tandem, gloo)))
    print(f"rewrote the matrix in {DOC}")


if __name__ == "__main__":
    main()

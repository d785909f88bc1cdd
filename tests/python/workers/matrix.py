"""Runs every cell of the compatibility matrix (matrix_cells.py) on backend argv[1] and writes
{cell: outcome} to $REPORT_DIR/rank<R>.json, where outcome is "ok" (the result equals the
reference), "differs: ..." (the call returned and the result is not the reference) or
"refused: <exception type>: <message>". Cells run in one order on every rank; a cell refused on
every rank leaves the ranks in step for the next one."""

import datetime
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch.distributed as dist  # noqa: E402

import matrix_cells  # noqa: E402

backend = sys.argv[1]
if backend == "tandem":
    import tandem.torch  # noqa: F401

# A cell that fails on one rank only would leave the other waiting: seconds, not minutes.
dist.init_process_group(backend, timeout=datetime.timedelta(seconds=30))
rank, world = dist.get_rank(), dist.get_world_size()
report = {}
for name, run in {**matrix_cells.all_cells(), **matrix_cells.layout_cells()}.items():
    if backend == "gloo" and name in matrix_cells.GLOO_CRASHES:
        report[name] = "crashes: the process dies (SIGSEGV) in ProcessGroupGloo; not run"
        continue
    if os.environ.get("MATRIX_TRACE"):
        print(name, file=sys.stderr, flush=True)
    try:
        report[name] = run(rank, world)
    except Exception as e:  # noqa: BLE001 - the outcome of the cell
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        report[name] = f"refused: {type(e).__name__}: {first[:300]}"
with open(os.path.join(os.environ["REPORT_DIR"], f"rank{rank}.json"), "w") as f:
    json.dump(report, f)
dist.destroy_process_group()

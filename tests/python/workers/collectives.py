"""Runs every case of cases.py on this rank and writes {case: "ok" | failure} to
$REPORT_DIR/rank<R>.json. Cases run in one order on every rank; a failed case is recorded
and the next one runs (a collective that raised on every rank leaves them in step)."""

import datetime
import json
import os
import sys
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch.distributed as dist  # noqa: E402

import cases  # noqa: E402
import tandem.torch  # noqa: E402,F401

# A case that fails on some ranks only can leave the others waiting: a minute, not 30.
dist.init_process_group("tandem", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
report = {}
for name, run in cases.all_cases().items():
    try:
        run(rank, world)
        report[name] = "ok"
    except Exception:  # noqa: BLE001 - recorded for the test to show
        report[name] = traceback.format_exc(limit=3)
with open(os.path.join(os.environ["REPORT_DIR"], f"rank{rank}.json"), "w") as f:
    json.dump(report, f)
dist.destroy_process_group()

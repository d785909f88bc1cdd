"""What the fault workers (faults.py, stack_faults.py) share: each rank's report of what it saw,
and the moment the misbehaving rank misbehaved, both in $REPORT_DIR."""

import json
import os
import time

REPORT_DIR = os.environ["REPORT_DIR"]


def report(rank, **kv):
    """Writes this rank's report (its pid added) to $REPORT_DIR/rank<rank>.json."""
    kv["pid"] = os.getpid()
    with open(os.path.join(REPORT_DIR, f"rank{rank}.json"), "w") as f:
        json.dump(kv, f)


def mark():
    """Records now as the moment of the misbehaviour."""
    with open(os.path.join(REPORT_DIR, "misbehaved_at"), "w") as f:
        f.write(repr(time.time()))


def since_misbehaviour():
    """Seconds since mark() was called (on any rank)."""
    with open(os.path.join(REPORT_DIR, "misbehaved_at")) as f:
        return time.time() - float(f.read())

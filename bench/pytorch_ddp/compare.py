#!/usr/bin/env python3
"""Prints PyTorch DDP's and tandem's Fashion-MNIST runs as one table.

Usage: compare.py DIR [NP]   (DIR holds {pytorch,tandem}-ddp-1.log, -ddp-NP.log and
-compute-NP.log, written by run.sh; NP defaults to 2). Each log holds rank 0's output, whose
last line starting with "result: " (after an optional "[rank 0]: " or "[default0]:" prefix)
is read:
    result: world_size=W epochs=E steps=S global_batch=G test_accuracy=A ms_per_step=M images_per_s=I
"""
import os
import re
import sys

RESULT = re.compile(r"^(?:\[rank 0\]: |\[default0\]:)?result: (.*)$")
FIELDS = ("world_size", "epochs", "steps", "global_batch", "test_accuracy", "ms_per_step",
          "images_per_s")


def parse(path):
    """The fields of the last result line of PATH as numbers, or None (missing, failed run)."""
    if not os.path.exists(path):
        return None
    found = None
    with open(path, errors="replace") as f:
        for line in f:
            m = RESULT.match(line.rstrip("\n"))
            if m:
                pairs = dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv)
                try:
                    found = {k: float(pairs[k]) for k in FIELDS}
                except (KeyError, ValueError):
                    continue
    return found


def ratio(a, b, fmt="%.2f"):
    return fmt % (a / b) if a is not None and b else "-"


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__)
        return 2
    out_dir = sys.argv[1]
    np_ = int(sys.argv[2]) if len(sys.argv) == 3 else 2
    runs = [(1, "ddp"), (np_, "ddp"), (np_, "compute")]
    header = ("framework", "ranks", "mode", "steps", "ms/step", "images/s", "scaling",
              "vs compute", "test acc %")
    row = "%-9s %5s %-12s %6s %8s %9s %8s %10s %10s"
    print()
    print(row % header)
    missing = 0
    for fw in ("pytorch", "tandem"):
        paths = {(n, mode): os.path.join(out_dir, "%s-%s-%d.log" % (fw, mode, n))
                 for n, mode in runs}
        if fw == "tandem" and not any(os.path.exists(p) for p in paths.values()):
            continue  # left out of this run
        res = {key: parse(path) for key, path in paths.items()}
        one = res[(1, "ddp")]
        for n, mode in runs:
            r = res[(n, mode)]
            label = "ddp" if mode == "ddp" else "compute-only"
            if r is None:
                print(row % ((fw, n, label) + ("-",) * 6) +
                      "  no result line: see %s-%s-%d.log" % (fw, mode, n))
                missing += 1
                continue
            comp = res[(n, "compute")] if mode == "ddp" and n > 1 else None
            print(row % (fw, n, label, int(r["steps"]), "%.2f" % r["ms_per_step"],
                         "%.1f" % r["images_per_s"],
                         ratio(r["images_per_s"], one and one["images_per_s"]),
                         ratio(r["ms_per_step"], comp and comp["ms_per_step"]),
                         "%.2f" % r["test_accuracy"]))
    print()
    print("ms/step: mean after the first 20 steps, evaluation excluded, over the ranks. "
          "images/s: all ranks.\nscaling: images/s over the same framework's 1 rank. "
          "vs compute: ms/step over the compute-only run (no gradient communication).\n"
          "compute-only test accuracy: the ranks' own models, averaged.")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())

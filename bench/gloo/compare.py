#!/usr/bin/env python3
"""Prints Gloo's and tandem's tables over TCP side by side (out-of-place columns).

Usage: compare.py DIR COLLECTIVE...   (DIR holds {gloo,tandem}-tcp-COLLECTIVE.txt, written by
run.sh)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from perf_table import human, parse  # noqa: E402


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    out_dir, collectives = sys.argv[1], sys.argv[2:]
    for coll in collectives:
        gloo = parse(os.path.join(out_dir, "gloo-tcp-%s.txt" % coll))[0]
        tandem = parse(os.path.join(out_dir, "tandem-tcp-%s.txt" % coll))[0]
        print()
        print("%s over TCP loopback, out-of-place: mean and p50 of the slowest rank's time (us), "
              "busbw (GB/s); x = Gloo mean / tandem mean (above 1: tandem faster)" % coll)
        print("%8s | %9s %9s %7s  %-24s | %9s %9s %7s | %6s" % (
            "size", "gloo mean", "p50", "busbw", "gloo algorithm", "tandem", "p50", "busbw", "x"))
        for size in sorted(set(gloo) | set(tandem)):
            g, t = gloo.get(size), tandem.get(size)
            gv = ("%.1f" % g[0], "%.1f" % g[1], "%.2f" % g[2], g[4]) if g else ("-",) * 4
            tv = ("%.1f" % t[0], "%.1f" % t[1], "%.2f" % t[2]) if t else ("-",) * 3
            ratio = "%.2f" % (g[0] / t[0]) if g and t and t[0] > 0 else "-"
            wrong = ""
            if g and g[3] != "0":
                wrong += " GLOO-WRONG=%s" % g[3]
            if t and t[3] != "0":
                wrong += " TANDEM-WRONG=%s" % t[3]
            print("%8s | %9s %9s %7s  %-24s | %9s %9s %7s | %6s%s" % (
                (human(size),) + gv + tv + (ratio, wrong)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Prints Gloo's and tandem's tables over TCP side by side (out-of-place columns).

Usage: compare.py DIR COLLECTIVE...   (DIR holds {gloo,tandem}-tcp-COLLECTIVE.txt, written by
run.sh)."""
import os
import re
import sys

PREFIX = re.compile(r"^\[rank \d+\]: ")


def parse(path):
    """size -> (mean us, p50 us, busbw GB/s, #wrong, algorithm) of the out-of-place columns."""
    rows = {}
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            line = PREFIX.sub("", line.rstrip("\n"))
            cols = line.split()
            if line.startswith("#") or len(cols) < 10 or not cols[0].isdigit():
                continue
            algo = cols[15].split("|")[0] if len(cols) > 15 else "-"  # the out-of-place one
            rows[int(cols[0])] = (float(cols[5]), float(cols[6]), float(cols[8]), cols[9], algo)
    return rows


def human(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d%s" % (n // div, unit)
    return str(n)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    out_dir, collectives = sys.argv[1], sys.argv[2:]
    for coll in collectives:
        gloo = parse(os.path.join(out_dir, "gloo-tcp-%s.txt" % coll))
        tandem = parse(os.path.join(out_dir, "tandem-tcp-%s.txt" % coll))
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

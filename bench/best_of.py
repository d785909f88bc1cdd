#!/usr/bin/env python3
"""Merges runs of one benchmark with different forced algorithms into one table: for each size
and each column (out-of-place, in-place) the run with the lowest mean time wins, and its
algorithm label is named in the last column ("A" or "A|B": out-of-place|in-place), as
tandem-perf and bench/gloo do. #wrong is the sum over all runs of that size, so a wrong result
from any candidate shows.

With --median the run with the median mean time wins instead (the faster middle one of an
even count): bench/run-all.sh merges its rounds of one configuration so, so that one lucky or
unlucky run does not decide a row.

Usage: best_of.py [--median] OUT.txt IN.txt...   (tables in tandem-perf's layout, e.g. from
mpi_bench -a)
"""
import os
import re
import sys

PREFIX = re.compile(r"^\[rank \d+\]: ")


def rows_of(path):
    """size -> (leading 5 columns, out-of-place 5 columns, in-place 5 columns, label)."""
    rows = {}
    with open(path) as f:
        for line in f:
            line = PREFIX.sub("", line.rstrip("\n"))
            cols = line.split()
            if line.startswith("#") or len(cols) < 15 or not cols[0].isdigit():
                continue
            label = cols[15] if len(cols) > 15 else os.path.basename(path)
            rows[int(cols[0])] = (cols[0:5], cols[5:10], cols[10:15], label)
    return rows


def pick(cands, col, median=False):
    """The candidate (stats, label) with the lowest (or the median) mean time in column col
    (1 or 2)."""
    ranked = sorted(cands, key=lambda r: float(r[col][0]))
    best = ranked[(len(ranked) - 1) // 2] if median else ranked[0]
    return best[col], best[3].split("|")[col - 1] if "|" in best[3] else best[3]


def main():
    args = sys.argv[1:]
    median = bool(args) and args[0] == "--median"
    if median:
        args = args[1:]
    if len(args) < 2:
        print(__doc__)
        return 2
    out_path, inputs = args[0], [p for p in args[1:] if os.path.exists(p)]
    tables = [(p, rows_of(p)) for p in inputs]
    header = []
    if inputs:
        with open(inputs[0]) as f:
            header = [l.rstrip("\n") for l in f if l.startswith("#") and "Out of bounds" not in l
                      and "Avg bus" not in l and l.strip() != "#"]
    sizes = sorted(set().union(*(t.keys() for _, t in tables))) if tables else []
    wrong_total, bw = 0, []
    lines = header + ["# %s per size and column of the runs that measured it (%d runs): %s" % (
        "median" if median else "best", len(inputs),
        " ".join(sorted({r[3] for _, t in tables for r in t.values()})))]
    for size in sizes:
        cands = [t[size] for _, t in tables if size in t]
        (oop, a), (ip, b) = pick(cands, 1, median), pick(cands, 2, median)
        wrong = sum(int(c[1][4]) + int(c[2][4]) for c in cands if c[1][4].isdigit()
                    and c[2][4].isdigit())
        oop, ip = oop[:4] + [str(wrong)], ip[:4] + [str(wrong)]
        wrong_total += wrong
        bw += [float(oop[3]), float(ip[3])]
        lead = cands[0][0]
        lines.append("  %10s  %12s  %6s  %6s  %4s  %9s %9s %7s %7s %6s  %9s %9s %7s %7s %6s  %s" % tuple(
            lead + oop + ip + [a if a == b else "%s|%s" % (a, b)]))
    lines.append("# Out of bounds values : %d %s" % (wrong_total, "OK" if wrong_total == 0 else "FAILED"))
    lines.append("# Avg bus bandwidth : %.4f" % (sum(bw) / len(bw) if bw else 0.0))
    lines.append("#")
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0 if wrong_total == 0 and sizes else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Prints Open MPI's and tandem's tables side by side (out-of-place columns).

Usage: compare.py DIR COLLECTIVE...   (DIR holds {mpi,tandem}-{shm,tcp}-COLLECTIVE.txt,
written by run.sh)."""
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
        tables = {}
        for impl in ("mpi", "tandem"):
            for net in ("shm", "tcp"):
                tables[(impl, net)] = parse(os.path.join(out_dir, "%s-%s-%s.txt" % (impl, net, coll)))
        sizes = sorted(set().union(*(t[0].keys() for t in tables.values())))
        print()
        print("%s, out-of-place: mean and p50 of the slowest rank's time (us), busbw (GB/s); "
              "x = MPI mean / tandem mean (above 1: tandem faster)" % coll)
        cell = "%9s %9s %7s  %9s %9s %7s %8s"
        print("%8s | %-58s | %-58s" % ("", "shared memory (Open MPI: btl vader)",
                                        "TCP loopback (Open MPI: btl tcp)"))
        names = ("mpi mean", "p50", "busbw", "tandem", "p50", "busbw", "x")
        print("%8s | %s | %s" % ("size", cell % names, cell % names))
        for size in sizes:
            cells = []
            for net in ("shm", "tcp"):
                m = tables[("mpi", net)][0].get(size)
                t = tables[("tandem", net)][0].get(size)
                mv = ("%.1f" % m[0], "%.1f" % m[1], "%.2f" % m[2]) if m else ("-",) * 3
                tv = ("%.1f" % t[0], "%.1f" % t[1], "%.2f" % t[2]) if t else ("-",) * 3
                ratio = "%.2f" % (m[0] / t[0]) if m and t and t[0] > 0 else "-"
                text = cell % (mv + tv + (ratio,))
                if t and t[3] != "0":
                    text += " WRONG=%s" % t[3]
                cells.append(text)
            print("%8s | %s | %s" % (human(size), cells[0], cells[1]))
        for (impl, net), (_, footer) in sorted(tables.items()):
            for line in footer:
                print("  %-6s %-3s %s" % (impl, net, line.lstrip("# ")))
    return 0


if __name__ == "__main__":
    sys.exit(main())

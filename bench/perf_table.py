"""Reading tandem-perf-style tables (tandem-perf, bench/openmpi/mpi_bench, bench/gloo), shared
by the compare.py scripts of bench/."""

import os
import re

PREFIX = re.compile(r"^\[rank \d+\]: ")


def parse(path, in_place=False):
    """(rows, header): rows maps size -> (mean us, p50 us, busbw GB/s, #wrong, algorithm) of the
    out-of-place columns (the in-place ones with in_place=True); header holds the summary
    comment lines. A missing file gives no rows and a header line naming it."""
    rows, header = {}, []
    if not os.path.exists(path):
        return rows, ["(missing: %s)" % path]
    with open(path) as f:
        for line in f:
            line = PREFIX.sub("", line.rstrip("\n"))
            if line.startswith("#"):
                if "Avg bus bandwidth" in line or "Out of bounds" in line:
                    header.append(line)
                continue
            cols = line.split()
            if len(cols) < 10 or not cols[0].isdigit():
                continue
            if in_place and len(cols) < 15:
                continue
            algos = cols[15].split("|") if len(cols) > 15 else ["-"]  # out-of-place|in-place
            algo = algos[-1] if in_place else algos[0]
            c = 10 if in_place else 5
            rows[int(cols[0])] = (float(cols[c]), float(cols[c + 1]), float(cols[c + 3]),
                                  cols[c + 4], algo)
    return rows, header


def human(n):
    """1048576 -> "1M"; sizes that are not whole K/M/G stay in bytes."""
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d%s" % (n // div, unit)
    return str(n)

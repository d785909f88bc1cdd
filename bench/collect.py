#!/usr/bin/env python3
"""Gathers the tables written by bench/run-all.sh into one result set.

Usage: collect.py DIR [COLLECTIVE...]   (default: allreduce broadcast allgather)

Reads DIR/<series>-<collective>.txt (tandem-perf's layout; the out-of-place columns, for
broadcast the in-place ones: see IN_PLACE) and
DIR/versions.txt, and writes
  DIR/results.csv          one row per collective, library, transport and size
  DIR/results.json         the same rows, with the versions and the run's parameters
  DIR/busbw-<coll>.dat     size and busbw per series, for bench/plot.gp (NaN: not measured)
  DIR/results.md           one Markdown table per collective (also printed): mean µs up to
                           SMALL bytes, busbw GB/s above; the best of each row in bold
Exits 1 if a table reports a wrong value, 0 otherwise (missing tables show as "—").
"""
import csv
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from perf_table import human, parse  # noqa: E402

# (file prefix, library, transport, column title)
SERIES = [
    ("tandem-shm", "tandem", "shm", "tandem shm"),
    ("mpi-shm", "Open MPI", "vader", "Open MPI vader"),
    ("mpich-shm", "MPICH", "ucx-sm", "MPICH shm"),
    ("tandem-tcp", "tandem", "tcp", "tandem TCP"),
    ("mpi-tcp", "Open MPI", "tcp", "Open MPI TCP"),
    ("gloo-tcp", "Gloo", "tcp", "Gloo TCP"),
]
SMALL = 8 << 10  # up to this size a cell shows the mean time, above it busbw
# MPI_Bcast has one buffer (the root's data is the result): the in-place column of every
# library is the one doing that work. Out-of-place, tandem and Gloo also copy the root's input
# into its output, which MPI never does.
IN_PLACE = {"broadcast"}


def read_versions(path):
    versions = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                key, sep, value = line.rstrip("\n").partition("=")
                if sep:
                    versions[key] = value
    return versions


def cell(row, size):
    if row is None:
        return "—"
    return "%.2f µs" % row[0] if size <= SMALL else "%.2f" % row[2]


def markdown(coll, tables, sizes):
    lines = ["#### %s (f32, %s): mean µs up to %s, busbw GB/s above" % (
                 coll, "in-place" if coll in IN_PLACE else "out-of-place", human(SMALL)),
             "",
             "| size | " + " | ".join(s[3] for s in SERIES) + " |",
             "|---:|" + "---:|" * len(SERIES)]
    for size in sizes:
        rows = [tables[s[0]].get(size) for s in SERIES]
        have = [r for r in rows if r is not None]
        best = None
        if have:
            best = min(have, key=lambda r: r[0]) if size <= SMALL else max(have, key=lambda r: r[2])
        cells = []
        for r in rows:
            text = cell(r, size)
            if r is not None and r is best and len(have) > 1:
                text = "**%s**" % text
            if r is not None and r[3] != "0":
                text += " (%s wrong)" % r[3]
            cells.append(text)
        lines.append("| %s | %s |" % (human(size), " | ".join(cells)))
    return lines


def targets(all_tables):
    """Lines checking the side-by-side targets on the largest size measured."""
    out = []
    for coll in ("broadcast", "allgather"):
        t = all_tables.get(coll)
        if not t:
            continue
        common = set(t["tandem-shm"]) & set(t["mpi-shm"])
        if not common:
            continue
        size = max(common)
        ours, theirs = t["tandem-shm"][size][2], t["mpi-shm"][size][2]
        ratio = ours / theirs if theirs > 0 else float("inf")
        out.append("- %s %s over shm: tandem %.2f GB/s, Open MPI vader %.2f GB/s: %.2f× "
                   "(target ≥ 1.5×: %s)" % (coll, human(size), ours, theirs, ratio,
                                           "met" if ratio >= 1.5 else "missed"))
    t = all_tables.get("allreduce")
    if t and t["tandem-shm"]:
        size = max(t["tandem-shm"])
        out.append("- allreduce %s over shm: tandem %.2f GB/s busbw (target ≥ 3.5 GB/s, user "
                   "buffers)" % (human(size), t["tandem-shm"][size][2]))
        if 8 in t["tandem-shm"]:
            out.append("- allreduce 8 B over shm: tandem %.2f µs mean (target ≤ 0.4 µs)"
                       % t["tandem-shm"][8][0])
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    out_dir = sys.argv[1]
    collectives = sys.argv[2:] or ["allreduce", "broadcast", "allgather"]
    versions = read_versions(os.path.join(out_dir, "versions.txt"))
    records, md, all_tables, wrong = [], [], {}, 0
    for coll in collectives:
        tables = {}
        for prefix, lib, transport, title in SERIES:
            rows, _ = parse(os.path.join(out_dir, "%s-%s.txt" % (prefix, coll)),
                            in_place=coll in IN_PLACE)
            tables[prefix] = rows
            for size, (mean, p50, busbw, bad, algo) in sorted(rows.items()):
                records.append({"collective": coll, "library": lib, "transport": transport,
                                "in_place": coll in IN_PLACE,
                                "series": title, "size": size, "mean_us": mean, "p50_us": p50,
                                "busbw_gbs": busbw, "wrong": int(bad) if bad.isdigit() else -1,
                                "algorithm": algo})
                if bad != "0":
                    wrong += 1
        all_tables[coll] = tables
        sizes = sorted(set().union(*(t.keys() for t in tables.values())))
        md += markdown(coll, tables, sizes) + [""]
        with open(os.path.join(out_dir, "busbw-%s.dat" % coll), "w") as f:
            f.write("size\t" + "\t".join('"%s"' % s[3] for s in SERIES) + "\n")
            for size in sizes:
                vals = [tables[s[0]].get(size) for s in SERIES]
                f.write("%d\t%s\n" % (size, "\t".join("%.4f" % v[2] if v else "NaN" for v in vals)))
    md += targets(all_tables)
    if versions:
        md += ["", "Versions: " + "; ".join("%s %s" % kv for kv in sorted(versions.items()))]
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    fields = ["collective", "library", "transport", "in_place", "series", "size", "mean_us", "p50_us",
              "busbw_gbs", "wrong", "algorithm"]
    with open(os.path.join(out_dir, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(records)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"versions": versions, "collectives": collectives, "rows": records}, f, indent=1)
    print("\n".join(md))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())

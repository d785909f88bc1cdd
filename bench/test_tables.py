#!/usr/bin/env python3
"""Checks of the table tools of bench/ on made-up tables (no MPI, no tandem needed):

    python3 bench/test_tables.py
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from perf_table import parse  # noqa: E402

ROW = "  %10d  %12d  %6s  %6s  %4d  %9.2f %9.2f %7.2f %7.2f %6d  %9.2f %9.2f %7.2f %7.2f %6d  %s\n"


def table(path, rows, prefix=""):
    """rows: (size, oop mean, oop busbw, ip mean, ip busbw, wrong, label)."""
    with open(path, "w") as f:
        f.write(prefix + "# mpi_bench: test\n")
        for size, om, ob, im, ib, wrong, label in rows:
            f.write(prefix + ROW % (size, size // 4, "f32", "sum", -1, om, om, ob, ob, wrong, im, im,
                                    ib, ib, wrong, label))
        f.write(prefix + "# Out of bounds values : 0 OK\n")


class BestOf(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def run_best_of(self, *inputs, flags=()):
        out = os.path.join(self.dir, "best.txt")
        rc = subprocess.call([sys.executable, os.path.join(HERE, "best_of.py"), *flags, out] +
                             [os.path.join(self.dir, p) for p in inputs])
        return rc, out

    def test_median_of_rounds(self):
        table(os.path.join(self.dir, "r1.txt"), [(8, 1.0, 0.0, 9.0, 0.0, 0, "tree"),
                                                 (1024, 3.0, 0.3, 4.0, 0.2, 0, "ring")])
        table(os.path.join(self.dir, "r2.txt"), [(8, 5.0, 0.0, 2.0, 0.0, 0, "tree"),
                                                 (1024, 9.0, 0.1, 2.0, 0.5, 0, "ring")])
        table(os.path.join(self.dir, "r3.txt"), [(8, 2.0, 0.0, 3.0, 0.0, 0, "tree"),
                                                 (1024, 1.0, 0.9, 8.0, 0.1, 0, "direct")])
        rc, out = self.run_best_of("r1.txt", "r2.txt", "r3.txt", flags=["--median"])
        self.assertEqual(rc, 0)
        oop, ip = parse(out)[0], parse(out, in_place=True)[0]
        self.assertEqual(oop[8][0], 2.0)
        self.assertEqual(ip[8][0], 3.0)
        self.assertEqual((oop[1024][0], oop[1024][2], oop[1024][4]), (3.0, 0.3, "ring"))
        self.assertEqual((ip[1024][0], ip[1024][4]), (4.0, "ring"))
        # Two rounds: the faster one.
        rc, out = self.run_best_of("r1.txt", "r2.txt", flags=["--median"])
        self.assertEqual(parse(out)[0][8][0], 1.0)
        with open(out) as f:
            self.assertIn("# median per size and column of the runs that measured it (2 runs)",
                          f.read())

    def test_fastest_per_size_and_column(self):
        table(os.path.join(self.dir, "a.txt"), [(8, 1.0, 0.0, 5.0, 0.0, 0, "ring"),
                                                (1024, 9.0, 0.1, 2.0, 0.5, 0, "ring")])
        table(os.path.join(self.dir, "b.txt"), [(8, 2.0, 0.0, 1.5, 0.0, 0, "tree"),
                                                (1024, 3.0, 0.3, 4.0, 0.2, 0, "tree")])
        rc, out = self.run_best_of("a.txt", "b.txt")
        self.assertEqual(rc, 0)
        oop, ip = parse(out)[0], parse(out, in_place=True)[0]
        self.assertEqual((oop[8][0], oop[8][4]), (1.0, "ring"))
        self.assertEqual((ip[8][0], ip[8][4]), (1.5, "tree"))
        self.assertEqual((oop[1024][0], oop[1024][4]), (3.0, "tree"))
        self.assertEqual((ip[1024][0], ip[1024][4]), (2.0, "ring"))

    def test_a_wrong_candidate_shows_and_fails(self):
        table(os.path.join(self.dir, "a.txt"), [(8, 1.0, 0.0, 1.0, 0.0, 0, "ring")])
        table(os.path.join(self.dir, "b.txt"), [(8, 2.0, 0.0, 2.0, 0.0, 3, "tree")])
        rc, out = self.run_best_of("a.txt", "b.txt")
        self.assertEqual(rc, 1)
        self.assertEqual(parse(out)[0][8][3], "6")

    def test_missing_and_partial_inputs(self):
        table(os.path.join(self.dir, "a.txt"), [(8, 1.0, 0.0, 1.0, 0.0, 0, "ring"),
                                                (64, 1.0, 0.0, 1.0, 0.0, 0, "ring")])
        table(os.path.join(self.dir, "b.txt"), [(8, 0.5, 0.0, 0.5, 0.0, 0, "tree")])
        rc, out = self.run_best_of("a.txt", "b.txt", "gone.txt")
        self.assertEqual(rc, 0)
        rows = parse(out)[0]
        self.assertEqual(sorted(rows), [8, 64])
        self.assertEqual(rows[8][4], "tree")
        self.assertEqual(rows[64][4], "ring")
        self.assertEqual(self.run_best_of("gone.txt")[0], 1)


class Collect(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_tables_csv_json_and_plot_data(self):
        d = self.dir
        for coll in ("allreduce", "broadcast"):
            table(os.path.join(d, "tandem-shm-%s.txt" % coll),
                  [(8, 0.5, 0.0, 0.4, 0.0, 0, "rd"), (1 << 20, 100.0, 8.0, 90.0, 9.0, 0, "ring")],
                  prefix="[rank 0]: ")
            table(os.path.join(d, "mpi-shm-%s.txt" % coll),
                  [(8, 0.3, 0.0, 0.3, 0.0, 0, "tuned"), (1 << 20, 200.0, 4.0, 180.0, 4.5, 0, "ring")])
        with open(os.path.join(d, "versions.txt"), "w") as f:
            f.write("Open MPI=4.1.4\n")
        rc = subprocess.call([sys.executable, os.path.join(HERE, "collect.py"), d, "allreduce",
                              "broadcast"], stdout=subprocess.DEVNULL)
        self.assertEqual(rc, 0)
        with open(os.path.join(d, "results.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual(len(rows), 8)
        bc = [r for r in rows if r["collective"] == "broadcast" and r["series"] == "tandem shm"]
        self.assertEqual([r["mean_us"] for r in bc], ["0.4", "90.0"])  # in-place columns
        with open(os.path.join(d, "results.json")) as f:
            doc = json.load(f)
        self.assertEqual(doc["versions"]["Open MPI"], "4.1.4")
        with open(os.path.join(d, "results.md")) as f:
            md = f.read()
        self.assertIn("| 8 | 0.50 µs | **0.30 µs** | — |", md)  # lowest time wins small sizes
        self.assertIn("| 1M | **8.00** | 4.00 | — |", md)  # highest busbw wins large ones
        self.assertIn("broadcast 1M over shm: tandem 9.00 GB/s, Open MPI vader 4.50 GB/s: 2.00×", md)
        with open(os.path.join(d, "busbw-allreduce.dat")) as f:
            lines = f.read().splitlines()
        self.assertTrue(lines[0].startswith('size\t"tandem shm"'))
        self.assertEqual(lines[2].split("\t")[:4], ["1048576", "8.0000", "4.0000", "NaN"])
        if shutil.which("gnuplot"):
            png = os.path.join(d, "p.png")
            subprocess.check_call(["gnuplot", "-e", "dir='%s'; out='%s'; colls='allreduce broadcast'" % (d, png),
                                   os.path.join(HERE, "plot.gp")], stderr=subprocess.DEVNULL)
            with open(png, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_a_wrong_value_fails(self):
        table(os.path.join(self.dir, "gloo-tcp-allgather.txt"), [(8, 1.0, 0.0, 1.0, 0.0, 2, "x")])
        rc = subprocess.call([sys.executable, os.path.join(HERE, "collect.py"), self.dir,
                              "allgather"], stdout=subprocess.DEVNULL)
        self.assertEqual(rc, 1)


if __name__ == "__main__":
    unittest.main()

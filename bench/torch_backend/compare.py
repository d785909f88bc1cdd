#!/usr/bin/env python3
"""Tables (and gnuplot .dat files) of torch.distributed with backend gloo and backend tandem,
beside tandem-perf's own figure, from the logs run.sh writes.

Usage: compare.py DIR   (DIR holds {gloo,tandem}-collectives.r<k>.log, perf-<collective>.r<k>.log,
one per round k, and optionally {gloo,tandem}-ddp.r<k>.log or {gloo,tandem}-ddp.log, and
{gloo,tandem}-fsdp2.r<k>.log and {gloo,tandem}-stack.r<k>.log). Each cell is the median over the
rounds (time and busbw separately). Prints per collective: size, mean time per call (us) and
busbw (GB/s) for each; tandem/gloo busbw; tandem through torch / tandem-perf. Writes
DIR/busbw-<collective>.dat for bench/plot.gp (columns: bytes, tandem, gloo, tandem-perf).
"""
import glob
import os
import re
import statistics
import sys

PERF_NAMES = {"all_reduce": "allreduce", "broadcast": "broadcast", "all_gather": "allgather"}


def records(path, tag):
    """The key=value fields of every "<tag>: k=v ..." line of the log at `path`, in order."""
    if not os.path.exists(path):
        return []
    pattern = re.compile(tag + r": (.*)$")
    found = []
    for line in open(path, errors="replace"):
        m = pattern.search(line)
        if m:
            found.append(dict(p.split("=", 1) for p in m.group(1).split() if "=" in p))
    return found


def rows(path):
    return {(kv["collective"], int(kv["bytes"])): (float(kv["time_us"]), float(kv["busbw"]))
            for kv in records(path, "row")}


def perf(path, in_place):
    """size -> (time_us, busbw) from tandem-perf's table (columns as nccl-tests: size count type
    redop root, then time p50 algbw busbw #wrong out of place, then the same in place)."""
    out = {}
    if not os.path.exists(path):
        return out
    for line in open(path, errors="replace"):
        f = line.split()
        if f and f[0].startswith("[rank"):
            f = f[2:]
        if len(f) >= 15 and f[0].isdigit():
            first = 10 if in_place else 5
            try:
                out[int(f[0])] = (float(f[first]), float(f[first + 3]))
            except ValueError:
                continue
    return out


def median_of(paths, read):
    """Per key, the median of each field over the rounds' files."""
    seen = {}
    for path in paths:
        for key, fields in read(path).items():
            seen.setdefault(key, []).append(fields)
    return {k: tuple(statistics.median(f[i] for f in v) for i in range(len(v[0])))
            for k, v in seen.items()}


def result(path):
    found = records(path, "result")
    return found[-1] if found else None


def human(n):
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    d = sys.argv[1]
    gloo = median_of(sorted(glob.glob(os.path.join(d, "gloo-collectives.r*.log"))), rows)
    tandem = median_of(sorted(glob.glob(os.path.join(d, "tandem-collectives.r*.log"))), rows)
    for coll in ("all_reduce", "broadcast", "all_gather"):
        sizes = sorted({b for (c, b) in list(gloo) + list(tandem) if c == coll})
        if not sizes:
            continue
        # torch's all_reduce and broadcast work in place; all_gather out of place.
        p = median_of(sorted(glob.glob(os.path.join(d, f"perf-{PERF_NAMES[coll]}.r*.log"))),
                      lambda path: perf(path, coll != "all_gather"))
        print(f"\n#### {coll}: torch.distributed, 2 ranks, float32\n")
        print("| size | gloo µs | tandem µs | gloo busbw | tandem busbw | tandem / gloo "
              "| tandem-perf busbw | torch / tandem-perf |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        with open(os.path.join(d, f"busbw-{coll}.dat"), "w") as dat:
            dat.write("bytes\ttandem (torch.distributed)\tgloo (torch.distributed)\t"
                      "tandem-perf\n")
            for b in sizes:
                g, t, q = gloo.get((coll, b)), tandem.get((coll, b)), p.get(b)
                cell = lambda x, i, f: (f % x[i]) if x else "-"  # noqa: E731
                # Same bytes: the busbw ratio is the inverse ratio of the times.
                speed = f"{g[0] / t[0]:.1f}x" if g and t else "-"
                ratio = f"{t[1] / q[1]:.2f}" if t and q and q[1] > 0 else "-"
                print(f"| {human(b)} | {cell(g, 0, '%.1f')} | {cell(t, 0, '%.1f')} "
                      f"| {cell(g, 1, '%.3f')} | {cell(t, 1, '%.3f')} | {speed} "
                      f"| {cell(q, 1, '%.3f')} | {ratio} |")
                dat.write(f"{b}\t{t[1] if t else 'NaN'}\t{g[1] if g else 'NaN'}\t"
                          f"{q[1] if q else 'NaN'}\n")
    direct_table(d)
    # DDP: one run per backend and round (interleaved), or one unnumbered run; the medians.
    runs = {}
    for b in ("gloo", "tandem"):
        paths = sorted(glob.glob(os.path.join(d, f"{b}-ddp.r*.log"))) or [
            os.path.join(d, f"{b}-ddp.log")]
        found = [r for r in (result(path) for path in paths) if r]
        if found:
            runs[b] = found
    if runs:
        print("\n#### Fashion-MNIST CNN, Python DDP, 2 ranks\n")
        print("| backend | steps | ms/step (median) | images/s (median) | test accuracy % "
              "| ms/step per round |")
        print("|---|---:|---:|---:|---:|---|")
        for b, rs in runs.items():
            ms = statistics.median(float(r["ms_per_step"]) for r in rs)
            ips = statistics.median(float(r["images_per_s"]) for r in rs)
            each = ", ".join(f"{float(r['ms_per_step']):.1f}" for r in rs)
            print(f"| {b} | {rs[0]['steps']} | {ms:.2f} | {ips:.0f} "
                  f"| {float(rs[0]['test_accuracy']):.2f} | {each} |")
    # FSDP2: the same, from {gloo,tandem}-fsdp2.r<k>.log.
    runs = {b: [r for r in (result(path) for path in
                            sorted(glob.glob(os.path.join(d, f"{b}-fsdp2.r*.log")))) if r]
            for b in ("gloo", "tandem")}
    if any(runs.values()):
        print("\n#### FSDP2 (fully_shard), small transformer LM, 2 ranks\n")
        print("| backend | parameters | steps timed | ms/step (median) | final loss "
              "| ms/step per round |")
        print("|---|---:|---:|---:|---:|---|")
        for b, rs in runs.items():
            if not rs:
                print(f"| {b} | - | - | failed: see {b}-fsdp2.r1.log | - | - |")
                continue
            ms = statistics.median(float(r["ms_per_step"]) for r in rs)
            each = ", ".join(f"{float(r['ms_per_step']):.1f}" for r in rs)
            print(f"| {b} | {rs[0]['params']} | {rs[0]['steps']} | {ms:.2f} "
                  f"| {float(rs[0]['final_loss']):.4f} | {each} |")
    stack_table(d)
    return 0


def direct_rows(path):
    """{bytes: (torch_us, direct_us)} of the direct: lines of a collectives.py --direct log."""
    return {int(kv["bytes"]): (float(kv["torch_us"]), float(kv["direct_us"]))
            for kv in records(path, "direct")}


def direct_table(d):
    """all_reduce through torch.distributed against tandem's own call, in one process and the
    same rounds (collectives.py --direct): what the binding costs, whatever the machine's mode."""
    paths = sorted(glob.glob(os.path.join(d, "tandem-collectives.r*.log")))
    per_round = [direct_rows(p) for p in paths]
    sizes = sorted({b for r in per_round for b in r})
    if not sizes:
        return
    print("\n#### all_reduce through torch.distributed against tandem's own call, same process\n")
    print("| size | torch µs | tandem's call µs | torch / own call time (median of the rounds) "
          "| per round |")
    print("|---:|---:|---:|---:|---|")
    for b in sizes:
        pairs = [r[b] for r in per_round if b in r]
        t = statistics.median(p[0] for p in pairs)
        o = statistics.median(p[1] for p in pairs)
        ratios = [p[0] / p[1] for p in pairs]
        each = ", ".join(f"{x:.2f}" for x in ratios)
        print(f"| {human(b)} | {t:.1f} | {o:.1f} | {statistics.median(ratios):.2f} | {each} |")


def stack_results(path):
    """{component: fields} of every result line of a stack.py log."""
    return {f["component"]: f for f in records(path, "result")}


def stack_table(d):
    """The training stack's components (stack.py), {gloo,tandem}-stack.r<k>.log: medians."""
    runs = {b: [stack_results(p) for p in sorted(glob.glob(os.path.join(d, f"{b}-stack.r*.log")))]
            for b in ("gloo", "tandem")}
    if not any(runs.values()):
        return
    components = [c for r in runs["tandem"] + runs["gloo"] for c in r]
    components = list(dict.fromkeys(components))
    print("\n#### The training stack, component by component, 2 ranks (stack.py)\n")
    print("| component | one timed unit | gloo ms | tandem ms | tandem/gloo time |")
    print("|---|---|---:|---:|---:|")
    for c in components:
        ms = {}
        for b, rs in runs.items():
            vals = [float(r[c]["ms"]) for r in rs if c in r]
            ms[b] = statistics.median(vals) if vals else None
        what = next(r[c]["what"] for rs in runs.values() for r in rs if c in r)
        cell = {b: f"{v:.3f}" if v is not None else "failed" for b, v in ms.items()}
        ratio = (f"{ms['tandem'] / ms['gloo']:.2f}"
                 if ms["gloo"] and ms["tandem"] is not None else "-")
        print(f"| {c} | {what.replace('_', ' ')} | {cell['gloo']} | {cell['tandem']} | {ratio} |")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The per-rank setup figures in ranks' TANDEM_DEBUG=INFO logs, for bench/scale/*.sh.

    python3 bench/scale/info_lines.py LOG...

prints one line of the slowest or largest value over the ranks, tab-separated:
    setup_ms  store_requests  connections  memory
where connections counts a control connection per peer plus its data streams over tcp, and
memory is "R MiB (S MiB)": resident, and of it shared memory. "?" where no rank logged it.
"""
import re
import sys


def figures(text):
    setup = [float(m) for m in re.findall(r"set up in ([0-9.]+) ms with", text)]
    reqs = [int(m) for m in re.findall(r"set up in [0-9.]+ ms with ([0-9]+) store requests", text)]
    conns = []
    for m in re.finditer(r"connected in [0-9.]+ ms: shm to \[([^\]]*)\], tcp to \[([^\]]*)\] "
                         r"\(([0-9]+) stream", text):
        shm = len([x for x in m.group(1).split(",") if x])
        tcp = len([x for x in m.group(2).split(",") if x])
        conns.append(shm + tcp * (1 + int(m.group(3))))
    mem = [(float(a), float(b)) for a, b in re.findall(
        r"process memory ([0-9.]+) MiB resident \(([0-9.]+) MiB of it shared memory\)", text)]
    return [
        f"{max(setup):.0f}" if setup else "?",
        str(max(reqs)) if reqs else "?",
        str(max(conns)) if conns else "?",
        f"{max(a for a, _ in mem):.1f} MiB ({max(b for _, b in mem):.1f} MiB)" if mem else "?",
    ]


if __name__ == "__main__":
    text = "".join(open(path, errors="replace").read() for path in sys.argv[1:])
    print("\t".join(figures(text)))

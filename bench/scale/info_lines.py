#!/usr/bin/env python3
"""The per-rank setup figures in ranks' TANDEM_DEBUG=INFO logs, for bench/scale/*.sh.

    python3 bench/scale/info_lines.py LOG...

prints one line of the slowest or largest value over the ranks, tab-separated:
    setup_ms  store_requests  connections  memory  store_server
where connections counts a control connection per peer plus its data streams over tcp (those
made at setup), memory is "R MiB (S MiB)": resident, and of it shared memory, and store_server
is "N requests, C us CPU each" from the store server's last line (TANDEM_DEBUG_SUBSYS with
STORE). "?" where no rank logged it.
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
    server = re.findall(r"store server on port [0-9]+: ([0-9]+) requests from [0-9]+ connections; "
                        r"its thread used [0-9.]+ ms of CPU \(([0-9.]+) us per request\)", text)
    mem = [(float(a), float(b)) for a, b in re.findall(
        r"process memory ([0-9.]+) MiB resident \(([0-9.]+) MiB of it shared memory\)", text)]
    return [
        f"{max(setup):.0f}" if setup else "?",
        str(max(reqs)) if reqs else "?",
        str(max(conns)) if conns else "?",
        f"{max(a for a, _ in mem):.1f} MiB ({max(b for _, b in mem):.1f} MiB)" if mem else "?",
        f"{server[-1][0]} requests, {server[-1][1]} us CPU each" if server else "?",
    ]


if __name__ == "__main__":
    text = "".join(open(path, errors="replace").read() for path in sys.argv[1:])
    print("\t".join(figures(text)))

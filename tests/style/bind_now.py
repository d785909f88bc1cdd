#!/usr/bin/env python3
"""tandem's libraries and tools bind their dynamic symbols when they are loaded.

The top-level CMakeLists.txt links every tandem binary with `-z now`: without it, a
program's first collective of each kind runs the dynamic linker's lazy binder (about a
thousand instructions over cold symbol tables per PLT entry; docs/benchmarks-small.md,
first calls). This reads each binary's dynamic section with readelf and reports any that would
bind lazily.

    bind_now.py READELF FILE...
Exits 1 if a file lacks the BIND_NOW flag (or its NOW flag), 2 if readelf cannot read one.
"""
import subprocess
import sys


def binds_now(readelf, path):
    out = subprocess.run([readelf, "--dynamic", "--wide", path], capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        print(f"{path}: readelf failed: {out.stderr.strip()}", file=sys.stderr)
        sys.exit(2)
    for line in out.stdout.splitlines():
        fields = line.split()
        if "(FLAGS)" in fields and "BIND_NOW" in fields:
            return True
        if "(FLAGS_1)" in fields and "NOW" in fields:
            return True
    return False


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    readelf, files = argv[1], argv[2:]
    lazy = [f for f in files if not binds_now(readelf, f)]
    for f in lazy:
        print(f"{f}: binds its symbols lazily (link it with -z now, as CMakeLists.txt does)")
    print(f"{len(files) - len(lazy)} of {len(files)} binaries bind their symbols at load")
    return 1 if lazy else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""The include graph follows the layers of docs/architecture.md.

docs/architecture.md declares, between <!-- layers:begin --> and <!-- layers:end -->, the
layers bottom up (`- name: what it is`) and which layer owns each public header
(`public: layer: a.hpp b.hpp`). A file of src/<layer>/ may include its own layer's headers,
those of the layers below it, and their public headers; tools/ and examples/ may include
public headers and the internal API that `internal: ...` declares (headers of src/ that tools
are allowed to use). Every other include of a tandem header is reported with its file and line.

    layers.py SOURCE_DIR
Exits 1 if any include breaks the order. The build enforces the same rule (each layer's
target sees only the headers it may include); this test says it in the project's words and
covers what the compiler does not see (headers that are not compiled alone).
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]')


def read_declaration(source):
    text = open(os.path.join(source, "docs", "architecture.md"), encoding="utf-8").read()
    m = re.search(r"<!-- layers:begin -->(.*?)<!-- layers:end -->", text, re.S)
    if not m:
        sys.exit("layers.py: docs/architecture.md has no layers:begin/end section")
    layers, public, internal = [], {}, set()
    for line in m.group(1).splitlines():
        line = line.strip()
        if line.startswith("- public:"):
            layer, headers = line[len("- public:"):].split(":", 1)
            for h in headers.replace("`", "").split():
                public[h] = layer.strip()
        elif line.startswith("- internal:"):
            internal.update(h for h in line[len("- internal:"):].replace("`", "").split())
        elif line.startswith("- "):
            layers.append(line[2:].split(":", 1)[0].strip("` "))
    return layers, public, internal


def sources(root):
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if f.endswith((".cpp", ".hpp", ".cu", ".cuh", ".h")):
                yield os.path.join(dirpath, f)


def main():
    source = sys.argv[1]
    layers, public, internal = read_declaration(source)
    rank = {name: i for i, name in enumerate(layers)}
    problems = []
    checked = 0

    def layer_of(include, quoted, here_dir):
        """(kind, layer) of an included tandem header, or None for anything else."""
        if include.startswith("tandem/"):
            name = include[len("tandem/"):]
            return ("public", public.get(name, "?"))
        first = include.split("/", 1)[0]
        if quoted and "/" in include and first in rank:
            return ("private", first)
        if quoted and ".." in include.split("/"):  # a path around the include roots
            target = os.path.normpath(os.path.join(here_dir, include))
            first = os.path.relpath(target, os.path.join(source, "src")).split(os.sep, 1)[0]
            if first in rank:
                return ("private", first)
        if quoted and "/" not in include and os.path.exists(os.path.join(here_dir, include)):
            return ("local", None)
        return None

    for top in ("src", "tools", "examples"):
        for path in sources(os.path.join(source, top)):
            rel = os.path.relpath(path, source)
            parts = rel.split(os.sep)
            own = parts[1] if top == "src" and len(parts) > 2 else None
            if top == "src" and own not in rank:
                continue
            checked += 1
            with open(path, encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    quoted, inc = m.group(1) == '"', m.group(2)
                    what = layer_of(inc, quoted, os.path.dirname(path))
                    if what is None or what[0] == "local":
                        continue
                    kind, layer = what
                    if kind == "public" and layer == "?":
                        problems.append(f"{rel}:{n}: <{inc}> is not assigned to a layer in "
                                        "docs/architecture.md")
                        continue
                    if own is not None:
                        if rank[layer] > rank[own]:
                            problems.append(f"{rel}:{n}: layer {own} includes {inc} of layer "
                                            f"{layer}, which lies above it")
                    elif kind == "private" and inc not in internal:
                        problems.append(f"{rel}:{n}: {top}/ includes {inc}, a private header of "
                                        f"layer {layer} (not in the declared internal API)")
    for p in problems:
        print(p)
    print(f"layers: {checked} files, {len(layers)} layers, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

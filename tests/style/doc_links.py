#!/usr/bin/env python3
"""Every link between the documents resolves: each [text](path) and [text](path#anchor) of
README.md and docs/*.md that is not a URL names a file that exists and, for a Markdown file
with an anchor, a heading of that file (GitHub's anchors: lower case, punctuation other than
'-' and '_' dropped, spaces as '-'; headings inside code blocks do not count).

    doc_links.py SOURCE_DIR
Prints one line per broken link, naming the file and line, and exits 1 if there is any.
"""
import functools
import glob
import os
import re
import sys

LINK = re.compile(r"\]\(([^()\s#]*)(#[^)\s]*)?\)")


def slug(heading):
    h = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return h.replace(" ", "-")


def prose_lines(path):
    """(line number, text) of every line outside the file's ``` code blocks."""
    inside = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.startswith("```"):
                inside = not inside
            elif not inside:
                yield n, line


@functools.lru_cache(maxsize=None)
def anchors(path):
    return {slug(m.group(1)) for _, line in prose_lines(path)
            if (m := re.match(r"#{1,6} (.*)", line))}


def main(root):
    problems = []
    files = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    for path in files:
        for n, line in prose_lines(path):
            for m in LINK.finditer(line):
                target, anchor = m.group(1), m.group(2)
                if re.match(r"[a-z]+:", target):
                    continue  # a URL
                where = os.path.relpath(path, root)
                linked = path if target == "" else os.path.normpath(
                    os.path.join(os.path.dirname(path), target))
                if not os.path.exists(linked):
                    problems.append(f"{where}:{n}: {target} does not exist")
                    continue
                if anchor and linked.endswith(".md") and anchor[1:] not in anchors(linked):
                    problems.append(f"{where}:{n}: {target}{anchor}: no such heading in "
                                    f"{os.path.relpath(linked, root)}")
    for p in problems:
        print(p)
    print(f"doc_links: {len(files)} files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))

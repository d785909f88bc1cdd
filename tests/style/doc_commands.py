#!/usr/bin/env python3
"""Every command the documentation shows still works, as far as it can be checked without
running it: each shell line of README.md and docs/*.md (```sh blocks) is parsed, and

  - every build/bin/<tool> it runs exists in the build;
  - every flag given to tandemrun, tandem-perf, tandem-topo or fashion_mnist is one the
    tool's --help lists (so a renamed or removed flag fails here, not in a user's hands);
  - every fashion_mnist line parses: the tool is run with the same options plus
    --print-config, which rejects an unknown key or a bad value and exits;
  - every make target is in the Makefile and every repository path (bench/..., scripts/...,
    examples/..., tests/...) exists.

    doc_commands.py SOURCE_DIR BUILD_DIR
Prints one line per problem, naming the file and line, and exits 1 if there is any.
"""
import os
import re
import shlex
import subprocess
import sys

TOOLS = ("tandemrun", "tandem-perf", "tandem-topo", "fashion_mnist")
REPO_DIRS = ("bench/", "scripts/", "examples/", "tests/", "fuzz/", "tools/", "docs/")


def shell_lines(path):
    """(line number, text) of every command in the file's ```sh blocks, continuations joined."""
    out, inside, pending, start = [], False, "", 0
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            stripped = line.rstrip("\n")
            if stripped.startswith("```"):
                inside = stripped.strip() in ("```sh", "```bash", "```console")
                continue
            if not inside:
                continue
            if not pending:
                start = n
            if stripped.endswith("\\"):
                pending += stripped[:-1] + " "
                continue
            out.append((start, pending + stripped))
            pending = ""
    return out


def words(text):
    text = text.strip()
    if text.startswith("$ "):
        text = text[2:]
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        return []


class Checker:
    def __init__(self, source, build):
        self.source, self.build = source, build
        self.help = {}
        self.problems = []
        with open(os.path.join(source, "Makefile"), encoding="utf-8") as f:
            self.targets = set(re.findall(r"(?m)^([A-Za-z0-9_.-]+):", f.read()))

    def tool_help(self, tool):
        if tool not in self.help:
            exe = os.path.join(self.build, "bin", tool)
            r = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
            self.help[tool] = r.stdout + r.stderr
        return self.help[tool]

    def problem(self, where, what):
        self.problems.append(f"{where}: {what}")

    def check_flags(self, where, tool, args):
        """Flags of `tool` in args, up to its program (tandemrun) or to the end."""
        help_text = self.tool_help(tool)
        for i, a in enumerate(args):
            if tool == "tandemrun" and not a.startswith("-") and ("/" in a or a.endswith(".py")):
                return i  # the program: its own flags are not tandemrun's
            if tool == "tandemrun" and a == "-m":
                return None
            if a == "--":
                return i + 1
            m = re.match(r"^(--[A-Za-z0-9_-]+|-[A-Za-z])(=.*)?$", a)
            if not m:
                continue
            flag = m.group(1)
            # CLI11 lists "-c,--collective", "--nproc-per-node,--nproc_per_node" and so on.
            if not re.search(r"(^|[\s,])" + re.escape(flag) + r"([\s,=]|$)", help_text, re.M):
                self.problem(where, f"{tool} has no flag {flag} (see {tool} --help)")
        return None

    def check_tool(self, where, tool, args, env):
        exe = os.path.join(self.build, "bin", tool)
        if not os.access(exe, os.X_OK):
            self.problem(where, f"build/bin/{tool} does not exist")
            return
        program_at = self.check_flags(where, tool, args)
        if tool == "tandemrun" and program_at is not None:
            self.check_command(where, args[program_at:], env)
        if tool == "fashion_mnist":
            # A configuration file of the reader's own (my.yaml) stands for the shipped one.
            args = list(args)
            for i, a in enumerate(args[:-1]):
                if a in ("-c", "--config") and not os.path.exists(os.path.join(self.source, args[i + 1])):
                    args[i + 1] = os.path.join(self.source, "examples/fashion_mnist/config.yaml")
            r = subprocess.run([exe, *args, "--print-config"], capture_output=True, text=True,
                               timeout=60, cwd=self.source, env={**os.environ, **env})
            if r.returncode != 0:
                self.problem(where, f"fashion_mnist {' '.join(args)} is rejected: "
                                    f"{(r.stderr or r.stdout).strip()[:300]}")

    def check_command(self, where, argv, env=None):
        env = dict(env or {})
        while argv and re.match(r"^[A-Z_][A-Z0-9_]*=", argv[0]):
            k, v = argv[0].split("=", 1)
            env[k] = v
            argv = argv[1:]
        if not argv:
            return
        head, args = argv[0], argv[1:]
        name = os.path.basename(head)
        if head.startswith("build/bin/") or (name in TOOLS and "/" not in head):
            if name in TOOLS:
                self.check_tool(where, name, args, env)
            elif not os.path.exists(os.path.join(self.build, "bin", name)):
                self.problem(where, f"{head} does not exist in the build")
        elif head == "make":
            for t in args:
                if not t.startswith("-") and "=" not in t and t not in self.targets:
                    self.problem(where, f"make has no target {t}")
        elif head.startswith(REPO_DIRS):
            if not os.path.exists(os.path.join(self.source, head)):
                self.problem(where, f"{head} does not exist")

    def check_file(self, rel):
        for n, text in shell_lines(os.path.join(self.source, rel)):
            # Pipelines and lists: check each command.
            for part in re.split(r"\s(?:\|\||&&|\|)\s|;\s", text):
                self.check_command(f"{rel}:{n}", words(part))


def main():
    source, build = sys.argv[1], sys.argv[2]
    checker = Checker(source, build)
    files = ["README.md"] + sorted(
        os.path.join("docs", f) for f in os.listdir(os.path.join(source, "docs"))
        if f.endswith(".md"))
    for rel in files:
        checker.check_file(rel)
    for p in checker.problems:
        print(p)
    print(f"doc_commands: {len(files)} files, {len(checker.problems)} problems")
    return 1 if checker.problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""Fixtures of the torch.distributed backend tests: the build's tandemrun and Python package,
and a helper that runs a worker script on N ranks and returns each rank's JSON report."""

import json
import os
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TANDEM_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
PYTHONPATH = os.path.join(BUILD, "python")
TANDEMRUN = os.path.join(BUILD, "bin", "tandemrun")

try:
    import torch.distributed  # noqa: F401
except ImportError as e:  # pragma: no cover - the stage skips without torch
    pytest.skip(f"torch is not importable ({e}): run scripts/python-env.sh and use .venv/bin/python", allow_module_level=True)

if not os.path.isdir(os.path.join(PYTHONPATH, "tandem")):
    pytest.skip(f"the tandem Python package is not built in {PYTHONPATH}", allow_module_level=True)


def worker_env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHONPATH + os.pathsep + env.get("PYTHONPATH", "")
    env["TANDEM_PYTHON"] = sys.executable
    env.setdefault("OMP_NUM_THREADS", "1")
    if extra:
        env.update(extra)
    return env


def worker(name):
    return os.path.join(HERE, "workers", name)


def tandemrun(args, timeout=300, env=None, cwd=None):
    """Runs tandemrun with `args`; returns the CompletedProcess (text)."""
    return subprocess.run([TANDEMRUN] + list(args), capture_output=True, text=True,
                          timeout=timeout, env=worker_env(env), cwd=cwd)


def run_ranks(script, nproc=2, args=(), timeout=300, env=None):
    """Runs `script` on `nproc` ranks under tandemrun; each rank writes its report to
    $REPORT_DIR/rank<R>.json. Returns the list of reports (rank order) and the process."""
    with tempfile.TemporaryDirectory() as d:
        p = tandemrun(["--nproc-per-node", str(nproc), sys.executable, worker(script), *args],
                      timeout=timeout, env={"REPORT_DIR": d, **(env or {})})
        reports = []
        for r in range(nproc):
            path = os.path.join(d, f"rank{r}.json")
            if not os.path.exists(path):
                raise AssertionError(f"rank {r} wrote no report; tandemrun exited {p.returncode}\n"
                                     f"stdout:\n{p.stdout[-4000:]}\nstderr:\n{p.stderr[-4000:]}")
            with open(path) as f:
                reports.append(json.load(f))
        return reports, p


def spawn_ranks(script, nproc, args=(), timeout=120, env=None):
    """Starts `script` on `nproc` ranks as plain processes (no launcher: a test that kills a
    rank must see what the survivors do themselves). Rendezvous through a file:// store.
    Returns the CompletedProcess of every rank."""
    with tempfile.TemporaryDirectory() as d:
        init = "file://" + os.path.join(d, "store")
        procs = []
        for r in range(nproc):
            e = worker_env({"RANK": str(r), "WORLD_SIZE": str(nproc), "INIT": init,
                            "REPORT_DIR": d, **(env or {})})
            procs.append(subprocess.Popen([sys.executable, worker(script), *args], env=e,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        results = []
        for p in procs:
            try:
                out, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise
            results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
        return results

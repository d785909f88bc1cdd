"""pip install . as a PyTorch user does it: a fresh virtual environment that holds torch (the
version this suite runs with) and nothing of tandem, `pip install <clone>` (build isolation
on, so torch must be found through the installing interpreter, not fetched), then a 2-rank DDP
script that imports tandem.torch with no PYTHONPATH, under torchrun, under the console script
tandemrun and under `python -m tandem.run`."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import BUILD, worker

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# Beside build/, so that ccache (CCACHE_BASEDIR, set by the Makefile) reuses its objects; the
# environment too, which puts the same torch include path in every run's compile command of
# the Python extension (so that a second run has it from ccache as well).
PIP_BUILD = os.path.join(REPO, "build-pip")
PIP_VENV = os.path.join(REPO, "build-pip-venv")


def cache_value(name, default):
    try:
        with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith(name + ":"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return default


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "TANDEM_", "VIRTUAL_ENV"))}
    env["OMP_NUM_THREADS"] = "1"
    return env


def run(cmd, timeout, env=None):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                       env=env or clean_env())
    assert p.returncode == 0, (f"{' '.join(map(str, cmd))} exited {p.returncode}\n"
                               f"stdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-5000:]}")
    return p


@pytest.fixture(scope="module")
def venv():
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed")
    d = pathlib.Path(PIP_VENV)
    shutil.rmtree(d, ignore_errors=True)  # fresh every time: torch and nothing of tandem
    run([sys.executable, "-m", "venv", d], timeout=120)
    py = d / "bin" / "python"
    version = torch.__version__.split("+")[0]
    run([py, "-m", "pip", "install", "-q", f"torch=={version}"], timeout=900)
    shutil.rmtree(PIP_BUILD, ignore_errors=True)  # a build of its own, as a user's is
    # The main build's compiler, type and warnings, so that its compiler commands are the same
    # (ccache then has its objects). The CUDA backend, which make build compiles, is left out
    # of this wheel: nvcc would double the test's time and nothing here runs it.
    settings = ["-C", f"build-dir={PIP_BUILD}",
                "-C", "cmake.define.TANDEM_WITH_CUDA=OFF",
                "-C", f"cmake.define.CMAKE_CXX_COMPILER={cache_value('CMAKE_CXX_COMPILER', 'c++')}",
                "-C", f"cmake.build-type={cache_value('CMAKE_BUILD_TYPE', 'Release')}",
                "-C", f"cmake.define.TANDEM_WERROR={cache_value('TANDEM_WERROR', 'OFF')}"]
    p = run([py, "-m", "pip", "install", "-v", *settings, REPO], timeout=1800)
    installed = run([py, "-m", "pip", "show", "-f", "tandem"], timeout=60).stdout
    return d, p.stdout + p.stderr, installed


def test_pip_builds_against_the_installed_torch(venv):
    d, log, installed = venv
    # No second torch was fetched for the build: CMake found the environment's own.
    assert not re.search(r"Collecting torch|Downloading torch", log), log[-3000:]
    assert re.search(r"tandem: LibTorch \d+\.\d+\.\d+ found \(" + re.escape(str(d)), log), log[-3000:]
    for f in ("tandem/torch.py", "tandem/run.py", "tandem/bin/tandemrun"):
        assert f in installed, installed
    assert re.search(r"tandem/_backend\.cpython-.*\.so", installed), installed
    assert re.search(r"tandem/lib/libtandem\.so", installed), installed
    assert (d / "bin" / "tandemrun").exists()


def test_import_without_pythonpath(venv):
    d, _, _ = venv
    p = run([d / "bin" / "python", "-c",
             "import tandem.torch, torch.distributed as dist; "
             "print(dist.Backend.backend_capability['tandem'])"], timeout=120)
    assert "'cpu', 'cuda'" in p.stdout, p.stdout


@pytest.mark.parametrize("launcher", ["torchrun", "tandemrun", "python -m tandem.run"])
def test_ddp_two_ranks(venv, launcher):
    d, _, _ = venv
    bindir = d / "bin"
    cmd = {"torchrun": [bindir / "torchrun", "--standalone"],
           "tandemrun": [bindir / "tandemrun"],
           "python -m tandem.run": [bindir / "python", "-m", "tandem.run"]}[launcher]
    p = run([*cmd, "--nproc-per-node", "2", worker("ddp_check.py")], timeout=300)
    for r in range(2):
        assert f"ddp_check: OK rank {r} world 2" in p.stdout, p.stdout + p.stderr

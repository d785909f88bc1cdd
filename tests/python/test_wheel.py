"""make wheel (scripts/wheel.sh) as a user on another machine needs it: a self-contained wheel
of the main build, named and pinned for its torch release, that installs and runs in a minimal
Debian root with nothing but Python, pip and that torch (scripts/minbase-check.sh); and the
import that refuses another torch release by name."""

import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
import torch

from conftest import BUILD

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TORCH_MINOR = ".".join(torch.__version__.split("+")[0].split(".")[:2])
PY_TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"


def run(cmd, timeout, env=None):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                       env=env, cwd=REPO)
    assert p.returncode == 0, (f"{' '.join(map(str, cmd))} exited {p.returncode}\n"
                               f"stdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-5000:]}")
    return p


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    env = dict(os.environ, BUILD_DIR=BUILD, OUT=str(out), PYTHON=sys.executable)
    run(["scripts/wheel.sh"], timeout=1800, env=env)
    found = sorted(out.glob("tandem-*.whl"))
    assert len(found) == 1, found
    return found[0]


def test_the_wheel_is_named_and_pinned_for_its_torch(wheel):
    assert re.fullmatch(rf"tandem-[0-9.]+\+torch{re.escape(TORCH_MINOR)}-{PY_TAG}-{PY_TAG}-"
                        r"manylinux_2_\d+_x86_64\.whl", wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        build = z.read("tandem/_build.py").decode()
    assert f"Requires-Dist: torch=={TORCH_MINOR}.*" in meta, meta
    assert torch.__version__ in build, build
    for f in ("tandem/torch.py", "tandem/run.py", "tandem/bin/tandemrun",
              "tandem/lib/libtandem.so.0"):
        assert f in names, names
    assert any(re.fullmatch(rf"tandem/_backend\.cpython-{sys.version_info[0]}"
                            rf"{sys.version_info[1]}-.*\.so", n) for n in names), names
    # The libraries of Debian's -dev packages are inside, under names of their own...
    vendored = [n for n in names if n.startswith("tandem.libs/")]
    for lib in ("libfmt", "libhwloc", "libhwy", "libucp", "libucs"):
        assert any(os.path.basename(n).startswith(lib + "-") for n in vendored), vendored
    # ...torch's are not, nor a second copy of a library under its link's name.
    assert not any(re.search(r"lib(torch|c10|cudart|nccl)", n) for n in names), names
    assert "tandem/lib/libtandem.so" not in names and not any(
        n.startswith("tandem/lib/libtandem.so.0.") for n in names), names


def test_the_wheel_runs_ddp_in_a_minimal_debian_root(wheel):
    if os.geteuid() != 0:
        pytest.skip("needs root (debootstrap, chroot): make test runs as root")
    if shutil.which("debootstrap") is None:
        pytest.skip("debootstrap is not installed (scripts/install-deps.sh installs it)")
    p = run(["scripts/minbase-check.sh", wheel], timeout=1800,
            env=dict(os.environ, PYTHON=sys.executable))
    print(p.stdout)
    assert "every library inside the wheel, torch or the manylinux base" in p.stdout, p.stdout
    assert "minbase: OK" in p.stdout, p.stdout


def test_import_refuses_another_torch_release_by_name(tmp_path):
    pkg = tmp_path / "tandem"
    shutil.copytree(os.path.join(BUILD, "python", "tandem"), pkg)
    (pkg / "_build.py").write_text('TORCH_VERSION = "2.11.0+cu130"\n')
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    p = subprocess.run([sys.executable, "-c", "import tandem.torch"], capture_output=True,
                       text=True, timeout=120, env=env)
    assert p.returncode != 0, p.stdout + p.stderr
    assert "ImportError: tandem was built for torch 2.11.0+cu130" in p.stderr, p.stderr
    assert f"this interpreter has torch {torch.__version__}" in p.stderr, p.stderr
    assert f"torch{TORCH_MINOR}" in p.stderr, p.stderr


def test_a_torch_folder_that_the_interpreter_does_not_import_is_built_against(tmp_path):
    # make wheel TORCH=X.Y.Z configures against an unpacked torch wheel (-DTANDEM_TORCH_ROOT)
    # without torch's CMake config; .venv's own torch package stands for it here.
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed")
    root = os.path.dirname(torch.__file__)
    p = run(["cmake", "-S", REPO, "-B", tmp_path / "b", "-G", "Ninja",
             f"-DTANDEM_TORCH_ROOT={root}", f"-DPython3_EXECUTABLE={sys.executable}",
             "-DTANDEM_BUILD_TESTS=OFF", "-DTANDEM_BUILD_BENCH=OFF", "-DTANDEM_WITH_CUDA=OFF"],
            timeout=300)
    version = torch.__version__.split("+")[0]
    assert f"tandem: LibTorch {version} found ({root})" in p.stdout, p.stdout
    assert f"building the torch.distributed backend for {sys.executable} " \
           f"(torch {torch.__version__})" in p.stdout, p.stdout
    cache = (tmp_path / "b" / "CMakeCache.txt").read_text()
    for var in ("TORCH_LIBRARY", "torch_cpu_LIBRARY", "c10_LIBRARY"):
        line = next(x for x in cache.splitlines() if x.startswith(var + ":"))
        assert line.split("=", 1)[1].startswith(os.path.join(root, "lib")), line

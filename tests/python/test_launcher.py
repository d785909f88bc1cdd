"""Python programs under tandemrun as under torchrun: a .py PROGRAM runs with the interpreter,
-m runs a module, --no-python runs it directly, --pass-local-rank follows
torch.distributed.launch, the tandem package is found without installing it, and jobs started
at the same moment with default ports all succeed. The tcp:// and file:// init methods."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from conftest import TANDEMRUN, tandemrun, worker, worker_env


def sums(out, world=2, argv="[]"):
    want = world * (world + 1) / 2
    for r in range(world):
        line = f"[rank {r}]: rank {r}/{world} sum {want:g} argv {argv}"
        assert line in out, f"missing {line!r} in:\n{out}"


def test_py_program_runs_with_the_interpreter():
    env = {"PYTHONPATH": ""}  # tandemrun itself puts the build's package on PYTHONPATH
    p = tandemrun(["--nproc-per-node", "2", worker("hello.py")], env=env)
    assert p.returncode == 0, p.stderr
    sums(p.stdout)


def test_module_runs_with_dash_m():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "pkg"))
        open(os.path.join(d, "pkg", "__init__.py"), "w").close()
        shutil.copy(worker("hello.py"), os.path.join(d, "pkg", "hello.py"))
        p = tandemrun(["--nproc-per-node", "2", "-m", "pkg.hello", "x"], cwd=d)
        assert p.returncode == 0, p.stderr
        sums(p.stdout, argv="['x']")


def test_no_python_runs_the_program_directly():
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "direct.py")
        with open(script, "w") as f:
            f.write(f"#!{sys.executable}\nimport sys\nprint('direct', sys.argv[1:])\n")
        os.chmod(script, 0o755)
        p = tandemrun(["--nproc-per-node", "1", "--no-python", script, "y"])
        assert p.returncode == 0, p.stderr
        assert "[rank 0]: direct ['y']" in p.stdout
        bad = tandemrun(["--nproc-per-node", "1", "--no-python", "-m", "pkg"])
        assert bad.returncode == 2 and "exclude each other" in bad.stderr


def test_pass_local_rank_appends_the_legacy_argument():
    p = tandemrun(["--nproc-per-node", "2", "--use-env", "--pass-local-rank", worker("hello.py")])
    assert p.returncode == 0, p.stderr
    for r in range(2):
        assert f"[rank {r}]: rank {r}/2 sum 3 argv ['--local_rank={r}']" in p.stdout, p.stdout


def test_jobs_started_together_with_default_ports_all_succeed():
    def job(_):
        return subprocess.run([TANDEMRUN, "--nproc-per-node", "2", worker("hello.py")],
                              capture_output=True, text=True, timeout=300, env=worker_env())

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(job, range(4)))
    for p in results:
        assert p.returncode == 0, p.stderr
        sums(p.stdout)


def reserved_port():
    # As tandemrun reserves MASTER_PORT: bound, not listening, SO_REUSEADDR.
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    return s


def run_pair(init):
    procs = [subprocess.Popen([sys.executable, worker("hello.py"), init],
                              env=worker_env({"RANK": str(r), "WORLD_SIZE": "2"}),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert "sum 3" in out, out


def test_tcp_init_method():
    hold = reserved_port()
    try:
        run_pair(f"tcp://127.0.0.1:{hold.getsockname()[1]}")
    finally:
        hold.close()


def test_file_init_method():
    with tempfile.TemporaryDirectory() as d:
        run_pair("file://" + os.path.join(d, "store"))

"""DeepSpeed and Ray Train, unchanged, on backend gloo and on backend tandem, side by side in one
run: the runs of tests/python/frameworks (its workers), with more steps, ROUNDS times
interleaved (gloo, tandem in each round); each cell the median of the rounds, every round's
value beside it. Prints markdown tables.

    .venv/bin/python bench/frameworks/compare.py                 # both, 3 rounds (~12 min here)
    .venv/bin/python bench/frameworks/compare.py --only deepspeed --rounds 1

DeepSpeed: 2 ranks under build/bin/tandemrun, ZeRO stages 1, 2 and 3 in one process pair per
backend (workers/deepspeed_zero.py), fp32, 8 samples per rank per step, two models:
  small  16-64-4 MLP (1,348 parameters), 512-element buckets: many tiny collectives per step;
  wide   16-65536-4 MLP (1.38 M parameters), DeepSpeed's default 5e8-element buckets.
ms/step is the slower rank's mean over the steps (after deepspeed.initialize); "run s" is the
whole job under tandemrun (Python and DeepSpeed start-up included).

Ray Train: one local Ray cluster (2 CPUs, 127.0.0.1), TorchTrainer with 2 workers, DDP through
ray.train.torch.prepare_model (workers/ray_train.py), the same two model widths, reporting to
Ray only after the last step. ms/step is the median of the slower rank's steps; the mean, also
shown, includes the last step, which saves and reports a checkpoint (100-300 ms on either
backend, varying more than the other steps); "fit s" is TorchTrainer.fit() (worker start-up
included). The
workers register backend tandem through ray.init(runtime_env={"worker_process_setup_hook":
"tandem.torch.register"}), as docs/python.md shows.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("BUILD_DIR", os.path.join(REPO, "build"))
PYTHONPATH = os.path.join(BUILD, "python")
WORKERS = os.path.join(REPO, "tests", "python", "frameworks", "workers")
BACKENDS = ("gloo", "tandem")
WORKLOADS = {"small": {"hidden": 64, "bucket": 512},
             "wide": {"hidden": 65536, "bucket": 500_000_000}}


def median_cell(values, fmt="{:.1f}"):
    return fmt.format(statistics.median(values)), ", ".join(fmt.format(v) for v in values)


def log(message):
    print(f"compare.py: {message}", file=sys.stderr, flush=True)


def deepspeed_once(backend, workload, steps):
    """One job of workers/deepspeed_zero.py on 2 ranks: (wall seconds, rank reports)."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, PYTHONPATH=PYTHONPATH, TANDEM_PYTHON=sys.executable,
                   OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu", REPORT_DIR=d,
                   DS_STEPS=str(steps), DS_HIDDEN=str(workload["hidden"]),
                   DS_BUCKET=str(workload["bucket"]), DS_REPORT_PARAMS="0")
        cmd = [os.path.join(BUILD, "bin", "tandemrun"), "--nproc-per-node", "2", sys.executable,
               os.path.join(WORKERS, "deepspeed_zero.py"), backend]
        t = time.perf_counter()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        wall = time.perf_counter() - t
        if p.returncode != 0:
            sys.exit(f"compare.py: DeepSpeed on {backend} failed ({p.returncode}):\n"
                     f"{p.stderr[-4000:]}")
        reports = []
        for k in range(2):
            with open(os.path.join(d, f"rank{k}.json")) as f:
                reports.append(json.load(f))
    return wall, reports


def deepspeed_rounds(rounds, steps):
    """{(workload, stage | "run" | "parameters", backend): [value per round]}."""
    rows = {}
    for r in range(rounds):
        for name, w in WORKLOADS.items():
            for backend in BACKENDS:
                wall, reports = deepspeed_once(backend, w, steps)
                for stage in reports[0]["stages"]:
                    ms = 1000 * max(rep["stages"][stage]["step_s"] for rep in reports)
                    rows.setdefault((name, stage, backend), []).append(ms)
                rows.setdefault((name, "run", backend), []).append(wall)
                rows.setdefault((name, "parameters", backend), []).append(reports[0]["parameters"])
                log(f"round {r + 1}: DeepSpeed {name} {backend}: {wall:.1f} s")
    return rows


def deepspeed_table(rows, rounds, steps):
    print(f"\n**DeepSpeed ZeRO, 2 ranks, fp32, {steps} steps per stage, {rounds} rounds "
          f"(ms/step: median of the rounds; per round gloo / tandem)**\n")
    print("| model | parameters | stage | gloo ms/step | tandem ms/step | tandem/gloo time "
          "| gloo per round | tandem per round |")
    print("|---|---:|---|---:|---:|---:|---|---|")
    for name in WORKLOADS:
        n = rows[(name, "parameters", "gloo")][0]
        for stage in ("1", "2", "3", "run"):
            g, t = rows[(name, stage, "gloo")], rows[(name, stage, "tandem")]
            (gm, gr), (tm, tr) = median_cell(g), median_cell(t)
            label = f"ZeRO-{stage}" if stage != "run" else "whole job, s"
            ratio = statistics.median(t) / statistics.median(g)
            print(f"| {name} | {n:,} | {label} | {gm} | {tm} | {ratio:.2f} | {gr} | {tr} |")


def ray_once(ray_train, backend, name, workload, steps, tmp):
    """One TorchTrainer.fit(): (wall seconds, rank reports)."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    out = tempfile.mkdtemp(dir=tmp)
    trainer = TorchTrainer(
        ray_train.train_loop,
        train_loop_config={"steps": steps, "out_dir": out, "width": workload["hidden"],
                           "report_every": steps},
        scaling_config=ScalingConfig(num_workers=2),
        torch_config=TorchConfig(backend=backend, timeout_s=120),
        run_config=RunConfig(name=f"{name}-{backend}", storage_path=tempfile.mkdtemp(dir=tmp)))
    t = time.perf_counter()
    result = trainer.fit()
    wall = time.perf_counter() - t
    if result.error:
        sys.exit(f"compare.py: Ray Train on {backend} failed: {result.error}")
    reports = []
    for k in range(2):
        with open(os.path.join(out, f"rank{k}.json")) as f:
            reports.append(json.load(f))
    assert all(rep["backend"] == backend for rep in reports), reports
    return wall, reports


def ray_rounds(rounds, steps):
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # the node's address: 127.0.0.1
    sys.path.insert(0, WORKERS)
    import ray
    import ray_train

    t = time.perf_counter()
    worker_env = {"PYTHONPATH": os.pathsep.join([PYTHONPATH, WORKERS]), "OMP_NUM_THREADS": "1",
                  "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}
    # tandem's settings of this command reach Ray's workers (TANDEM_SPIN_US=0 ... compare.py).
    worker_env.update({k: v for k, v in os.environ.items() if k.startswith("TANDEM_")})
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": worker_env, "worker_process_setup_hook": "tandem.torch.register"})
    init_s = time.perf_counter() - t
    rows = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(rounds):
                for name, w in WORKLOADS.items():
                    for backend in BACKENDS:
                        wall, reports = ray_once(ray_train, backend, name, w, steps, tmp)
                        # The slower rank's steps; their median, since the last step also
                        # saves and reports a checkpoint (100-300 ms, whatever the backend).
                        times = max((rep["step_times"] for rep in reports),
                                    key=lambda ts: statistics.median(ts))
                        ms = 1000 * statistics.median(times)
                        mean_ms = 1000 * max(rep["step_s"] for rep in reports)
                        rows.setdefault((name, "step", backend), []).append(ms)
                        rows.setdefault((name, "mean", backend), []).append(mean_ms)
                        rows.setdefault((name, "fit", backend), []).append(wall)
                        slow = max(range(len(times)), key=lambda i: times[i])
                        log(f"round {r + 1}: Ray Train {name} {backend}: fit {wall:.1f} s; "
                            f"steps: median {1000 * statistics.median(times):.1f} ms, slowest "
                            f"{1000 * times[slow]:.1f} ms (step {slow})")
    finally:
        ray.shutdown()
    return rows, init_s


def ray_table(rows, rounds, steps, init_s):
    print(f"\n**Ray Train TorchTrainer, DDP, 2 workers, {steps} steps, {rounds} rounds "
          f"(ray.init took {init_s:.1f} s, once)**\n")
    print("| model | measure | gloo | tandem | tandem/gloo time | gloo per round "
          "| tandem per round |")
    print("|---|---|---:|---:|---:|---|---|")
    for name, w in WORKLOADS.items():
        for key, label in (("step", "ms/step"), ("mean", "ms/step, mean with the report"),
                           ("fit", "fit() s")):
            g, t = rows[(name, key, "gloo")], rows[(name, key, "tandem")]
            (gm, gr), (tm, tr) = median_cell(g), median_cell(t)
            ratio = statistics.median(t) / statistics.median(g)
            model = f"{name} (16-{w['hidden']}-4)"
            print(f"| {model} | {label} | {gm} | {tm} | {ratio:.2f} | {gr} | {tr} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=("deepspeed", "ray"))
    ap.add_argument("--ds-steps", type=int, default=30)
    ap.add_argument("--ray-steps", type=int, default=30)
    args = ap.parse_args()
    for f in ("bin/tandemrun", "python/tandem/torch.py"):
        if not os.path.exists(os.path.join(BUILD, f)):
            sys.exit(f"compare.py: {BUILD}/{f} is missing: make build first")
    t = time.perf_counter()
    if args.only in (None, "deepspeed"):
        ds = deepspeed_rounds(args.rounds, args.ds_steps)
    if args.only in (None, "ray"):
        ray_rows, init_s = ray_rounds(args.rounds, args.ray_steps)
    print(f"Measured on {os.cpu_count()} CPUs, torch {__import__('torch').__version__}; "
          f"{time.perf_counter() - t:.0f} s in all.")
    if args.only in (None, "deepspeed"):
        deepspeed_table(ds, args.rounds, args.ds_steps)
    if args.only in (None, "ray"):
        ray_table(ray_rows, args.rounds, args.ray_steps, init_s)


if __name__ == "__main__":
    main()

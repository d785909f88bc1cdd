"""Ray Train's TorchTrainer, unchanged, on a torch.distributed backend: the train loop. Imported
by the Ray workers (by reference, from PYTHONPATH), so it stays free of test code.

train_loop(config): a small MLP under DDP (ray.train.torch.prepare_model) trained for
config["steps"] SGD steps, each rank on its slice of one fixed global batch; every step
reports its loss and, from rank 0, a checkpoint (model, optimizer, next step). A run resumes
from ray.train.get_checkpoint(). With config["kill_step"], rank 1 writes its pid to
config["out_dir"]/killed_pid and SIGKILLs itself at the start of that step, on the first
attempt only (no checkpoint to resume from yet). At the end each rank writes its losses and
final parameters to config["out_dir"]/rank<R>.json. For bench/frameworks: config "width" (the
hidden layer, 64) and "report_every" (1; the last step always reports).
"""

import json
import os
import signal
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import ray.train
import ray.train.torch

MICRO_BATCH = 8


def make_model(width=64):
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(16, width), nn.Tanh(), nn.Linear(width, 4))


def batch(world):
    """The global batch of every step (full-batch descent: the loss falls step after step)."""
    g = torch.Generator().manual_seed(1000)
    x = torch.randn(world * MICRO_BATCH, 16, generator=g)
    y = torch.sin(x[:, :4] * 2) + 0.1 * torch.randn(world * MICRO_BATCH, 4, generator=g)
    return x, y


def train_loop(config):
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    model = make_model(config.get("width", 64))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start, resumed_from = 0, None
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = resumed_from = state["step"]
    model = ray.train.torch.prepare_model(model)  # DDP over the group Ray Train made
    losses = []
    t = time.perf_counter()
    step_times = []  # each step's seconds, its report to Ray included
    for step in range(start, config["steps"]):
        t_step = time.perf_counter()
        if step == config.get("kill_step") and rank == 1 and checkpoint is None:
            with open(os.path.join(config["out_dir"], "killed_pid"), "w") as f:
                f.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = batch(world)
        lo, hi = rank * MICRO_BATCH, (rank + 1) * MICRO_BATCH
        loss = nn.functional.mse_loss(model(x[lo:hi]), y[lo:hi])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        metrics = {"step": step, "loss": loss.item(), "resumed_from": resumed_from}
        if (step + 1) % config.get("report_every", 1) and step + 1 < config["steps"]:
            step_times.append(time.perf_counter() - t_step)
            continue
        with tempfile.TemporaryDirectory() as d:
            if rank == 0:
                torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                            "step": step + 1}, os.path.join(d, "state.pt"))
                ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d))
            else:
                ray.train.report(metrics)
        step_times.append(time.perf_counter() - t_step)
    step_s = (time.perf_counter() - t) / max(1, config["steps"] - start)
    out = {"rank": rank, "backend": dist.get_backend(), "master_addr": os.environ["MASTER_ADDR"],
           "losses": losses, "out_dir": config["out_dir"],
           "resumed_from": resumed_from, "step_s": step_s, "step_times": step_times,
           "params": [p.detach().flatten().tolist() for p in model.module.parameters()]}
    with open(os.path.join(config["out_dir"], f"rank{rank}.json"), "w") as f:
        json.dump(out, f)

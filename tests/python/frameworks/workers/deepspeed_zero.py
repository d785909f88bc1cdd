"""DeepSpeed ZeRO stages 1, 2 and 3, unchanged, on one process group of backend BACKEND.

    deepspeed_zero.py BACKEND [STAGES]      BACKEND: tandem | gloo; STAGES: "1,2,3" (default)

Run on 2 ranks with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and LOCAL_RANK set (tandemrun
sets them; DeepSpeed looks for MPI otherwise). For each stage, from the same seed: a 2-layer
MLP trained for STEPS steps in fp32 on fixed synthetic data, each rank on its slice of the
global batch, with gradient clipping; then the same training in this process alone on the
global batches (the reference). Writes $REPORT_DIR/rank<R>.json: per stage the losses, the
final parameters (gathered under ZeRO-3), their distance to the reference, seconds per step,
and the wall-clock windows of deepspeed.initialize and of the training steps (to split a
TANDEM_TRACE timeline by stage and phase)."""

import json
import os
import sys
import time
import warnings

START_UNIX = time.time()

# torch 2.13 deprecates all_gather_into_tensor/reduce_scatter_tensor, which DeepSpeed calls on
# every step: one FutureWarning per call would bury the output.
warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

BACKEND = sys.argv[1]
STAGES = [int(s) for s in (sys.argv[2] if len(sys.argv) > 2 else "1,2,3").split(",")]
# The test's run; bench/frameworks/compare.py sets these for its timed runs.
STEPS = int(os.environ.get("DS_STEPS", "6"))
HIDDEN = int(os.environ.get("DS_HIDDEN", "64"))
BUCKET = int(os.environ.get("DS_BUCKET", "512"))  # elements: several buckets per step
REPORT_PARAMS = os.environ.get("DS_REPORT_PARAMS", "1") == "1"
DTYPE = os.environ.get("DS_DTYPE", "fp32")  # fp32 | bf16 (DeepSpeed's bf16: fp32 master weights)
MICRO_BATCH = 8
LR = 0.05
CLIP = 1.0

if BACKEND == "tandem":
    import tandem.torch  # noqa: E402,F401  registers the backend

import deepspeed  # noqa: E402
import deepspeed.comm as dist  # noqa: E402
import importlib  # noqa: E402

# DeepSpeed's CPU shared-memory op serves only its inference_all_reduce, which ZeRO training
# never calls: not building it spares a fresh machine a 110 s compile, on either backend.
# (By module name: the attribute deepspeed.comm.torch is the torch package.)
importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None

IMPORTED_UNIX = time.time()
t0 = time.perf_counter()
deepspeed.init_distributed(dist_backend=BACKEND, verbose=False)
init_s = time.perf_counter() - t0
rank, world = dist.get_rank(), dist.get_world_size()
assert torch.distributed.get_backend() == BACKEND, torch.distributed.get_backend()


def make_model():
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(16, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 4))


def make_data():
    g = torch.Generator().manual_seed(99)
    x = torch.randn(STEPS, world * MICRO_BATCH, 16, generator=g)
    w = torch.randn(16, 4, generator=g)
    y = torch.tanh(x @ w) + 0.1 * torch.randn(STEPS, world * MICRO_BATCH, 4, generator=g)
    return x, y


def config(stage):
    zero = {"stage": stage, "reduce_bucket_size": BUCKET, "allgather_bucket_size": BUCKET,
            "overlap_comm": False, "contiguous_gradients": True}
    if stage == 3:
        # Partition every parameter (the default keeps those under 1e5 elements whole, which
        # for this model means all of them and no all_gather at all).
        zero.update({"stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": BUCKET,
                     "stage3_max_live_parameters": 2 * BUCKET, "stage3_max_reuse_distance": 0})
    return {"train_micro_batch_size_per_gpu": MICRO_BATCH, "gradient_accumulation_steps": 1,
            "gradient_clipping": CLIP, "zero_optimization": zero,
            "bf16": {"enabled": DTYPE == "bf16"},
            "zero_allow_untested_optimizer": True, "steps_per_print": 10 ** 9,
            "wall_clock_breakdown": False}


def train_deepspeed(stage, x, y):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    dist.barrier()
    init_us = time.time() * 1e6
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config(stage))
    train_us = time.time() * 1e6
    lo, hi = rank * MICRO_BATCH, (rank + 1) * MICRO_BATCH
    losses = []
    t = time.perf_counter()
    for s in range(STEPS):
        dt = torch.bfloat16 if DTYPE == "bf16" else torch.float32
        loss = nn.functional.mse_loss(engine(x[s, lo:hi].to(dt)).float(), y[s, lo:hi])
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    step_s = (time.perf_counter() - t) / STEPS
    end_us = time.time() * 1e6
    params = list(engine.module.parameters())
    if stage == 3:
        with deepspeed.zero.GatheredParameters(params):
            final = [p.detach().float().clone() for p in params]
    else:
        final = [p.detach().float().clone() for p in params]
    engine.destroy()
    dist.barrier()
    return losses, final, step_s, {"init": (init_us, train_us), "train": (train_us, end_us)}


def train_reference(x, y):
    """One process on the global batches: the mean of the ranks' mean losses is the mean loss
    of the global batch (equal slices), whose gradient is what ZeRO's averaging produces."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    losses = []
    for s in range(STEPS):
        out = model(x[s])
        per_rank = [nn.functional.mse_loss(out[r * MICRO_BATCH:(r + 1) * MICRO_BATCH],
                                           y[s, r * MICRO_BATCH:(r + 1) * MICRO_BATCH])
                    for r in range(world)]
        loss = sum(per_rank) / world
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append([v.item() for v in per_rank])
    return losses, [p.detach().clone() for p in model.parameters()]


x, y = make_data()
ref_losses, ref_params = train_reference(x, y)
report = {"rank": rank, "world": world, "backend": BACKEND, "init_s": init_s, "hidden": HIDDEN,
          "dtype": DTYPE,
          "parameters": sum(p.numel() for p in ref_params),
          "deepspeed": deepspeed.__version__, "torch": torch.__version__, "stages": {}}
for stage in STAGES:
    losses, final, step_s, window = train_deepspeed(stage, x, y)
    report["stages"][str(stage)] = {
        "losses": losses,
        "params": [p.flatten().tolist() for p in final] if REPORT_PARAMS else None,
        "shapes": [list(p.shape) for p in final],
        "reference_loss_diff": max(abs(a - b[rank]) for a, b in zip(losses, ref_losses)),
        "reference_param_diff": max((a - b).abs().max().item() for a, b in zip(final, ref_params)),
        "step_s": step_s,
        "windows_us": window,
    }
report["unix_times"] = {"start": START_UNIX, "imported": IMPORTED_UNIX, "end": time.time()}
with open(os.path.join(os.environ["REPORT_DIR"], f"rank{rank}.json"), "w") as f:
    json.dump(report, f)

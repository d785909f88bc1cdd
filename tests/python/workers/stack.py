"""torch 2.x's training stack on backend "tandem" (argv[1] names the part; argv[2] the backend,
"tandem" by default): each check runs on every rank and compares with a one-process reference
the rank computes itself from the same seed (no communication in the reference). Writes
{check: "ok" | traceback} to $REPORT_DIR/rank<R>.json."""

import copy
import datetime
import json
import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn

import tandem.torch  # noqa: F401

part = sys.argv[1]
backend = sys.argv[2] if len(sys.argv) > 2 else "tandem"
dist.init_process_group(backend, timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
report = {}


def check(name, fn):
    try:
        fn()
        report[name] = "ok"
    except Exception:  # noqa: BLE001 - recorded for the test to show
        report[name] = traceback.format_exc(limit=4)


def close(got, want, what, tol=1e-5):
    got, want = got.detach().double(), want.detach().double()
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}")
    err = (got - want).abs().max().item() if got.numel() else 0.0
    if err > tol * max(1.0, want.abs().max().item() if want.numel() else 0.0):
        raise AssertionError(f"{what}: max difference {err:.3g} > {tol}")


class MLP(nn.Module):
    def __init__(self, d=16, hidden=32, layers=3):
        super().__init__()
        self.layers = nn.ModuleList(
            [nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, d))
             for _ in range(layers)])
        self.head = nn.Linear(d, 4)

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return self.head(x)


def batches(steps, per_rank=8, d=16):
    """The global batches of every step: the same on every rank (seeded), split by rank."""
    g = torch.Generator().manual_seed(1234)
    return [(torch.randn(per_rank * world, d, generator=g),
             torch.randint(0, 4, (per_rank * world,), generator=g)) for _ in range(steps)]


def local(x, per_rank=8):
    return x[rank * per_rank:(rank + 1) * per_rank]


def reference_run(model, data, lr=0.1):
    """One process, the whole global batch, mean loss: the model and losses a data-parallel
    run must reproduce (also with accumulation: every rank's micro-batches are equal parts of
    its equal shard, so their averaged gradient is the global batch's)."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def mean_over_ranks(v):
    t = torch.tensor([v], dtype=torch.float64)
    dist.all_reduce(t)
    return t.item() / world


# ---- FSDP2 -------------------------------------------------------------------------------
def fsdp2(reshard, bf16, micro):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    model = MLP()
    ref = copy.deepcopy(model)
    data = batches(3)
    ref_losses = reference_run(ref, data)
    mesh = init_device_mesh("cpu", (world,))
    mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
          if bf16 else MixedPrecisionPolicy())
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    tol = 3e-2 if bf16 else 1e-5
    for step, (x, y) in enumerate(data):
        opt.zero_grad()
        total = 0.0
        xs, ys = local(x).chunk(micro), local(y).chunk(micro)
        for k in range(micro):
            # Gradient accumulation: no reduce-scatter until the last micro-batch.
            model.set_requires_gradient_sync(k == micro - 1)
            loss = nn.functional.cross_entropy(model(xs[k]), ys[k]) / micro
            loss.backward()
            total += loss.item()
        opt.step()
        close(torch.tensor(mean_over_ranks(total)), torch.tensor(ref_losses[step]),
              f"loss of step {step}", tol)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        close(p.full_tensor(), q, f"final {name}", tol)


# ---- DTensor -----------------------------------------------------------------------------
def dtensor_1d():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    full = torch.arange(6 * world * 5, dtype=torch.float32).view(6 * world, 5)
    d = distribute_tensor(full, mesh, [Shard(0)])
    close(d.to_local(), full.chunk(world)[rank], "Shard(0) local block")
    close(d.full_tensor(), full, "full_tensor of Shard(0)")
    r = d.redistribute(mesh, [Replicate()])
    close(r.to_local(), full, "Shard(0) -> Replicate")
    s1 = r.redistribute(mesh, [Shard(1)])
    close(s1.full_tensor(), full, "Replicate -> Shard(1)")
    s0 = s1.redistribute(mesh, [Shard(0)])  # all_to_all
    close(s0.to_local(), full.chunk(world)[rank], "Shard(1) -> Shard(0)")
    # A computation on sharded operands: the matmul's result, gathered.
    w = torch.randn(5, 3, generator=torch.Generator().manual_seed(7))
    out = (d @ distribute_tensor(w, mesh, [Replicate()])).full_tensor()
    close(out, full @ w, "Shard(0) @ Replicate")
    partial_sum = (d * 2).sum()  # a Partial reduced on full_tensor()
    close(partial_sum.full_tensor(), (full * 2).sum(), "sum of a sharded tensor")


def dtensor_2d():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    assert world % 2 == 0, "the 2-D mesh needs an even world size"
    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
    full = torch.arange(8 * 4 * world, dtype=torch.float64).view(8, 4 * world)
    d = distribute_tensor(full, mesh, [Shard(0), Shard(1)])
    dp, tp = mesh.get_local_rank("dp"), mesh.get_local_rank("tp")
    close(d.to_local(), full.chunk(2, 0)[dp].chunk(world // 2, 1)[tp], "[Shard(0), Shard(1)] block")
    close(d.full_tensor(), full, "full_tensor on a 2-D mesh")
    r = d.redistribute(mesh, [Replicate(), Shard(1)])
    close(r.to_local(), full.chunk(world // 2, 1)[tp], "-> [Replicate, Shard(1)]")
    rr = r.redistribute(mesh, [Shard(1), Replicate()])
    close(rr.full_tensor(), full, "-> [Shard(1), Replicate]")


# ---- tensor parallel -----------------------------------------------------------------------
def tensor_parallel():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    class FF(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(12, 8 * world)
            self.w2 = nn.Linear(8 * world, 12)

        def forward(self, x):
            return self.w2(torch.relu(self.w1(x)))

    torch.manual_seed(3)
    model = FF()
    ref = copy.deepcopy(model)
    mesh = init_device_mesh("cpu", (world,))
    parallelize_module(model, mesh, {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(5)
    for step in range(3):
        x, y = torch.randn(6, 12, generator=g), torch.randn(6, 12, generator=g)
        for m, o in ((model, opt), (ref, ref_opt)):
            o.zero_grad()
            loss = nn.functional.mse_loss(m(x), y)
            loss.backward()
            o.step()
            if m is model:
                got = loss.item()
            else:
                close(torch.tensor(got), loss.detach(), f"TP loss of step {step}")
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        close(p.full_tensor(), q, f"TP final {name}")


# ---- functional collectives ----------------------------------------------------------------
def funcol_ops(x, group):
    import torch.distributed._functional_collectives as funcol

    a = funcol.all_reduce(x, "sum", group)
    b = funcol.all_gather_tensor(x, 0, group)
    c = funcol.reduce_scatter_tensor(b, "sum", 0, group)
    d = funcol.all_to_all_single(b, None, None, group)
    e, f = funcol.all_gather_single_coalesced([x, x * 2], group)
    h, = funcol.reduce_scatter_single_coalesced([b], "avg", [0], group)
    return a, b, c, d, e, f, h


def funcol_reference(x_of):
    xs = [x_of(r) for r in range(world)]
    gathered = torch.cat(xs)
    summed = sum(xs)
    # all_to_all of the gathered tensor: block r of every rank's copy, which is xs[rank].
    a2a = torch.cat([xs[rank]] * world)
    return [summed, gathered, gathered.chunk(world)[rank] * world, a2a, gathered,
            torch.cat([x * 2 for x in xs]), gathered.chunk(world)[rank]]


def funcol(compiled):
    group = dist.group.WORLD
    x_of = lambda r: torch.arange(4 * world, dtype=torch.float32) * (r + 1)  # noqa: E731
    fn = funcol_ops
    if compiled:
        import torch._dynamo as dynamo

        dynamo.config.cache_size_limit = 4
        fn = torch.compile(funcol_ops, backend="aot_eager", fullgraph=True)
    got = fn(x_of(rank), group)
    for i, (g_, w) in enumerate(zip(got, funcol_reference(x_of))):
        close(g_, w, f"functional collective {i} ({'compiled' if compiled else 'eager'})")


def compiled_inductor():
    import torch.distributed._functional_collectives as funcol

    def step(x, w):
        y = torch.relu(x @ w)
        return funcol.all_reduce(y, "avg", dist.group.WORLD) * 2

    g = torch.Generator().manual_seed(11)
    w = torch.randn(8, 8, generator=g)
    xs = [torch.randn(4, 8, generator=g) for _ in range(world)]
    got = torch.compile(step, fullgraph=True)(xs[rank], w)
    want = sum(torch.relu(x @ w) for x in xs) / world * 2
    close(got, want, "all_reduce inside an inductor-compiled function")


# ---- object collectives ---------------------------------------------------------------------
def objects():
    mine = {"rank": rank, "text": "x" * (rank * 1000), "list": list(range(rank))}
    got = [None] * world
    dist.all_gather_object(got, mine)
    assert got == [{"rank": r, "text": "x" * (r * 1000), "list": list(range(r))}
                   for r in range(world)], got
    objs = [("from root", 42, {"k": [1.5]})] if rank == world - 1 else [None]
    dist.broadcast_object_list(objs, src=world - 1)
    assert objs == [("from root", 42, {"k": [1.5]})], objs
    out = [None]
    dist.scatter_object_list(out, [f"for {r}" for r in range(world)] if rank == 0 else None, src=0)
    assert out == [f"for {rank}"], out
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(rank * 10, gathered, dst=0)
    if rank == 0:
        assert gathered == [r * 10 for r in range(world)], gathered


# ---- distributed checkpoint ------------------------------------------------------------------
def dcp(save):
    import torch.distributed.checkpoint as dcp_
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    path = os.environ["CHECKPOINT_DIR"]
    torch.manual_seed(21 if save else 99)  # the loading run starts from other weights
    model = MLP()
    want = {k: v.clone() for k, v in model.state_dict().items()}
    mesh = init_device_mesh("cpu", (world,))
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if save:
        dcp_.save({"model": get_model_state_dict(model)}, checkpoint_id=path)
        return
    state = {"model": get_model_state_dict(model)}
    dcp_.load(state, checkpoint_id=path)
    set_model_state_dict(model, state["model"])
    torch.manual_seed(21)
    saved = MLP().state_dict()  # what the 2-rank run saved, made here from its seed
    for name, p in model.state_dict().items():
        close(p.full_tensor(), saved[name], f"loaded {name}")
        assert not torch.equal(saved[name], want[name]), "the loading run started from the same weights"


PARTS = {
    "fsdp2": lambda: [
        check("reshard_after_forward", lambda: fsdp2(True, False, 1)),
        check("no_reshard_after_forward", lambda: fsdp2(False, False, 1)),
        check("bf16_params_fp32_reduce", lambda: fsdp2(True, True, 1)),
        check("gradient_accumulation", lambda: fsdp2(True, False, 2)),
    ],
    "dtensor": lambda: [check("dtensor_1d", dtensor_1d)]
    + ([check("dtensor_2d", dtensor_2d)] if world % 2 == 0 and world >= 4 else []),
    "tp": lambda: [check("tensor_parallel", tensor_parallel)],
    "funcol": lambda: [check("funcol_eager", lambda: funcol(False)),
                       check("funcol_compiled", lambda: funcol(True))],
    "inductor": lambda: [check("inductor", compiled_inductor)],
    "objects": lambda: [check("objects", objects)],
    "dcp_save": lambda: [check("dcp_save", lambda: dcp(True))],
    "dcp_load": lambda: [check("dcp_load", lambda: dcp(False))],
}

PARTS[part]()
with open(os.path.join(os.environ["REPORT_DIR"], f"rank{rank}.json"), "w") as f:
    json.dump(report, f)
dist.destroy_process_group()

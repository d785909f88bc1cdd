"""A small transformer language model trained data-parallel through torch.distributed, on CUDA
or the CPU, with DDP or FSDP2, against a one-process reference.

  python bench/gpu/train_lm.py run --nproc 2 --mode ddp --backend tandem --out DIR
  python bench/gpu/train_lm.py run --nproc 1 --mode reference --world-batch 2 --out DIR
  python bench/gpu/train_lm.py compare DIR/reference-1.json DIR/ddp-tandem-2.json ...

`run` starts N plain processes of this script (no launcher: a dead rank must be named by the
survivors, not by a launcher stopping them), rank r on cuda:(r % GPUs), or the CPU with
--device cpu. Every rank trains on its slice of each global batch of synthetic tokens; the
reference (--mode reference, one process) trains on the whole global batch, so its losses are
what the ranks' mean loss must be. Rank 0 writes DIR/<mode>-<backend>-<N>.json: the loss of
every step (the mean over the ranks), the median ms per step after the warm-up steps, and, with
--kill-rank, what the survivors saw: the error, how long after the kill it came, and whether the
CUDA context still ran a new one-rank group. `compare` prints one table and exits 1 when a run's
losses differ from the first file's by more than --rtol.
"""

import argparse
import datetime
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time


def build_model(a):
    import torch
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x, mask):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    class LM(nn.Module):
        def __init__(self, vocab, d, layers, heads, seq):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(torch.zeros(seq, d))
            self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
            self.ln = nn.LayerNorm(d)
            self.out = nn.Linear(d, vocab)
            self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

        def forward(self, tokens):
            x = self.tok(tokens) + self.pos[: tokens.shape[1]]
            for b in self.blocks:
                x = b(x, self.mask)
            return self.out(self.ln(x))

    torch.manual_seed(0)
    return LM(a.vocab, a.dim, a.layers, a.heads, a.seq)


def batch_tokens(a, step, rows):
    """Rows [rows.start, rows.stop) of step `step`'s global batch: every row a sequence whose
    next token is a fixed function of the previous one, from a start drawn per step."""
    import torch
    g = torch.Generator().manual_seed(1000 + step)
    start = torch.randint(0, a.vocab, (a.world_batch * a.batch, 1), generator=g)
    seq = (start * 5 + torch.arange(a.seq + 1) * 7) % a.vocab
    return seq[rows]


def train(a):
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if a.device == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
    if a.backend == "tandem":
        import tandem.torch  # noqa: F401
    report = {"mode": a.mode, "backend": a.backend, "world": world,
              "world_batch": a.world_batch, "device": str(device),
              "dtype": a.dtype, "losses": [], "ms_per_step": None}
    if a.device == "cuda":
        report["gpu"] = torch.cuda.get_device_name(device)
    model = build_model(a).to(device)
    report["params"] = sum(t.numel() for t in model.parameters())
    bf16 = a.dtype == "bf16"
    if a.mode != "reference":
        dist.init_process_group(a.backend, timeout=datetime.timedelta(seconds=a.timeout),
                                device_id=device if a.backend == "nccl" else None)
    if a.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[device.index] if a.device == "cuda" else None)
    elif a.mode == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mesh = init_device_mesh(device.type, (world,))
        mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if bf16 else MixedPrecisionPolicy())
        for b in model.blocks:
            fully_shard(b, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    per = a.batch * (a.world_batch if a.mode == "reference" else 1)
    autocast = bf16 and a.mode != "fsdp2"
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    times, step_start = [], time.monotonic()
    try:
        for step in range(a.warmup + a.steps):
            if a.kill_rank == rank and step == a.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            tokens = batch_tokens(a, step, slice(rank * per, (rank + 1) * per)).to(device)
            sync()
            step_start = time.monotonic()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                logits = model(tokens[:, :-1])
            loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(),
                                               tokens[:, 1:].flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            mean = loss.detach().reshape(1).float()
            if a.mode != "reference":
                dist.all_reduce(mean)
                mean /= world
            value = mean.item()  # waits for the step
            if step >= a.warmup:
                times.append((time.monotonic() - step_start) * 1e3)
            report["losses"].append(value)
    except Exception as e:  # what a survivor of a killed rank sees
        report["failure"] = {"error": type(e).__name__, "message": str(e).splitlines()[0][:600],
                             "after_s": time.monotonic() - step_start}
        report["failure"]["context_ok"] = new_group_works(a, device)
        write_report(a, rank, report)
        os._exit(3)
    report["ms_per_step"] = statistics.median(times) if times else None
    if a.mode != "reference":
        dist.destroy_process_group()
    write_report(a, rank, report)


def new_group_works(a, device):
    """After a failure: the CUDA context still computes, and a new one-rank group of the same
    backend allreduces on it."""
    import torch
    import torch.distributed as dist
    try:
        try:
            dist.destroy_process_group()
        except Exception:
            pass
        x = torch.arange(1024, dtype=torch.float32, device=device)
        store = dist.HashStore()
        dist.init_process_group(a.backend, store=store, rank=0, world_size=1)
        dist.all_reduce(x)
        ok = x.sum().item() == 1023 * 1024 / 2
        dist.destroy_process_group()
        return ok
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"


def run_name(a, world):
    """<mode>-<backend>-<ranks>[-kill]; a reference is named by the ranks of its global batch."""
    n = a.world_batch if a.mode == "reference" else world
    return f"{a.mode}-{a.backend}-{n}" + ("-kill" if a.kill_rank >= 0 else "")


def write_report(a, rank, report):
    with open(os.path.join(a.out, f"{run_name(a, report['world'])}.rank{rank}.json"), "w") as f:
        json.dump(report, f)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(a, argv):
    """Runs this script on --nproc ranks as plain processes and gathers rank 0's report (or, with
    --kill-rank, every survivor's)."""
    os.makedirs(a.out, exist_ok=True)
    port = str(free_port())
    procs = []
    for r in range(a.nproc):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(a.nproc),
                   LOCAL_WORLD_SIZE=str(a.nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([sys.executable, __file__, "rank", *argv], env=env))
    deadline = time.monotonic() + a.limit
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append("timeout")
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    base = os.path.join(a.out, run_name(a, a.nproc))
    reports = {}
    for r in range(a.nproc):
        path = f"{base}.rank{r}.json"
        if os.path.exists(path):
            with open(path) as f:
                reports[r] = json.load(f)
    summary = dict(reports.get(0, {"mode": a.mode, "backend": a.backend, "world": a.nproc}))
    summary["exit_codes"] = codes
    if a.kill_rank >= 0:
        summary["killed_rank"] = a.kill_rank
        summary["survivors"] = {r: rep.get("failure") for r, rep in reports.items()}
    with open(base + ".json", "w") as f:
        json.dump(summary, f, indent=1)
    print(f"{os.path.basename(base)}: exit codes {codes}, "
          f"ms/step {summary.get('ms_per_step')}, last loss "
          f"{summary['losses'][-1] if summary.get('losses') else None}", flush=True)
    expected_fail = a.kill_rank >= 0
    return 0 if expected_fail or all(c == 0 for c in codes) else 1


def compare(files, rtol):
    runs = []
    for path in files:
        with open(path) as f:
            runs.append((os.path.basename(path), json.load(f)))
    ref = runs[0][1]["losses"]
    worst_all = 0.0
    print("| run | ranks | device | ms/step | final loss | max rel. diff to reference |")
    print("|---|---:|---|---:|---:|---:|")
    for name, r in runs:
        losses = r.get("losses") or []
        n = min(len(losses), len(ref))
        worst = max((abs(losses[i] - ref[i]) / abs(ref[i]) for i in range(n)), default=float("nan"))
        if name != runs[0][0]:
            worst_all = max(worst_all, worst if n == len(ref) else float("inf"))
        ms = r.get("ms_per_step")
        print(f"| {name[:-5]} | {r.get('world')} | {r.get('device')} | "
              f"{'-' if ms is None else f'{ms:.2f}'} | "
              f"{losses[-1] if losses else float('nan'):.4f} | {worst:.2e} |")
    return 0 if worst_all <= rtol else 1


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["run", "rank", "compare"])
    p.add_argument("files", nargs="*", help="compare: the reference's JSON first")
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--mode", choices=["ddp", "fsdp2", "reference"], default="ddp")
    p.add_argument("--backend", default="tandem")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16",
                   help="bf16: autocast (DDP, reference) or bf16 parameters (FSDP2)")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    p.add_argument("--world-batch", type=int, default=0,
                   help="ranks whose batches make a global batch (default: --nproc)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-at", type=int, default=8, help="the step at which --kill-rank dies")
    p.add_argument("--timeout", type=int, default=60, help="the group's timeout, seconds")
    p.add_argument("--limit", type=int, default=300, help="run: seconds before ranks are killed")
    p.add_argument("--rtol", type=float, default=2e-2)
    p.add_argument("--out", default="/tmp/tandem-train-lm")
    a = p.parse_args()
    if a.command == "compare":
        sys.exit(compare(a.files, a.rtol))
    if a.mode == "reference":
        a.backend = "none"
    if a.world_batch == 0:
        a.world_batch = a.nproc if a.command == "run" else int(os.environ.get("WORLD_SIZE", 1))
    if a.command == "rank":
        train(a)
        return
    argv = [x for x in sys.argv[2:]]
    argv += ["--world-batch", str(a.world_batch)]
    sys.exit(spawn(a, argv))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""How long a torchft job takes to go on after a replica is SIGKILLed, on tandem's
ProcessGroupTandem and on torchft's ProcessGroupGloo.

    PYTHONPATH=build/python OMP_NUM_THREADS=1 .venv/bin/python \\
        bench/frameworks/torchft_recovery.py [--replicas 3] [--trials 3] [--heartbeat-ms 1000]
        [--heal]

Each trial starts --replicas replica groups of one rank on 127.0.0.1 (torchft's Manager, the
lighthouse in this process, min_replicas = replicas - 1) training a small MLP: each step the
gradients are all-reduced through manager.allreduce and the optimizer steps if should_commit()
says so. (Not through torchft's DDP wrapper: its communication hook asserts when a work's
wait() raises, which torchft's Gloo group's does when a peer dies; ProcessGroupTandem's does
not.) After --warm steps the last replica SIGKILLs itself inside a step, after its quorum,
before its all-reduce, so the survivors' all-reduce is in flight with it. Each survivor records,
on the host's monotonic clock:

  kill->pg_error the kill to the end, in failure, of the survivor's wait() on its all-reduce:
                 how fast the process group notices a dead peer
  kill->error    the kill to torchft's Manager.report_error for it (the step will not commit)
  kill->quorum   the kill to the start of configure() for the quorum without it: torchft's
                 lighthouse, which waits --heartbeat-ms for the dead replica's heartbeat
  configure      configure() of that quorum's process group (replicas - 1 ranks)
  kill->commit   the kill to the survivor's next committed step
  step           the median time between the survivor's committed steps before the kill
                 (every replica in; --warm sets how many): quorum, all-reduces and commit

The script prints a "trial:" line per survivor, trial and backend, then the medians over
every survivor and trial:

  row: backend=B replicas=N heartbeat_ms=H samples=S kill_to_pg_error_ms=.. kill_to_error_ms=..
       kill_to_quorum_ms=.. configure_ms=.. kill_to_commit_ms=.. first_configure_ms=.. step_ms=..
       (medians; first_configure: the first quorum's group, all N replicas)

--heal: the parent starts the victim's replica again as soon as it is killed (a new process,
the same replica id); the survivors train on until a step is committed by every replica again.
The new replica heals from a peer (torchft's default checkpoint transport) in its first
quorum, and reports, from its process start:

  heal: spawn_to_ready    start to its Manager made (Python, torch and torchft imported)
        ready_to_quorum   to the start of configure() for the quorum that admits it
        configure         that configure() (all N replicas)
        quorum_to_state   configure()'s start to its load_state_dict being called: the
                          group made, the peer's state fetched
        load              load_state_dict itself
        state_to_commit   to its first committed step
        spawn_to_commit, kill_to_commit

  heal-row: the medians of those over the trials.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta

WORKER_TIMEOUT = 120


def worker(cfg):
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed import TCPStore
    from torchft.manager import Manager
    from torchft.process_group import ProcessGroupGloo

    torch.set_num_threads(1)
    timeout = timedelta(seconds=30)
    if cfg["backend"] == "tandem":
        from tandem.torchft import ProcessGroupTandem
        pg = ProcessGroupTandem(timeout=timeout)
    else:
        pg = ProcessGroupGloo(timeout=timeout)
    configures = []
    configure = pg.configure

    def timed_configure(store_addr, replica_id, rank, world_size, *args, **kw):
        t0 = time.monotonic()
        configure(store_addr, replica_id, rank, world_size, *args, **kw)
        configures.append({"start": t0, "s": time.monotonic() - t0, "world": world_size})

    pg.configure = timed_configure
    create_pg = pg._create_pg
    made = []

    def timed_create_pg(*a, **kw):
        t0 = time.monotonic()
        out = create_pg(*a, **kw)
        made.append({"start": t0, "s": time.monotonic() - t0})
        return out

    pg._create_pg = timed_create_pg
    failed_works = []
    allreduce = pg.allreduce

    class TimedWork(dist._Work):
        # When the survivor's wait() on an all-reduce ended in failure: Gloo's raises,
        # ProcessGroupTandem's returns False. (No callback on the work's future: a Python
        # callback that tandem's completion thread runs could outlive the interpreter.)
        def __init__(self, work):
            super().__init__()
            self._work = work

        def wait(self, timeout=None):
            try:
                ok = self._work.wait()
            except Exception as e:
                failed_works.append({"at": time.monotonic(), "error": str(e)[:300]})
                raise
            if ok is False:
                failed_works.append({"at": time.monotonic(), "error": repr(pg.errored())[:300]})
            return ok

        def get_future(self):
            return self._work.get_future()

    def watched_allreduce(tensors, opts):
        return TimedWork(allreduce(tensors, opts))

    pg.allreduce = watched_allreduce

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    control = TCPStore("127.0.0.1", cfg["control_port"], is_master=False,
                       wait_for_workers=False, timeout=timeout)
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # noqa: F841
    loads = []

    def load_state_dict(sd):
        t0 = time.monotonic()
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["opt"])
        loads.append({"start": t0, "s": time.monotonic() - t0})

    manager = Manager(
        pg=pg, min_replica_size=1, replica_id=f"replica_{cfg['replica']}",
        load_state_dict=load_state_dict,
        state_dict=lambda: {"model": model.state_dict(), "opt": opt.state_dict()},
        store_addr="127.0.0.1", store_port=store.port, rank=0, world_size=1,
        lighthouse_addr=cfg["lighthouse"], hostname="127.0.0.1", timeout=timeout,
        quorum_timeout=timeout, connect_timeout=timeout)
    errors = []
    report_error = manager.report_error

    def timed_report_error(e):
        errors.append({"at": time.monotonic(), "error": f"{type(e).__name__}: {e}"[:300]})
        report_error(e)

    manager.report_error = timed_report_error
    ready = time.monotonic()
    healing = cfg.get("healing", False)  # the victim's replacement (--heal)
    if not healing:
        control.set(f"ready/{cfg['replica']}", "1")
        control.wait([f"ready/{r}" for r in range(cfg["replicas"])], timeout)

    victim = cfg["replica"] == cfg["replicas"] - 1 and not healing
    commits = []
    after = 0
    rejoined = False  # --heal: a step committed by every replica again, after the kill
    g = torch.Generator().manual_seed(cfg["replica"])
    while (not healing and after < cfg["after"]) or (cfg["heal"] and not rejoined):
        step = manager.current_step()
        manager.start_quorum()
        opt.zero_grad()
        x, y = torch.randn(64, 32, generator=g), torch.randn(64, 8, generator=g)
        nn.functional.mse_loss(model(x), y).backward()
        if victim and step == cfg["warm"]:
            manager.wait_quorum()
            control.set("killed_at", repr(time.monotonic()))
            os.kill(os.getpid(), signal.SIGKILL)
        works = [manager.allreduce(p.grad) for p in model.parameters()]
        for w in works:
            w.wait()
        if manager.should_commit():
            opt.step()
            commits.append({"at": time.monotonic(), "step": step,
                            "participants": manager.num_participants()})
            if commits[-1]["participants"] < cfg["replicas"]:
                after += 1
            elif after > 0 or healing:
                rejoined = True
    with open(cfg["report"], "w") as f:
        json.dump({"configures": configures, "made": made, "errors": errors, "commits": commits,
                   "failed_works": failed_works, "loads": loads, "ready": ready,
                   "spawned": cfg.get("spawned")}, f)
    pg.shutdown()
    manager.shutdown(wait=False)


def trial(backend, args, tmp):
    from torch.distributed import TCPStore
    from torchft._torchft import LighthouseServer

    lh = LighthouseServer(bind="[::]:0", min_replicas=args.replicas - 1,
                          join_timeout_ms=60000, heartbeat_timeout_ms=args.heartbeat_ms)
    control = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    addr = "http://127.0.0.1:" + lh.address().rsplit(":", 1)[1]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = []
    try:
        def spawn(name, **extra):
            cfg = {"backend": backend, "replicas": args.replicas, "lighthouse": addr,
                   "control_port": control.port, "warm": args.warm, "after": args.after,
                   "heal": args.heal, "report": os.path.join(tmp, f"{backend}{name}.json"),
                   **extra}
            log = open(os.path.join(tmp, f"{backend}{name}.log"), "w")
            procs.append(subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(cfg)],
                                          env=env, stdout=log, stderr=subprocess.STDOUT))
            log.close()

        for r in range(args.replicas):
            spawn(r, replica=r)
        if args.heal:  # the victim's replacement, started at once after the kill
            control.wait(["killed_at"], timedelta(seconds=WORKER_TIMEOUT))
            spawn("healed", replica=args.replicas - 1, healing=True, spawned=time.monotonic())
        for r, p in enumerate(procs):
            rc = p.wait(timeout=WORKER_TIMEOUT)
            want = -signal.SIGKILL if r == args.replicas - 1 else 0
            if rc != want:
                name = "healed" if r == args.replicas else r
                with open(os.path.join(tmp, f"{backend}{name}.log")) as f:
                    sys.exit(f"replica {name} on {backend} exited {rc}:\n{f.read()[-4000:]}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        lh.shutdown()
    killed = float(control.get("killed_at"))
    rows = []
    for r in range(args.replicas - 1):
        with open(os.path.join(tmp, f"{backend}{r}.json")) as f:
            rep = json.load(f)
        err = next(e for e in rep["errors"] if e["at"] >= killed)
        work = next(w for w in rep["failed_works"] if w["at"] >= killed)
        conf = next(c for c in rep["configures"] if c["start"] >= killed)
        made = next(c for c in rep["made"] if c["start"] >= killed)
        commit = next(c for c in rep["commits"] if c["at"] >= killed)
        before = [c for c in rep["commits"] if c["at"] < killed]  # every replica in
        rows.append({"kill_to_pg_error": work["at"] - killed,
                     "kill_to_error": err["at"] - killed, "kill_to_quorum": conf["start"] - killed,
                     "configure": conf["s"], "create_pg": made["s"], "kill_to_commit": commit["at"] - killed,
                     "first_configure": rep["configures"][0]["s"],
                     "step": statistics.median(b["at"] - a["at"] for a, b in zip(before, before[1:])),
                     "error": err["error"],
                     "world": conf["world"]})
    if args.heal:
        with open(os.path.join(tmp, f"{backend}healed.json")) as f:
            rep = json.load(f)
        spawned, conf, load = rep["spawned"], rep["configures"][0], rep["loads"][0]
        commit = rep["commits"][0]
        rows.append({"heal": True, "spawn_to_ready": rep["ready"] - spawned,
                     "ready_to_quorum": conf["start"] - rep["ready"], "configure": conf["s"],
                     "quorum_to_state": load["start"] - conf["start"], "load": load["s"],
                     "state_to_commit": commit["at"] - load["start"] - load["s"],
                     "spawn_to_commit": commit["at"] - spawned,
                     "kill_to_commit": commit["at"] - killed, "world": conf["world"]})
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--backends", default="tandem,gloo")
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--heartbeat-ms", type=int, default=1000,
                   help="the lighthouse's heartbeat timeout (torchft's default: 5000)")
    p.add_argument("--warm", type=int, default=5, help="steps before the kill")
    p.add_argument("--after", type=int, default=3, help="steps the survivors commit after it")
    p.add_argument("--heal", action="store_true",
                   help="start the victim again at once; it heals from a peer (see above)")
    args = p.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    keys = ["kill_to_pg_error", "kill_to_error", "kill_to_quorum", "configure", "create_pg",
            "kill_to_commit", "first_configure", "step"]
    heal_keys = ["spawn_to_ready", "ready_to_quorum", "configure", "quorum_to_state", "load",
                 "state_to_commit", "spawn_to_commit", "kill_to_commit"]
    everything, healed = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for t in range(args.trials):
            for backend in args.backends.split(","):
                rows = trial(backend, args, tmp)
                healed.setdefault(backend, []).extend(r for r in rows if r.get("heal"))
                rows = [r for r in rows if not r.get("heal")]
                everything.setdefault(backend, []).extend(rows)
                for row in healed.get(backend, [])[-1:] if args.heal else []:
                    print(f"heal: {t} backend={backend} world={row['world']} "
                          + " ".join(f"{k}_ms={row[k] * 1e3:.1f}" for k in heal_keys),
                          flush=True)
                for row in rows:
                    print(f"trial: {t} backend={backend} world_after={row['world']} "
                          + " ".join(f"{k}_ms={row[k] * 1e3:.1f}" for k in keys)
                          + f" error={row['error'].splitlines()[0][:120]!r}", flush=True)
    for backend, rows in everything.items():
        print(f"row: backend={backend} replicas={args.replicas} heartbeat_ms={args.heartbeat_ms} "
              f"samples={len(rows)} "
              + " ".join(f"{k}_ms={statistics.median(r[k] for r in rows) * 1e3:.1f}"
                         for k in keys), flush=True)
    for backend, rows in healed.items():
        print(f"heal-row: backend={backend} samples={len(rows)} "
              + " ".join(f"{k}_ms={statistics.median(r[k] for r in rows) * 1e3:.1f}"
                         for k in heal_keys), flush=True)


if __name__ == "__main__":
    main()

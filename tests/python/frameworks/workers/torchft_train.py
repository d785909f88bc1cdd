"""One rank of one replica group of a torchft run: torchft's Manager, its DDP wrapper and
OptimizerWrapper, on torchft's ProcessGroupGloo or tandem's ProcessGroupTandem. argv[1] is a
JSON object:

  backend        "tandem" or "gloo"
  lighthouse     the lighthouse's address
  runs           optional, instead of backend and lighthouse: [[backend, lighthouse], ...], run
                 one after the other in this process (a comparison without a second start-up)
  replica        the replica group's number (replica id "replica_<n>")
  group_rank, group_world_size   this rank in its replica group, and the group's size
  store_port     the replica group's TCPStore on 127.0.0.1 (hosted by the test), or null: this
                 process hosts it (a group of one rank)
  control_port   the test's TCPStore, for what the test coordinates (a kill, a restart)
  start_after    keys of that store to wait for before the first step: "ready/<replica>/<rank>"
                 is set by each rank once its Manager is up
  replicas       how many replica groups the full job has
  steps          stop at this step (role "plain")
  role           "plain"; "victim" (SIGKILLs itself at step kill_at, after its quorum, before
                 its gradients are all-reduced); "survivor" (goes on alone after the victim
                 died, waits for the replacement after solo_steps steps, stops after_join steps
                 after the replacement joined); "replacement" (the victim restarted: heals
                 from the survivor, stops after_join steps after it joined)
  transport      "http" (torchft's default checkpoint transport) or "pg" (PGTransport: the
                 checkpoint goes through the process group's send/recv)
  timeout        seconds: the process group's and the Manager's timeouts (a quorum, and what
                 waits for another process to start, may take 90 s)
  report         where to write the JSON report, {"runs": [one per run]}: the backend, the
                 final parameters and the log of steps

The model's batches depend on (replica, group rank, step) only, so a run is a deterministic
function of which replicas took part in each step."""

import json
import os
import signal
import sys
from datetime import timedelta

import torch

import torchft_model

cfg = json.loads(sys.argv[1])
torch.set_num_threads(1)

from torch.distributed import TCPStore  # noqa: E402
from torchft.checkpointing.pg_transport import PGTransport  # noqa: E402
from torchft.ddp import DistributedDataParallel  # noqa: E402
from torchft.manager import Manager  # noqa: E402
from torchft.optim import OptimizerWrapper  # noqa: E402
from torchft.process_group import ProcessGroupGloo  # noqa: E402

timeout = timedelta(seconds=cfg.get("timeout", 20))
# What waits for another process to start (on a busy 2-core machine, seconds).
startup = timedelta(seconds=90)
replica, group_rank = cfg["replica"], cfg["group_rank"]
role = cfg.get("role", "plain")
control = None
if cfg.get("control_port"):
    control = TCPStore("127.0.0.1", cfg["control_port"], is_master=False,
                       wait_for_workers=False, timeout=startup)


def run(backend, lighthouse):
    if backend == "tandem":
        from tandem.torchft import ProcessGroupTandem
        pg = ProcessGroupTandem(timeout=timeout)
    else:
        pg = ProcessGroupGloo(timeout=timeout)
    model, optimizer = torchft_model.model_and_optimizer()

    def state_dict():
        return {"model": model.state_dict(), "optim": optimizer.state_dict()}

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        optimizer.load_state_dict(sd["optim"])

    store = None  # this replica group's store, when this process hosts it: lives with the run
    store_port = cfg.get("store_port")
    if store_port is None:
        store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        store_port = store.port
    transport = None
    if cfg.get("transport") == "pg":
        transport = PGTransport(pg, timeout=timeout, device=torch.device("cpu"))
    manager = Manager(
        pg=pg, load_state_dict=load_state_dict, state_dict=state_dict,
        min_replica_size=cfg.get("min_replica_size", 1), replica_id=f"replica_{replica}",
        store_addr="127.0.0.1", store_port=store_port, rank=group_rank,
        world_size=cfg["group_world_size"], lighthouse_addr=lighthouse, hostname="127.0.0.1",
        timeout=timeout, quorum_timeout=startup, connect_timeout=startup,
        checkpoint_transport=transport)
    ddp = DistributedDataParallel(manager, model)
    opt = OptimizerWrapper(manager, optimizer)
    if control is not None:
        # Every replica's Manager heartbeats before any asks for a quorum, so that the first
        # quorum holds them all (the lighthouse waits for heartbeating replicas to join).
        control.set(f"ready/{replica}/{group_rank}", "1")
        if cfg.get("start_after"):
            control.wait(cfg["start_after"], startup)
    if role == "replacement":
        control.set(f"replacement_ready/{group_rank}", "1")

    log = []
    solo = 0          # steps committed without every replica, after a failure (survivor)
    failed = False    # the survivor saw the victim's failure
    join_step = None  # the first step of every replica again (survivor, replacement)
    while True:
        step = manager.current_step()
        if role in ("plain", "victim") and step >= cfg["steps"]:
            break
        if join_step is not None and step >= join_step + cfg["after_join"]:
            break
        if role == "survivor" and solo == cfg["solo_steps"]:
            # The replacement heartbeats: it joins the next quorum or the one after.
            control.wait([f"replacement_ready/{group_rank}"], startup)
            solo += 1
        opt.zero_grad()  # the Manager starts this step's quorum
        loss = torchft_model.loss(ddp, *torchft_model.batch(replica, group_rank, step))
        if role == "victim" and step == cfg["kill_at"]:
            manager.wait_quorum()  # the survivors are in this quorum's group with us
            os.kill(os.getpid(), signal.SIGKILL)
        loss.backward()  # torchft's DDP all-reduces the gradients through the Manager
        n, participating = manager.num_participants(), manager.is_participating()
        # OptimizerWrapper.step() makes these two calls; its answer is what the log needs.
        committed = manager.should_commit()
        if committed:
            optimizer.step()
        err = manager.errored()
        err = getattr(err, "original_exception", err)
        log.append({"step": step, "participants": n, "participating": participating,
                    "committed": committed, "quorum": manager._quorum_id,
                    "error": None if err is None else f"{type(err).__name__}: {err}"})
        if err is not None and role == "survivor":
            failed = True
        elif committed and role == "survivor" and failed and n < cfg["replicas"]:
            solo += 1
        if (join_step is None and committed and n == cfg["replicas"]
                and (role == "replacement" or (role == "survivor" and solo > 0))):
            join_step = step

    report = {"backend": pg.getBackendName(), "replica": replica, "group_rank": group_rank,
              "role": role, "final_step": manager.current_step(), "join_step": join_step,
              "log": log, "params": {k: v.double().flatten().tolist()
                                     for k, v in model.state_dict().items()}}
    pg.shutdown()
    manager.shutdown(wait=False)
    return report


runs = cfg.get("runs") or [[cfg["backend"], cfg["lighthouse"]]]
reports = [run(backend, lighthouse) for backend, lighthouse in runs]
with open(cfg["report"], "w") as f:
    json.dump({"runs": reports}, f)

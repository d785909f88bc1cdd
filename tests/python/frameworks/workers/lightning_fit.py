"""A PyTorch Lightning run on backend argv[1] ("tandem" or "gloo"), launched by tandemrun (which
Lightning sees as torchelastic): argv[2] is the strategy: "ddp", "fsdp" (which Lightning
refuses on the CPU), "model_parallel_fsdp" (ModelParallelStrategy, FSDP2 over 2 ranks) or
"model_parallel_tp" (ModelParallelStrategy, tensor parallel over 2 ranks).
Writes $REPORT_DIR/rank<R>.json with what a user would look at: the final parameters, the
logged metrics of fit, validate and test, an all_gather and what a resumed fit gives.

The DDP run covers what Lightning users call: `self.log(..., sync_dist=True)` (an AVG
all_reduce of a 0-d tensor, also of an integer one), torchmetrics metrics synced across the
ranks, `self.all_gather`, `trainer.strategy.barrier()`, a checkpoint saved after 2 epochs and
a fit resumed from it for a third, then `validate` and `test`."""

import json
import os
import sys
import tempfile
import warnings

import torch

warnings.filterwarnings("ignore")
backend, strategy_name = sys.argv[1], sys.argv[2]
if backend == "tandem":
    import tandem.torch  # noqa: F401

import pytorch_lightning as pl  # noqa: E402
import torchmetrics  # noqa: E402
from pytorch_lightning.strategies import DDPStrategy  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

torch.set_num_threads(1)


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    return TensorDataset(x, y)


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 2))
        self.train_acc = torchmetrics.Accuracy(task="multiclass", num_classes=2)
        self.val_acc = torchmetrics.Accuracy(task="multiclass", num_classes=2)
        self.gathered = None
        self.parallel = False

    def configure_model(self):  # Lightning calls it for fit, validate and test
        if not strategy_name.startswith("model_parallel") or self.parallel:
            return
        self.parallel = True
        from torch.distributed._composable.fsdp import fully_shard
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                       parallelize_module)
        mesh = self.device_mesh
        if mesh["tensor_parallel"].size() > 1:
            parallelize_module(self.net, mesh["tensor_parallel"],
                               {"0": ColwiseParallel(), "2": RowwiseParallel()})
        fully_shard(self.net, mesh=mesh["data_parallel"])

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, _):
        x, y = batch
        logits = self(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        self.train_acc(logits, y)
        self.log("loss", loss, sync_dist=True)
        # An integer: Lightning reduces it with AVG on every backend but Gloo.
        self.log("correct", (logits.argmax(1) == y).sum(), sync_dist=True, reduce_fx="mean")
        self.log("train_acc", self.train_acc, on_step=False, on_epoch=True)
        return loss

    def on_train_epoch_end(self):
        mine = torch.tensor([float(self.global_rank), float(self.current_epoch)])
        self.gathered = self.all_gather(mine).tolist()
        self.trainer.strategy.barrier()

    def validation_step(self, batch, _):
        x, y = batch
        logits = self(x)
        self.val_acc(logits, y)
        self.log("val_loss", torch.nn.functional.cross_entropy(logits, y), sync_dist=True)
        self.log("val_acc", self.val_acc, on_step=False, on_epoch=True)

    def test_step(self, batch, _):
        x, y = batch
        self.log("test_loss", torch.nn.functional.cross_entropy(self(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loaders():
    return (DataLoader(data(256, 1), batch_size=16, shuffle=False),
            DataLoader(data(64, 2), batch_size=16),
            DataLoader(data(64, 3), batch_size=16))


def trainer(root, epochs, strategy):
    return pl.Trainer(accelerator="cpu", devices=2, num_nodes=1, strategy=strategy,
                      max_epochs=epochs, default_root_dir=root, logger=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      deterministic=True, enable_checkpointing=False)


def strategy():
    if strategy_name == "ddp":
        return DDPStrategy(process_group_backend=backend)
    if strategy_name == "fsdp":
        from pytorch_lightning.strategies import FSDPStrategy
        return FSDPStrategy(process_group_backend=backend)
    from pytorch_lightning.strategies import ModelParallelStrategy
    tp = 2 if strategy_name == "model_parallel_tp" else 1
    return ModelParallelStrategy(data_parallel_size=2 // tp, tensor_parallel_size=tp,
                                 process_group_backend=backend)


def as_floats(metrics):
    return {k: float(v) for k, v in sorted(metrics.items())}


def params(model):
    out = {}
    for k, v in model.state_dict().items():
        if hasattr(v, "full_tensor"):  # a DTensor (FSDP2, tensor parallel)
            v = v.full_tensor()
        if v.is_floating_point():
            out[k] = v.detach().reshape(-1).tolist()
    return out


report = {}
with tempfile.TemporaryDirectory() as root:
    root = os.environ.get("SHARED_DIR", root)
    train, val, test = loaders()
    model = Model()
    t = trainer(root, 2, strategy())
    t.fit(model, train, val)
    report["fit_metrics"] = as_floats(t.callback_metrics)
    report["gathered"] = model.gathered
    ckpt = os.path.join(root, "two_epochs.ckpt")  # a folder under ModelParallelStrategy
    t.save_checkpoint(ckpt)
    t.strategy.barrier()
    report["params_after_fit"] = params(model)

    resumed = Model()
    t2 = trainer(root, 3, strategy())
    t2.fit(resumed, train, val, ckpt_path=ckpt)
    report["resumed_epoch"] = t2.current_epoch
    report["params_after_resume"] = params(resumed)
    report["validate"] = [as_floats(m) for m in t2.validate(resumed, val, verbose=False)]
    report["test"] = [as_floats(m) for m in t2.test(resumed, test, verbose=False)]
    report["backend"] = torch.distributed.get_backend() if torch.distributed.is_initialized() \
        else None

rank = int(os.environ["RANK"])
with open(os.path.join(os.environ["REPORT_DIR"], f"rank{rank}.json"), "w") as f:
    json.dump(report, f)

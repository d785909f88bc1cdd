#!/usr/bin/env python3
"""Fashion-MNIST with PyTorch DDP (gloo, CPU, one thread per rank): the reference that
build/bin/fashion_mnist is measured against. Same data, model, optimizer, per-rank batch and
learning-rate recipe (the example's defaults: 0.05 for 128 images scaled linearly to the global
batch, 100 warmup steps, cosine decay to 0 at the last step of the last epoch).

    torchrun --nproc_per_node 2 --redirects 1 --tee 1 --log_dir DIR bench/pytorch_ddp/train.py
    python3 bench/pytorch_ddp/train.py --max-steps 60          # one process, no launcher

Rank 0 prints a line per epoch and, last, exactly one line
    result: world_size=W epochs=E steps=S global_batch=G test_accuracy=A ms_per_step=M images_per_s=I
A: percent on the full test set (sharded over the ranks, counts summed with all_reduce).
M: mean wall time of a training step (batch gather, forward, backward, optimizer step, loss
and accuracy read back) after the first 20 steps, evaluation excluded, averaged over the ranks.
I: images per second over all ranks, G * 1000 / M. An epoch is len(sampler) // B steps (the
last partial batch is left out), as in the example.
"""
import argparse
import gzip
import math
import os
import socket
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

MEAN, STD = 0.2860, 0.3530
WARMUP_STEPS = 20  # steps left out of ms_per_step


def read_idx(path):
    """An IDX file (optionally gzip-compressed) as a numpy array of its declared shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4:
        raise ValueError("%s: too short for an IDX header" % path)
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError("%s: not an unsigned-byte IDX file (magic %02x%02x%02x%02x)"
                         % ((path,) + tuple(data[:4])))
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise ValueError("%s: header says %s, found %d bytes" % (path, dims, body.size))
    return body.reshape(dims)


def load_split(data_dir, prefix, limit):
    """(images N x 1 x 28 x 28 float32 normalised, labels N int64) of train or t10k."""
    def find(name):
        for candidate in (name + ".gz", name):
            path = os.path.join(data_dir, candidate)
            if os.path.exists(path):
                return path
        sys.exit("train.py: %s(.gz) not found in %s (Debian: apt-get install "
                 "dataset-fashion-mnist, or pass --data DIR)" % (name, data_dir))

    images = read_idx(find(prefix + "-images-idx3-ubyte"))
    labels = read_idx(find(prefix + "-labels-idx1-ubyte"))
    if images.shape[0] != labels.shape[0]:
        sys.exit("train.py: %s: %d images but %d labels"
                 % (prefix, images.shape[0], labels.shape[0]))
    if limit > 0:
        images, labels = images[:limit], labels[:limit]
    x = torch.from_numpy(images.astype(np.float32)).div_(255.0).sub_(MEAN).div_(STD)
    return x.unsqueeze(1).contiguous(), torch.from_numpy(labels.astype(np.int64))


class Net(nn.Module):
    """conv(1->32, 3x3)-relu-maxpool2-conv(32->64, 3x3)-relu-maxpool2-fc(1600->128)-relu-
    fc(128->10)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(1600, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


def evaluate(model, images, labels, rank, world, batch=1000):
    """Percent correct over the whole test set: rank r takes items r, r+W, ...; counts summed."""
    model.eval()
    correct = 0
    with torch.no_grad():
        mine = torch.arange(rank, images.shape[0], world)
        for i in range(0, mine.numel(), batch):
            idx = mine[i:i + batch]
            pred = model(images.index_select(0, idx)).argmax(dim=1)
            correct += int((pred == labels.index_select(0, idx)).sum())
    counts = torch.tensor([correct, mine.numel()], dtype=torch.float64)
    dist.all_reduce(counts)
    model.train()
    return 100.0 * counts[0].item() / max(counts[1].item(), 1.0)


def peak_lr(args, global_batch):
    """The base lr scaled from --reference-batch to the global batch."""
    ratio = global_batch / args.reference_batch
    return args.lr * {"linear": ratio, "sqrt": math.sqrt(ratio), "none": 1.0}[args.lr_scaling]


def lr_at(step, peak, warmup, total, decay):
    """lr of optimizer step `step` (0-based): linear warmup, then constant or cosine to 0."""
    if step < warmup:
        return peak * (step + 1) / warmup
    if decay == "none" or total <= warmup:
        return peak
    t = min(1.0, (step - warmup) / (total - warmup))
    return peak * 0.5 * (1.0 + math.cos(math.pi * t))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist",
                   help="directory of the IDX files (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-per-rank", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05,
                   help="base learning rate, for --reference-batch images (default: %(default)s)")
    p.add_argument("--reference-batch", type=int, default=128)
    p.add_argument("--lr-scaling", choices=("linear", "sqrt", "none"), default="linear",
                   help="lr for the global batch: lr x G/ref, lr x sqrt(G/ref) or lr")
    p.add_argument("--warmup-steps", type=int, default=100,
                   help="linear warmup from lr/N to lr over the first N steps")
    p.add_argument("--lr-decay", choices=("cosine", "none"), default="cosine",
                   help="after the warmup: cosine decay to 0 at the last step, or constant")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--backend", default="gloo",
                   help="torch.distributed backend: gloo, or tandem (import tandem.torch)")
    p.add_argument("--max-steps", type=int, default=0,
                   help="stop after this many training steps in all (0: run every epoch); "
                   "the lr schedule still spans --epochs")
    p.add_argument("--no-ddp", action="store_true",
                   help="compute only: no DDP wrapper and no gradient communication; every "
                   "rank trains its own copy on its shard")
    p.add_argument("--limit-train", type=int, default=0, help="use the first N training images")
    p.add_argument("--limit-test", type=int, default=0, help="use the first N test images")
    args = p.parse_args()
    if (args.epochs < 1 or args.batch_per_rank < 1 or args.reference_batch < 1 or
            args.max_steps < 0 or args.warmup_steps < 0 or args.lr <= 0):
        p.error("--epochs, --batch-per-rank, --reference-batch and --lr must be positive, "
                "--max-steps and --warmup-steps not negative")
    return args


def init_process_group(backend):
    """`backend` over the launcher's environment; a world of one on loopback without one."""
    if "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if backend == "tandem":
        import tandem.torch  # noqa: F401  (registers the backend)
    dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size()


def main():
    args = parse_args()
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    rank, world = init_process_group(args.backend)
    log = print if rank == 0 else (lambda *a, **k: None)

    train_x, train_y = load_split(args.data, "train", args.limit_train)
    test_x, test_y = load_split(args.data, "t10k", args.limit_test)

    torch.manual_seed(args.seed)  # the same initial parameters on every rank
    net = Net()
    model = net if args.no_ddp else DistributedDataParallel(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
    sampler = DistributedSampler(range(train_x.shape[0]), num_replicas=world, rank=rank,
                                 shuffle=True, seed=args.seed)
    batch = args.batch_per_rank
    steps_per_epoch = len(sampler) // batch
    if steps_per_epoch == 0:
        sys.exit("train.py: %d training images per rank, fewer than one batch of %d"
                 % (len(sampler), batch))
    total_steps = steps_per_epoch * args.epochs  # the lr schedule ignores --max-steps
    peak = peak_lr(args, batch * world)
    log("setup: world_size=%d batch_per_rank=%d global_batch=%d lr=%g (%s from %g at %d; "
        "warmup %d, decay %s) ddp=%s train=%d test=%d steps_per_epoch=%d total_steps=%d "
        "torch=%s" % (
            world, batch, batch * world, peak, args.lr_scaling, args.lr, args.reference_batch,
            args.warmup_steps, args.lr_decay, not args.no_ddp, train_x.shape[0],
            test_x.shape[0], steps_per_epoch, total_steps, torch.__version__), flush=True)

    step, epochs_run, accuracy = 0, 0, 0.0
    timed_s, timed_steps, all_s = 0.0, 0, 0.0
    done = False
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        order = torch.tensor(list(iter(sampler)), dtype=torch.int64)
        epochs_run += 1
        loss_sum, correct, seen = 0.0, 0, 0
        for i in range(0, steps_per_epoch * batch, batch):
            t0 = time.perf_counter()
            idx = order[i:i + batch]
            x, y = train_x.index_select(0, idx), train_y.index_select(0, idx)
            lr = lr_at(step, peak, args.warmup_steps, total_steps, args.lr_decay)
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.zero_grad(set_to_none=True)
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * y.numel()
            correct += int(logits.detach().argmax(1).eq(y).sum())
            seen += y.numel()
            dt = time.perf_counter() - t0
            step += 1
            all_s += dt
            if step > WARMUP_STEPS:
                timed_s += dt
                timed_steps += 1
            if args.max_steps and step >= args.max_steps:
                done = True
                break
        accuracy = evaluate(net, test_x, test_y, rank, world)
        log("epoch %d/%d: steps=%d train_loss=%.4f train_accuracy=%.2f (rank 0) "
            "test_accuracy=%.2f" % (epoch + 1, args.epochs, step, loss_sum / max(seen, 1),
                                    100.0 * correct / max(seen, 1), accuracy), flush=True)
        if done:
            break

    # Too short a run to leave the first steps out: take every step.
    mean_s = timed_s / timed_steps if timed_steps else all_s / max(step, 1)
    mean = torch.tensor([mean_s], dtype=torch.float64)
    dist.all_reduce(mean)
    ms = mean.item() * 1000.0 / world
    global_batch = batch * world
    log("result: world_size=%d epochs=%d steps=%d global_batch=%d test_accuracy=%.2f "
        "ms_per_step=%.2f images_per_s=%.1f" % (
            world, epochs_run, step, global_batch, accuracy, ms,
            global_batch * 1000.0 / ms if ms > 0 else 0.0), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

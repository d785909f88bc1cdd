"""The model, data and optimizer of workers/torchft_train.py, shared with the test's reference
computation (test_torchft.py), which trains the same model without any communication."""

import torch
from torch import nn


def model_and_optimizer():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3))
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def batch(replica, group_rank, step):
    """Replica `replica`'s batch at `step` on rank `group_rank` of its replica group."""
    g = torch.Generator().manual_seed(10007 * replica + 101 * group_rank + step)
    return torch.randn(8, 4, generator=g), torch.randn(8, 3, generator=g)


def loss(model, x, y):
    return nn.functional.mse_loss(model(x), y)

"""Models and losses for the --train tests, loadable as ``tests.workload.train_models:NAME``."""

from __future__ import annotations

import torch
from torch import nn


def frozen_mlp() -> tuple[nn.Module, torch.Tensor]:
    """No parameter takes a gradient."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    for p in model.parameters():
        p.requires_grad_(False)
    return model, torch.randn(1, 8)


def per_sample_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """A loss left unreduced: one value per sample, not a scalar."""
    return ((output - target) ** 2).mean(dim=1)

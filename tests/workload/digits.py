"""A small CNN trained here on scikit-learn's digits (8x8 images, 10 classes), and the data it is
judged on: the trials' processes import the model by name (``tests.workload.digits:cnn``), and
training is seeded and its weights kept in the temporary folder, so every process builds the same
model and only the first trains it."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch
from torch import nn

#: Samples held out of training: the user's data a study calibrates and evaluates on.
HELD_OUT = 400


@functools.cache
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]  # (N, 1, 8, 8) in [0, 1]
    return x, d.target.astype(np.int64)


def _net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(128, 10))


@functools.cache
def _trained() -> nn.Module:
    """Trained once per machine: the weights are kept in the temporary folder (written whole, by
    rename), since every trial's process builds the model."""
    import os
    import tempfile

    cache = Path(tempfile.gettempdir()) / f"rooftune-tests-digits-{torch.__version__}-v1.pt"
    net = _net()
    if cache.exists():
        net.load_state_dict(torch.load(cache, weights_only=True))
        return net.eval()
    torch.manual_seed(0)
    x, y = _digits()
    xs, ys = torch.from_numpy(x[:-HELD_OUT]), torch.from_numpy(y[:-HELD_OUT])
    net = _net()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(12):
        for idx in torch.randperm(len(xs), generator=g).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(net(xs[idx]), ys[idx]).backward()
            opt.step()
    part = cache.with_suffix(f".{os.getpid()}.part")
    torch.save(net.state_dict(), part)
    os.replace(part, cache)
    return net.eval()


def cnn() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The trained CNN and an example input (batch 1)."""
    return _trained(), (torch.from_numpy(_digits()[0][:1]),)


def accuracy(model: nn.Module) -> float:
    """Top-1 on the held-out samples, in percent."""
    x, y = _digits()
    with torch.no_grad():
        pred = model(torch.from_numpy(x[-HELD_OUT:])).argmax(1).numpy()
    return float((pred == y[-HELD_OUT:]).mean() * 100)


def write_npz(path: Path, labels: bool = True) -> Path:
    """The held-out samples as a .npz (``inputs`` and, with ``labels``, ``labels``)."""
    x, y = _digits()
    arrays = {"inputs": x[-HELD_OUT:]} | ({"labels": y[-HELD_OUT:]} if labels else {})
    np.savez(path, **arrays)
    return path


def batches():
    """The held-out samples as (inputs, labels) batches of 50, as a MODULE:CALLABLE data source."""
    x, y = _digits()
    x, y = x[-HELD_OUT:], y[-HELD_OUT:]
    return [(x[i:i + 50], y[i:i + 50]) for i in range(0, len(x), 50)]


class _Outlier(nn.Module):
    """A trained MLP whose hidden layer carries one extra channel of constant 10,000 that the
    output layer ignores: fp32 is unchanged, but the output layer's input, quantized per tensor
    over [0, 10,000], rounds every real feature to zero. The output layer alone in int8 breaks the
    metric; the hidden layer alone in int8 does not."""

    def __init__(self, mlp: nn.Sequential) -> None:
        super().__init__()
        first, last = mlp[0], mlp[2]
        self.hidden = nn.Linear(64, first.out_features + 1)
        self.out = nn.Linear(first.out_features + 1, 10)
        with torch.no_grad():
            self.hidden.weight.zero_()
            self.hidden.weight[:-1] = first.weight
            self.hidden.bias[:-1] = first.bias
            self.hidden.bias[-1] = 1e4
            self.out.weight.zero_()
            self.out.weight[:, :-1] = last.weight
            self.out.bias.copy_(last.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x.flatten(1))))


@functools.cache
def _mlp() -> nn.Sequential:
    torch.manual_seed(0)
    x, y = _digits()
    xs, ys = torch.from_numpy(x[:-HELD_OUT]).flatten(1), torch.from_numpy(y[:-HELD_OUT])
    net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(150):
        opt.zero_grad()
        nn.functional.cross_entropy(net(xs), ys).backward()
        opt.step()
    return net.eval()


def sensitive() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model built to be sensitive (:class:`_Outlier`) and an example input (batch 1)."""
    return _Outlier(_mlp()).eval(), (torch.from_numpy(_digits()[0][:1]),)

"""Small models for analysis tests, loadable as ``tests.analysis.tiny_models:NAME``."""

from __future__ import annotations

import torch
from torch import nn


def small_cnn(width: int = 8) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
        nn.Conv2d(width, width, 3, padding=1, groups=width), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10),
    )
    return model, torch.randn(1, 3, 32, 32)


def small_mlp() -> tuple[nn.Module, torch.Tensor]:
    """No convolution at all."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 10)), torch.randn(1, 16)


class Branchy(nn.Module):
    """Data-dependent control flow: torch.export cannot capture it, module hooks can."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return self.a(x).relu()
        return self.b(x)


def branchy() -> tuple[nn.Module, torch.Tensor]:
    return Branchy(), torch.ones(2, 16)


def not_a_module() -> int:
    return 42


class _InTrial(nn.Module):
    """Behaves in the parent process; crashes or hangs inside a tuning trial's subprocess."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import os
        import sys
        import time

        if "rooftune.tuning._worker" in " ".join(sys.argv) or sys.argv[0].endswith("_worker.py"):
            if self.mode == "crash":
                os._exit(3)
            time.sleep(3600)
        return self.fc(x)


def crashes_in_trial() -> tuple[nn.Module, torch.Tensor]:
    return _InTrial("crash"), torch.ones(1, 4)


def hangs_in_trial() -> tuple[nn.Module, torch.Tensor]:
    return _InTrial("hang"), torch.ones(1, 4)


class Residual(nn.Module):
    """torchvision's BasicBlock in small: one ReLU module called twice (after the first
    convolution and after the residual add)."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.conv1 = nn.Conv2d(width, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)) + x)
        return self.head(out)


def residual() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Residual().eval(), torch.randn(1, 3, 32, 32)


def built_outside_trials() -> tuple[nn.Module, torch.Tensor]:
    """small_cnn in the parent process; building it inside a tuning trial's subprocess raises (a
    process that runs a prepared artifact must not build the model)."""
    import sys

    if "rooftune.tuning._worker" in " ".join(sys.argv) or sys.argv[0].endswith("_worker.py"):
        raise RuntimeError("built_outside_trials was built inside a trial")
    return small_cnn()


def winograd_cnn() -> tuple[nn.Module, torch.Tensor]:
    """Two 3x3 stride-1 convolutions Winograd computes (18x18: not a multiple of its 4x4 tiles,
    batch norm to fold into the first) beside two it does not (stride 2, depthwise)."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )
    return model.eval(), torch.randn(1, 3, 18, 18)


class TwoHeads(nn.Module):
    """A dict of two outputs of different scales: class logits and a small embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.logits = nn.Linear(8, 10)
        self.embed = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.conv(x).relu().mean((2, 3))
        return {"logits": self.logits(h), "embedding": 1e-3 * self.embed(h)}


def two_heads() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return TwoHeads(), torch.randn(1, 3, 16, 16)


class WithExtras(nn.Module):
    """Outputs of other kinds beside the logits: class indices (int64), a Python int, an empty tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> dict[str, object]:
        logits = self.fc(self.conv(x).relu().mean((2, 3)))
        return {"logits": logits, "label": logits.argmax(-1), "batch": x.shape[0], "none": logits[:, :0]}


def with_extras() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return WithExtras(), torch.randn(2, 3, 16, 16)


class _Text(nn.Module):
    def forward(self, x: torch.Tensor) -> str:
        return "done"


def returns_text() -> tuple[nn.Module, torch.Tensor]:
    """Runs, but returns nothing a faster variant could be checked against."""
    return _Text(), torch.randn(1, 4)


class Keywords(nn.Module):
    """Called with a keyword argument holding a nested dict of tensors, and a float."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor, *, extra: dict | None = None, scale: float = 1.0) -> torch.Tensor:
        h = self.conv(x).relu().mean((2, 3))
        if extra is not None:
            h = h + extra["bias"] * extra["gain"][0]
        return self.fc(h) * scale


def keywords() -> tuple[nn.Module, tuple[torch.Tensor], dict]:
    torch.manual_seed(0)
    return Keywords(), (torch.randn(1, 3, 16, 16),), {"extra": {"bias": torch.randn(1, 8), "gain": [torch.tensor(2.0)]},
                                                     "scale": 0.5}


def keywords_only() -> tuple[nn.Module, dict]:
    """The same model, its example a dict of keyword arguments."""
    module, (x,), kwargs = keywords()
    return module, {"x": x, "extra": kwargs["extra"]}


def small_cnn_b4() -> tuple[nn.Module, torch.Tensor]:
    """Example inputs of batch 4: the model's own batch, which every configuration runs."""
    model, x = small_cnn()
    return model, x.repeat(4, 1, 1, 1)


def small_cnn_module() -> nn.Module:
    """A module alone: its input shape comes from the command line (--input)."""
    return small_cnn()[0]

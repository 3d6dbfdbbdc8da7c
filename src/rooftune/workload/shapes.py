"""Input-shape strings such as ``1x3x224x224``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rooftune.errors import InvalidArgument

if TYPE_CHECKING:
    import torch

    from rooftune.workload.training import TrainSpec

_SHAPE = re.compile(r"^\d+(x\d+)*$")
#: An input larger than this many elements (4 GiB of fp32) is a typo, not a workload.
MAX_ELEMENTS = 2**30


def parse_shape(text: str) -> tuple[int, ...]:
    """``"1x3x224x224"`` -> ``(1, 3, 224, 224)``; every dimension a positive integer; ``scalar``
    (or ``()``) a 0-d tensor's."""
    s = text.strip().lower().replace("×", "x").replace(",", "x")
    if s in ("scalar", "()"):
        return ()
    if not _SHAPE.match(s):
        raise InvalidArgument(
            "input shape", text, "allowed: positive integers joined by 'x', e.g. 1x3x224x224, or scalar"
        )
    if any(len(d.lstrip("0")) > 12 for d in s.split("x")):  # int() refuses 4,300 digits; no dimension nears 12
        raise InvalidArgument("input shape", text[:60] + ("..." if len(text) > 60 else ""),
                              "every dimension must be at most 12 digits")
    dims = tuple(int(d) for d in s.split("x"))
    if any(d < 1 for d in dims):
        raise InvalidArgument("input shape", text, "every dimension must be at least 1")
    return check_elements(dims, "input shape", text)


def check_elements(shape: tuple[int, ...], name: str = "input shape", shown: object = None) -> tuple[int, ...]:
    """``shape`` unless it holds more than :data:`MAX_ELEMENTS` elements (checked again once
    ``--batch`` has replaced its first dimension)."""
    n = 1
    for d in shape:
        n *= d
    if n > MAX_ELEMENTS:
        raise InvalidArgument(name, format_shape(shape) if shown is None else shown,
                              f"at most {MAX_ELEMENTS} elements (4 GiB of fp32)")
    return shape


def format_shape(shape: tuple[int, ...]) -> str:
    """``(1, 3, 224, 224)`` -> ``1x3x224x224``; a 0-d tensor's ``()`` -> ``scalar``."""
    return "x".join(str(d) for d in shape) or "scalar"


def with_batch(shape: tuple[int, ...], batch: int) -> tuple[int, ...]:
    """The shape with its leading (batch) dimension replaced."""
    return (batch, *shape[1:]) if shape else shape


def batched_like_first(shapes: Sequence[tuple[int, ...]]) -> list[bool]:
    """Which of a call's input shapes --batch resizes: those whose leading dimension is the first
    non-scalar input's (not a lookup table's, a bias's or a scalar's)."""
    lead = next((s[0] for s in shapes if s), None)
    return [bool(s) and s[0] == lead for s in shapes]


class ExampleInputs:
    """What every workload (a PyTorch :class:`rooftune.workload.Workload`, a TensorFlow one) says
    of its example inputs, whose batch is the first dimension of the first, and whether it is a
    training workload, which every process running one asks."""

    inputs: tuple[torch.Tensor, ...]
    #: A training workload's step (optimizer, loss), None for inference: always None where the
    #: framework's training is not run (a TensorFlow model: ``--train`` refuses it), and a
    #: constructor field where it is (:class:`rooftune.workload.Workload`).
    train: TrainSpec | None = None

    @property
    def batch(self) -> int:
        return int(self.inputs[0].shape[0]) if self.inputs and self.inputs[0].dim() else 1

    @property
    def input_shapes(self) -> list[tuple[int, ...]]:
        return [tuple(int(d) for d in x.shape) for x in self.inputs]

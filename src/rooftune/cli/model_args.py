"""What the commands that load a model read from their command line alike: its input shapes
(``--input``), its options (``-o``), the runtimes (``--runtime``) and the training spec
(``--train``, ``--optimizer``, ``--loss``), parsed once here for all of them. The options are
declared in :mod:`rooftune.cli.options`; the library refuses bad values with its own words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rooftune.cli.options import parse_names

if TYPE_CHECKING:
    from rooftune.workload.training import TrainSpec


@dataclass(frozen=True)
class ModelArgs:
    """The parsed values: ``shapes`` None where no ``--input`` was given, ``runtimes`` None where
    no ``--runtime`` was, ``train`` None for inference."""

    shapes: list[tuple[int, ...]] | None
    options: dict[str, Any]
    runtimes: list[str] | None
    train: TrainSpec | None


def model_args(input_shape: list[str] | None, option: list[str] | None, runtime: list[str] | str | None = None,
               train: bool = False, optimizer: str | None = None, loss: str | None = None) -> ModelArgs:
    """``--input``, ``-o``, ``--runtime`` and the training spec, in that order (the first bad one
    is the one refused)."""
    from rooftune.workload import parse_options, parse_shape
    from rooftune.workload.training import spec_from_options

    shapes = [parse_shape(s) for s in input_shape or []]
    options = parse_options(option or [])
    runtimes = parse_names(runtime, "--runtime", "eager,onnxruntime")
    return ModelArgs(shapes or None, options, runtimes, spec_from_options(train, optimizer, loss))

"""The contract every runtime follows.

A :class:`Runtime` turns a workload and a :class:`~rooftune.tuning.RunConfig` into a
:class:`Prepared` model once (export, compile, freeze: outside any timed region), which then runs
the workload's inputs and returns every tensor of its output, in order (a model with several
outputs is checked on all of them). ``available()`` says why the runtime cannot be used here (a package missing), or None.
Heavy packages are imported inside ``available``/``prepare`` only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from rooftune.tuning.config import RunConfig
    from rooftune.workload import Workload


@dataclass
class Prepared:
    """A model ready to run: ``run()`` executes one inference on the prepared inputs."""

    run: Callable[[], Any]
    #: The runtime's raw output -> every output tensor, in the order the model returns them (output_tensors).
    to_torch: Callable[[Any], tuple[torch.Tensor, ...]]
    artifact: Path | None = None
    notes: tuple[str, ...] = ()
    #: Runs other inputs (the calibration set, for the int8 guard) and returns the raw output.
    call: Callable[[tuple[torch.Tensor, ...]], Any] | None = None
    #: The precision the runtime computes in, where the configuration left the choice to it
    #: (``precision="default"``); None: the configuration's own.
    precision: str | None = None

    def output(self) -> tuple[torch.Tensor, ...]:
        return self.to_torch(self.run())

    def output_for(self, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        if self.call is None:
            raise NotImplementedError("this prepared model runs only its own inputs")
        return self.to_torch(self.call(inputs))


class Runtime(ABC):
    """One way of running a model (PyTorch eager, TorchScript, ONNX Runtime, OpenVINO ...)."""

    name: str = ""
    #: Options of this runtime's own that the search may set, with their allowed values.
    options: dict[str, tuple[Any, ...]] = {}
    #: What the runtime runs where a configuration leaves one of its options out (each of
    #: ``options`` has one, one of its allowed values); ``RunConfig.option`` reads it.
    absent: dict[str, Any] = {}
    #: Whether the runtime's kernels run on the OpenMP pool (then OMP_* settings and the tensor
    #: layout matter); ONNX Runtime and OpenVINO bring their own thread pools and layouts.
    uses_openmp: bool = True
    #: Precisions this runtime can run (int8 also needs its quantizer, see rooftune.runtimes.quantize).
    precisions: tuple[str, ...] = ("fp32",)

    def unsupported(self, config: RunConfig) -> str | None:
        """None when this runtime can run ``config`` here, else why not."""
        if config.precision not in self.precisions:
            return f"{self.name} does not run {config.precision} (it runs {', '.join(self.precisions)})"
        if config.precision == "int8":
            from rooftune.runtimes.quantize import int8_missing

            return int8_missing(self.name)
        return None

    def uses_inter_threads(self, config: RunConfig) -> bool:
        """Whether ``config.inter_threads`` changes anything for this runtime."""
        return False

    def normalize(self, config: RunConfig) -> RunConfig:
        """``config`` with the settings this runtime ignores put back to their defaults, so that
        two configurations that run identically have one identity (and are measured once)."""
        from dataclasses import replace

        known = {k: v for k, v in config.runtime_options.items() if k in self.options}
        changes: dict[str, Any] = {"runtime_options": known}
        if not self.uses_openmp:
            changes.update(omp={}, memory_format="contiguous")
        if config.set_threads and not self.uses_inter_threads(config):
            changes["inter_threads"] = 1
        return replace(config, **changes)

    def available(self) -> str | None:
        """None when usable here, else why not (e.g. "onnxruntime is not installed")."""
        return None

    def artifact_file(self, config: RunConfig, workdir: Path) -> Path | None:
        """The file :meth:`prepare` loads ``config``'s artifact from when it is in ``workdir``
        (then it builds nothing), or None for a runtime that builds its artifact every time. A
        replay puts the saved artifact there, so it runs what the study measured."""
        return None

    def artifact_ready(self, config: RunConfig, workdir: Path) -> bool:
        """Whether :meth:`prepare` would load ``config``'s artifact from ``workdir`` without the
        model's module (a process then needs only the inputs, not the model's Python code)."""
        path = self.artifact_file(config, workdir)
        return path is not None and path.exists()

    @abstractmethod
    def prepare(self, wl: Workload, config: RunConfig, workdir: Path,
                calibration: Sequence[tuple[torch.Tensor, ...]] = ()) -> Prepared:
        """Build the runnable model for ``config`` (threads are already set in this process);
        int8 is calibrated on ``calibration``."""


def without_option(config: RunConfig, key: str) -> RunConfig:
    """``config`` less its runtime option ``key``: where a runtime normalizes away an option that
    changes nothing for the configuration (one configuration, one identity)."""
    from dataclasses import replace

    return replace(config, runtime_options={k: v for k, v in config.runtime_options.items() if k != key})


def output_tensors(out: Any) -> tuple[torch.Tensor, ...]:
    """Every tensor of a model output, in order: a tensor, a numpy array (ONNX Runtime's), or any
    nesting of tuples, lists and dicts of them (torch's pytree order, the order an ONNX export
    gives its outputs; a dict or list subclass pytree does not know is opened too). Floating
    tensors come as float32, integer and bool ones (indices, counts, masks) keep their type; a
    Python or numpy number (a count, a score) comes as a 0-d tensor, as TorchScript, ONNX Runtime
    and OpenVINO return it. Other leaves (None, strings) carry nothing to compare and are left out."""
    # the common cases first, on every call of a tuned model: one tensor (the torch runtimes, in
    # inference mode), a flat list of arrays (ONNX Runtime, OpenVINO)
    if isinstance(out, torch.Tensor):
        return (_as_compared(out),)
    if isinstance(out, list) and out and all(type(x) is np.ndarray for x in out):
        return tuple(_as_compared(torch.from_numpy(np.ascontiguousarray(x))) for x in out)
    tensors = _tensors_of(out)
    if not tensors:
        raise TypeError(f"model output of type {type(out).__name__} has no tensor")
    return tuple(tensors)


def _as_compared(t: torch.Tensor) -> torch.Tensor:
    return t.float() if t.is_floating_point() else t


def _is_number(leaf: Any) -> bool:
    return isinstance(leaf, (bool, int, float, np.generic)) and not isinstance(leaf, (np.str_, np.bytes_, np.void))


def _leaf_tensor(leaf: Any) -> torch.Tensor | None:
    if isinstance(leaf, torch.Tensor):
        return _as_compared(leaf.detach())
    if isinstance(leaf, np.ndarray):
        return _as_compared(torch.from_numpy(np.ascontiguousarray(leaf)))
    if _is_number(leaf):
        return _as_compared(torch.as_tensor(np.asarray(leaf)))
    return None


def _tensors_of(out: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_leaves

    tensors = []
    for leaf in tree_leaves(out):
        t = _leaf_tensor(leaf)
        if t is not None:
            tensors.append(t)
        else:
            opened = _opened(leaf)
            if opened is not None:
                tensors += _tensors_of(opened)
    return tensors


def _opened(leaf: Any) -> list[Any] | None:
    """The parts of a container pytree does not know (a dataclass, a dict or list subclass), or None."""
    import dataclasses
    from collections.abc import Mapping

    if dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
        return [getattr(leaf, f.name) for f in dataclasses.fields(leaf)]
    if isinstance(leaf, Mapping):
        return list(leaf.values())
    if isinstance(leaf, (list, tuple)):
        return list(leaf)
    return None


def like_output(template: Any, tensors: Sequence[torch.Tensor]) -> Any:
    """``tensors`` (as :func:`output_tensors` gives them) put back in the structure of
    ``template``, a model's own output (its tensors may be empty ones of the same dtype): a tensor
    for a model that returns one, a dict for one that returns a dict, a dataclass as that
    dataclass; each tensor in its template's dtype, a number as a number of its type. Leaves of
    the template that are neither (None) stay as they are; when the counts differ, the tensors
    are returned as a tuple."""
    if isinstance(template, torch.Tensor) and len(tensors) == 1:
        return _like(template, tensors[0])
    left = iter(tensors)
    try:
        out = _put(template, left)
    except StopIteration:  # fewer tensors than the template holds
        return tuple(tensors)
    return tuple(tensors) if next(left, None) is not None else out


def _put(template: Any, tensors: Iterator[torch.Tensor]) -> Any:
    import dataclasses
    from collections.abc import Mapping

    from torch.utils._pytree import tree_flatten, tree_unflatten

    leaves, spec = tree_flatten(template)
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, (torch.Tensor, np.ndarray)) or _is_number(leaf):
            leaves[i] = _like(leaf, next(tensors))
        elif _opened(leaf) is None:
            continue
        # (a dataclass class itself, never an instance, has no parts: _opened gave None for it)
        elif dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
            leaves[i] = dataclasses.replace(leaf, **{f.name: _put(getattr(leaf, f.name), tensors)
                                                     for f in dataclasses.fields(leaf) if f.init})
        elif isinstance(leaf, Mapping):
            leaves[i] = _rebuilt(leaf, {k: _put(v, tensors) for k, v in leaf.items()})
        else:
            leaves[i] = _rebuilt(leaf, [_put(v, tensors) for v in leaf])
    return tree_unflatten(leaves, spec)


def _rebuilt(leaf: Any, parts: Any) -> Any:
    try:
        return type(leaf)(parts)
    except Exception:  # a container type that cannot be built from its parts: a plain one
        return parts


def _like(leaf: Any, t: torch.Tensor) -> Any:
    if isinstance(leaf, torch.Tensor):
        return t if t.dtype == leaf.dtype else t.to(leaf.dtype)
    if isinstance(leaf, (bool, int, float)) and t.numel() == 1:
        return type(leaf)(t.item())
    return t


#: Artifact files whose weights lie beside them in a .bin of the same name: an OpenVINO IR and
#: an ncnn model.
WEIGHTS_BESIDE = (".xml", ".param")


def weights_of(artifact: Path) -> Path | None:
    """The weights file that goes with ``artifact`` (copied and placed with it), or None."""
    return artifact.with_suffix(".bin") if artifact.suffix in WEIGHTS_BESIDE else None


def missing(package: str) -> str | None:
    """None when ``package`` imports, else the note that removes a runtime from the space."""
    import importlib.util

    if importlib.util.find_spec(package) is None:
        return f"{package} is not installed (pip install {package})"
    return None

"""The contract every runtime follows.

A :class:`Runtime` turns a workload and a :class:`~rooftune.runconfig.RunConfig` into a
:class:`Prepared` model once (export, compile, freeze: outside any timed region), which then runs
the workload's inputs and returns every tensor of its output, in order (a model with several
outputs is checked on all of them). ``available()`` says why the runtime cannot be used here (a package missing), or None.
Heavy packages are imported inside ``available``/``prepare`` only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rooftune.runtime_options import RUNTIME_OPTIONS

# named here too, where the runtimes are written against them: whether an optional package is
# installed, and a model output's tensors (the workload's: an output is one whatever runs the model)
from rooftune.runtimes.packages import missing
from rooftune.workload.outputs import like_output, output_tensors

if TYPE_CHECKING:
    from rooftune.runconfig import RunConfig
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
    #: A training configuration's step (:class:`rooftune.workload.training.TrainStep`), which
    #: ``run`` steps; None for inference.
    step: Any = None
    #: Another ``run`` that may be called while this one runs (a runtime that needs one infer
    #: request per concurrent call, OpenVINO's streams); None: ``run`` itself may be.
    fork: Callable[[], Callable[[], Any]] | None = None
    #: The concurrent calls the runtime recommends (OpenVINO's optimal number of infer requests);
    #: None: one.
    slots: int | None = None

    def output(self) -> tuple[torch.Tensor, ...]:
        return self.to_torch(self.run())

    def output_for(self, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        if self.call is None:
            raise NotImplementedError("this prepared model runs only its own inputs")
        return self.to_torch(self.call(inputs))


class Runtime(ABC):
    """One way of running a model (PyTorch eager, TorchScript, ONNX Runtime, OpenVINO ...)."""

    #: Its name in a configuration; a name declared in :data:`rooftune.runtime_options.RUNTIME_OPTIONS`
    #: gives the subclass its ``options``, ``absent``, ``train_options`` and ``peer_options`` from there
    #: (:meth:`__init_subclass__`), the one place a configuration's check reads them too.
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
    #: The frameworks whose models this runtime runs (a workload's ``framework``; PyTorch's by default).
    frameworks: tuple[str, ...] = ("torch",)
    #: Options a training step's configuration may set besides ``options`` (the optimizer's
    #: implementation), with their allowed values; empty for a runtime that cannot train.
    train_options: dict[str, tuple[Any, ...]] = {}
    peer_options: dict[str, tuple[Any, ...]] = {}
    #: Precisions this runtime trains in (bf16: the forward pass under autocast, the weights fp32).
    train_precisions: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = RUNTIME_OPTIONS.get(cls.__dict__.get("name", ""))
        if declared is not None:
            cls.options = dict(declared.options)
            cls.absent = dict(declared.absent)
            cls.train_options = dict(declared.train_options)
            cls.peer_options = dict(declared.peer_options)

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

        known = {k: v for k, v in config.runtime_options.items() if k in self.options or k in self.train_options
                 or (k in self.peer_options and v != self.absent.get(k))}
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

    def prepare_train(self, wl: Workload, config: RunConfig, workdir: Path) -> Prepared:
        """Build ``config``'s training step of a training workload (``wl.train``): ``run()`` runs
        one step, ``step`` is the TrainStep (threads are already set in this process)."""
        raise ValueError(f"{self.name} does not run a training step (eager and compile do)")

    def unsupported_train(self, config: RunConfig) -> str | None:
        """None when this runtime can run ``config``'s training step here, else why not."""
        if not self.train_options:
            return f"{self.name} does not run a training step (eager and compile do)"
        if config.precision not in self.train_precisions:
            return f"{self.name} does not train in {config.precision} (it trains in {', '.join(self.train_precisions)})"
        return None

    @abstractmethod
    def prepare(self, wl: Workload, config: RunConfig, workdir: Path,
                calibration: Sequence[tuple[torch.Tensor, ...]] = (), evaluation: Mapping[str, Any] | None = None) -> Prepared:
        """Build the runnable model for ``config`` (threads are already set in this process);
        int8 is calibrated on ``calibration``. ``evaluation``: the evaluation part of the user's
        data as a study writes it (its batches, the fp32 outputs, the labels, the metric and the
        budget), for a quantizer that validates on it itself (NNCF's accuracy control)."""


def without_option(config: RunConfig, key: str) -> RunConfig:
    """``config`` less its runtime option ``key``: where a runtime normalizes away an option that
    changes nothing for the configuration (one configuration, one identity)."""
    from dataclasses import replace

    return replace(config, runtime_options={k: v for k, v in config.runtime_options.items() if k != key})


#: Artifact files whose weights lie beside them in a .bin of the same name: an OpenVINO IR and
#: an ncnn model.
WEIGHTS_BESIDE = (".xml", ".param")


def weights_of(artifact: Path) -> Path | None:
    """The weights file that goes with ``artifact`` (copied and placed with it), or None."""
    return artifact.with_suffix(".bin") if artifact.suffix in WEIGHTS_BESIDE else None


__all__ = ["WEIGHTS_BESIDE", "Prepared", "Runtime", "like_output", "missing", "output_tensors",
           "weights_of", "without_option"]

"""PyTorch's own ways of running a model: eager, TorchScript (frozen, optimize_for_inference),
torch.compile (inductor)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rooftune.runtimes.base import Prepared, Runtime
from rooftune.workload.outputs import output_tensors

if TYPE_CHECKING:
    from rooftune.runconfig import RunConfig
    from rooftune.workload import Workload


def torch_inputs(wl: Workload, config: RunConfig) -> tuple[torch.Tensor, ...]:
    """The workload's inputs in the config's memory format and precision."""
    return config_inputs(wl.inputs, config)


def config_inputs(inputs: Sequence[torch.Tensor], config: RunConfig) -> tuple[torch.Tensor, ...]:
    """``inputs`` in the config's memory format and precision."""
    out = []
    for x in inputs:
        if config.memory_format == "channels_last" and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        if config.precision == "bf16" and x.is_floating_point():
            x = x.to(torch.bfloat16)
        out.append(x)
    return tuple(out)


def torch_module(wl: Workload, config: RunConfig) -> torch.nn.Module:
    from rooftune.workload import eval_mode

    m = eval_mode(wl.module)
    if config.memory_format == "channels_last":
        m = m.to(memory_format=torch.channels_last)
    if config.precision == "bf16":
        m = m.to(torch.bfloat16)
    return m


def _caller(m: Any, config: RunConfig) -> Any:
    """Runs ``m`` on other inputs, put in the config's layout and precision first."""

    def call(inputs: tuple[torch.Tensor, ...]) -> Any:
        with torch.inference_mode():
            return m(*config_inputs(inputs, config))

    return call


def _module(wl: Workload, config: RunConfig, calibration: Sequence[tuple[torch.Tensor, ...]],
            lower: bool = True) -> torch.nn.Module:
    """The model in the config's layout and precision; int8 through PT2E and the x86 quantizer
    (lowered to oneDNN's int8 kernels unless ``lower`` is False, see :func:`pt2e_int8`), the
    config's kept layers left in fp32."""
    m = torch_module(wl, config)
    if config.precision == "int8":
        from rooftune.runtimes.quantize import pt2e_int8

        m = pt2e_int8(m, torch_inputs(wl, config), calibration or [wl.inputs], lower=lower, keep=config.keep)
    return m


def train_prepared(wl: Workload, config: RunConfig, compile_mode: str | None = None) -> Prepared:
    """``config``'s training step of ``wl``: the module in the config's layout (and compiled by
    torch.compile in ``compile_mode`` where given), bf16 as autocast over the forward pass and the
    loss (the weights and their update stay fp32), the optimizer in the config's implementation."""
    from dataclasses import replace

    from rooftune.workload.training import TrainSpec, TrainStep

    m: torch.nn.Module = wl.module
    xs = tuple(wl.inputs)
    if config.memory_format == "channels_last":
        m = m.to(memory_format=torch.channels_last)
        xs = tuple(x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x for x in xs)
    if compile_mode is not None:
        m = torch.compile(m, mode=compile_mode)
    spec = replace(wl.train or TrainSpec(), impl=config.option("optimizer") or "default")
    step = TrainStep(m, xs, spec, name=wl.name, autocast=torch.bfloat16 if config.precision == "bf16" else None)
    return Prepared(step.step, lambda loss: (torch.tensor([loss]),), step=step)


class Eager(Runtime):
    """PyTorch eager; int8 is the PT2E-quantized graph lowered to oneDNN's int8 kernels."""

    name = "eager"
    precisions = ("fp32", "bf16", "int8")
    train_precisions = ("fp32", "bf16")

    def prepare_train(self, wl: Workload, config: RunConfig, workdir: Path) -> Prepared:
        return train_prepared(wl, config)

    def prepare(self, wl: Workload, config: RunConfig, workdir: Path,
                calibration: Sequence[tuple[torch.Tensor, ...]] = (), evaluation: Mapping[str, Any] | None = None) -> Prepared:
        m = _module(wl, config, calibration)
        xs = torch_inputs(wl, config)

        def run() -> Any:
            with torch.inference_mode():
                return m(*xs)

        return Prepared(run, output_tensors, call=_caller(m, config))


class TorchScript(Runtime):
    """torch.jit.trace, then freeze and optimize_for_inference (folds batch norm into convs,
    pre-packs weights for oneDNN)."""

    name = "torchscript"
    precisions = ("fp32", "bf16")

    def prepare(self, wl: Workload, config: RunConfig, workdir: Path,
                calibration: Sequence[tuple[torch.Tensor, ...]] = (), evaluation: Mapping[str, Any] | None = None) -> Prepared:
        m = torch_module(wl, config)
        xs = torch_inputs(wl, config)
        with torch.no_grad():
            # strict=False: a model that returns a dict or a list of tensors traces too
            traced = torch.jit.trace(m, xs, check_trace=False, strict=False)
            frozen = torch.jit.optimize_for_inference(torch.jit.freeze(traced))
        path = config.artifact_path(workdir, "model.torchscript.pt")
        torch.jit.save(frozen, str(path))

        def run() -> Any:
            with torch.inference_mode():
                return frozen(*xs)

        return Prepared(run, output_tensors, artifact=path, call=_caller(frozen, config))


class Compile(Runtime):
    """torch.compile with inductor: fuses elementwise ops into their producers, plans memory."""

    name = "compile"
    precisions = ("fp32", "bf16", "int8")
    train_precisions = ("fp32", "bf16")

    def prepare_train(self, wl: Workload, config: RunConfig, workdir: Path) -> Prepared:
        return train_prepared(wl, config, compile_mode=config.option("mode"))

    def available(self) -> str | None:
        import shutil

        if shutil.which("cc") is None and shutil.which("gcc") is None:
            return "torch.compile needs a C compiler (apt-get install gcc)"
        return None

    def prepare(self, wl: Workload, config: RunConfig, workdir: Path,
                calibration: Sequence[tuple[torch.Tensor, ...]] = (), evaluation: Mapping[str, Any] | None = None) -> Prepared:
        import torch._inductor.config as inductor_config

        m = _module(wl, config, calibration, lower=False)
        xs = torch_inputs(wl, config)
        compiled = torch.compile(m, mode=config.option("mode"))
        # Freezing (inductor compiles on the first call, here, outside any timed region): weights
        # become constants, batch norm is folded into the convolutions, convolution and linear
        # weights are pre-packed for oneDNN; inductor's int8 lowering requires it.
        with inductor_config.patch(freezing=True), torch.inference_mode():
            compiled(*xs)

        def run() -> Any:
            with torch.inference_mode():
                return compiled(*xs)

        return Prepared(run, output_tensors, call=_caller(compiled, config))

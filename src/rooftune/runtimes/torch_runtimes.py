"""PyTorch's own ways of running a model: eager, TorchScript (frozen, optimize_for_inference),
torch.compile (inductor)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rooftune.runtimes.base import Prepared, Runtime, first_tensor

if TYPE_CHECKING:
    from rooftune.tuning.config import RunConfig
    from rooftune.workload import Workload


def torch_inputs(wl: Workload, config: RunConfig) -> tuple[torch.Tensor, ...]:
    """The workload's inputs in the config's memory format and precision."""
    out = []
    for x in wl.inputs:
        if config.memory_format == "channels_last" and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        if config.precision == "bf16" and x.is_floating_point():
            x = x.to(torch.bfloat16)
        out.append(x)
    return tuple(out)


def torch_module(wl: Workload, config: RunConfig) -> torch.nn.Module:
    m = wl.module.eval()
    if config.memory_format == "channels_last":
        m = m.to(memory_format=torch.channels_last)
    if config.precision == "bf16":
        m = m.to(torch.bfloat16)
    return m


def _as_float(out: Any) -> torch.Tensor:
    return first_tensor(out).float()


class Eager(Runtime):
    name = "eager"

    def prepare(self, wl: Workload, config: RunConfig, workdir: Path) -> Prepared:
        m = torch_module(wl, config)
        xs = torch_inputs(wl, config)

        def run() -> Any:
            with torch.inference_mode():
                return m(*xs)

        return Prepared(run, _as_float)


class TorchScript(Runtime):
    """torch.jit.trace, then freeze and optimize_for_inference (folds batch norm into convs,
    pre-packs weights for oneDNN)."""

    name = "torchscript"

    def prepare(self, wl: Workload, config: RunConfig, workdir: Path) -> Prepared:
        m = torch_module(wl, config)
        xs = torch_inputs(wl, config)
        with torch.no_grad():
            traced = torch.jit.trace(m, xs, check_trace=False)
            frozen = torch.jit.optimize_for_inference(torch.jit.freeze(traced))
        path = workdir / "model.torchscript.pt"
        torch.jit.save(frozen, str(path))

        def run() -> Any:
            with torch.inference_mode():
                return frozen(*xs)

        return Prepared(run, _as_float, artifact=path)


class Compile(Runtime):
    """torch.compile with inductor: fuses elementwise ops into their producers, plans memory."""

    name = "compile"
    options = {"mode": ("default", "max-autotune-no-cudagraphs")}

    def available(self) -> str | None:
        import shutil

        if shutil.which("cc") is None and shutil.which("gcc") is None:
            return "torch.compile needs a C compiler (apt-get install gcc)"
        return None

    def prepare(self, wl: Workload, config: RunConfig, workdir: Path) -> Prepared:
        m = torch_module(wl, config)
        xs = torch_inputs(wl, config)
        compiled = torch.compile(m, mode=config.option("mode", "default"))
        with torch.inference_mode():
            compiled(*xs)  # compiles here, outside any timed region

        def run() -> Any:
            with torch.inference_mode():
                return compiled(*xs)

        return Prepared(run, _as_float)

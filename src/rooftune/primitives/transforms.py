"""Layout and precision transforms between primitives, timed like primitives so that a selector
can weigh a faster primitive against the conversion it needs (NCHW <-> NHWC, fp32 <-> int8)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Transform:
    """Converts an activation of logical shape N x C x H x W from one (layout, precision) to another."""

    name: str
    src: tuple[str, str]
    dst: tuple[str, str]
    description: str

    def prepare(self, shape: tuple[int, ...]) -> Callable[[torch.Tensor], torch.Tensor]:
        if self.name == "nchw-to-nhwc":
            return lambda x: x.contiguous(memory_format=torch.channels_last)
        if self.name == "nhwc-to-nchw":
            return lambda x: x.contiguous()
        if self.name == "fp32-to-int8":
            from rooftune.primitives.quantized import quantized_tensors

            with quantized_tensors():  # (torch's one deprecation warning is spent here, not when timed)
                torch.quantize_per_tensor(torch.zeros(1), 0.05, 128, torch.quint8)
            return lambda x: torch.quantize_per_tensor(x, 0.05, 128, torch.quint8)
        if self.name == "int8-to-fp32":
            return lambda x: x.dequantize()
        raise KeyError(self.name)

    def example(self, shape: tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
        """An input in this transform's source layout and precision."""
        x = torch.randn(shape, generator=generator)
        if self.src[0] == "NHWC":
            x = x.contiguous(memory_format=torch.channels_last)
        if self.src[1] == "int8":
            from rooftune.primitives.quantized import quantized_tensors

            with quantized_tensors():
                x = torch.quantize_per_tensor(x, 0.05, 128, torch.quint8)
        return x


TRANSFORMS: dict[str, Transform] = {t.name: t for t in (
    Transform("nchw-to-nhwc", ("NCHW", "fp32"), ("NHWC", "fp32"), "reorder to channels_last"),
    Transform("nhwc-to-nchw", ("NHWC", "fp32"), ("NCHW", "fp32"), "reorder to contiguous NCHW"),
    Transform("fp32-to-int8", ("NCHW", "fp32"), ("NCHW", "int8"), "quantize_per_tensor to quint8"),
    Transform("int8-to-fp32", ("NCHW", "int8"), ("NCHW", "fp32"), "dequantize to fp32"),
)}


def transform_between(src: tuple[str, str], dst: tuple[str, str]) -> list[Transform]:
    """The transforms that take an activation from ``src`` to ``dst`` (empty when they match)."""
    steps: list[Transform] = []
    layout, precision = src
    if precision != dst[1]:
        if layout != "NCHW":
            steps.append(TRANSFORMS["nhwc-to-nchw"])
            layout = "NCHW"
        steps.append(TRANSFORMS["fp32-to-int8" if dst[1] == "int8" else "int8-to-fp32"])
    if layout != dst[0]:
        steps.append(TRANSFORMS["nchw-to-nhwc" if dst[0] == "NHWC" else "nhwc-to-nchw"])
    return steps

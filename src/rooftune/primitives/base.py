"""The contract of a convolution primitive.

    p = get_primitive("winograd-f4x4")
    p.supports(spec)              -> True, or the reason it cannot run this spec
    k = p.prepare(spec, w, b)     weight transforms and packing, outside any timed region
    y = k.run(x)                  x in p.in_layout, y in p.out_layout (logical shape N x K x P x Q)

Layouts are ``NCHW`` (contiguous) and ``NHWC`` (torch's channels_last memory format: same logical
shape, channels innermost in memory). Primitives of precision ``int8`` take and return fp32 and
count their quantization and dequantization (see :mod:`rooftune.primitives.quantized`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rooftune.primitives.spec import ConvSpec

LAYOUTS = ("NCHW", "NHWC")


def to_layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    return x.contiguous(memory_format=torch.channels_last) if layout == "NHWC" else x.contiguous()


def in_layout(x: torch.Tensor, layout: str) -> bool:
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    return x.is_contiguous(memory_format=fmt)


@dataclass
class Kernel:
    """A primitive prepared for one spec and one set of weights."""

    spec: ConvSpec
    run: Callable[[torch.Tensor], torch.Tensor]


class Primitive(ABC):
    """One implementation of convolution, backed by a kernel library."""

    name: str = ""
    library: str = ""
    precision: str = "fp32"
    in_layout: str = "NCHW"
    out_layout: str = "NCHW"
    description: str = ""
    #: The threads it runs on: OpenMP's (ATen, oneDNN, MKL), or a pool of the library's own,
    #: which costs a switch inside a network of OpenMP layers (rooftune.selection.pools).
    thread_pool: str = "openmp"
    #: A fast algorithm whose prepared weights are a transform of the layer's (Winograd's 16 or 36
    #: values per 3x3 filter, FFT's per frequency): a selection that uses it is checked inside the
    #: network, its profiled times being the least sure (rooftune.selection.pools).
    fast_algorithm: bool = False

    def available(self) -> str | None:
        """None when the library is usable in this build, else why not."""
        return None

    def supports(self, spec: ConvSpec) -> bool | str:
        """True, or a one-line reason why this primitive cannot compute ``spec``."""
        why = self.available()
        if why:
            return why
        if spec.dtype != self.precision:
            return f"runs {self.precision}, the spec is {spec.dtype}"
        return self._supports(spec)

    def _supports(self, spec: ConvSpec) -> bool | str:
        return True

    @abstractmethod
    def prepare(self, spec: ConvSpec, weight: torch.Tensor, bias: torch.Tensor | None) -> Kernel:
        """Transform and pack the weights for ``spec``; the returned kernel runs inputs."""

    def __repr__(self) -> str:
        return f"<{self.name} ({self.library}, {self.precision}, {self.in_layout}->{self.out_layout})>"


def needs(spec: ConvSpec, *, groups1: bool = False, stride1: bool = False, dilation1: bool = False,
          kernel: tuple[int, int] | None = None) -> bool | str:
    """The common restrictions, as reasons."""
    if groups1 and spec.groups != 1:
        return f"grouped convolution (groups={spec.groups}) not supported"
    if stride1 and spec.stride != (1, 1):
        return f"stride {spec.stride} not supported (stride 1 only)"
    if dilation1 and spec.dilation != (1, 1):
        return f"dilation {spec.dilation} not supported (dilation 1 only)"
    if kernel and (spec.R, spec.S) != kernel:
        return f"{spec.R}x{spec.S} kernel not supported ({kernel[0]}x{kernel[1]} only)"
    return True

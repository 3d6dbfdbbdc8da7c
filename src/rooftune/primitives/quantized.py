"""int8 convolution through PyTorch's quantized engines (fbgemm, oneDNN, x86): weights per-channel
symmetric int8, activations affine uint8 with ranges calibrated once at prepare on inputs drawn
like the spec's. The primitive takes and returns fp32: quantize and dequantize are counted in
its time, so it can stand in for an fp32 layer as it is (NCHW in, NHWC out: the quantized kernels
write channels_last)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from rooftune.primitives.base import Kernel, Primitive
from rooftune.primitives.spec import ConvSpec

#: The deprecation torch 2.15 attaches to quantized tensors: these primitives exist to time the
#: quantized engines, which take only such tensors. torch warns once per process; that one warning
#: is consumed at prepare (outside any timed region) by :func:`quantized_tensors`.
_DEPRECATION = r"torch\.quantize_per_tensor, torch\.quantize_per_channel and other quantized tensor creation"


@contextlib.contextmanager
def quantized_tensors() -> Iterator[None]:
    """Creates quantized tensors without torch's deprecation warning (see _DEPRECATION)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_DEPRECATION, category=UserWarning)
        yield


def _affine_u8(lo: float, hi: float) -> tuple[float, int]:
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = max((hi - lo) / 255.0, 1e-8)
    return scale, int(round(-lo / scale))


class QuantizedEngine(Primitive):
    """torch.ao.nn.quantized.Conv2d on one quantized engine, with quantize/dequantize counted."""

    library = "PyTorch quantized"
    precision = "int8"
    #: the quantized kernels write channels_last (NHWC) and dequantize keeps it
    out_layout = "NHWC"

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.name = f"int8-{engine}"
        self.library = {"fbgemm": "FBGEMM", "onednn": "oneDNN int8", "x86": "x86 (FBGEMM + oneDNN)"}.get(engine, engine)
        self.description = f"int8 convolution on the {engine} quantized engine (quantize/dequantize counted)"

    def available(self) -> str | None:
        if self.engine not in torch.backends.quantized.supported_engines:
            return f"quantized engine {self.engine} not in this build ({', '.join(torch.backends.quantized.supported_engines)})"
        return None

    def prepare(self, spec: ConvSpec, weight: torch.Tensor, bias: torch.Tensor | None) -> Kernel:
        from torch.ao.nn.quantized import Conv2d as QConv2d

        # Activation ranges from a few calibration inputs drawn like the spec's (standard normal),
        # widened by a quarter so that unseen inputs of the same distribution are rarely clipped.
        g = torch.Generator().manual_seed(1)
        lo_in = hi_in = lo_out = hi_out = 0.0
        for _ in range(4):
            sample = torch.randn(spec.input_shape, generator=g)
            ref = F.conv2d(sample, weight, bias, spec.stride, spec.padding, spec.dilation, spec.groups)
            lo_in, hi_in = min(lo_in, float(sample.min())), max(hi_in, float(sample.max()))
            lo_out, hi_out = min(lo_out, float(ref.min())), max(hi_out, float(ref.max()))
        s_in, z_in = _affine_u8(1.25 * lo_in, 1.25 * hi_in)
        s_out, z_out = _affine_u8(1.25 * lo_out, 1.25 * hi_out)
        amax = weight.detach().abs().amax(dim=(1, 2, 3)).clamp_min(1e-8)
        with quantized_tensors():
            wq = torch.quantize_per_channel(weight.detach(), amax / 127.0, torch.zeros(spec.K, dtype=torch.long), 0,
                                            torch.qint8)
        previous = torch.backends.quantized.engine
        torch.backends.quantized.engine = self.engine
        try:
            conv = QConv2d(spec.C, spec.K, (spec.R, spec.S), stride=spec.stride, padding=spec.padding,
                           dilation=spec.dilation, groups=spec.groups, bias=bias is not None)
            conv.set_weight_bias(wq, bias.detach() if bias is not None else None)  # prepacked for this engine
            conv.scale, conv.zero_point = s_out, z_out
        finally:
            torch.backends.quantized.engine = previous
        engine = self.engine

        def run(x: torch.Tensor) -> torch.Tensor:
            torch.backends.quantized.engine = engine
            xq = torch.quantize_per_tensor(x, s_in, z_in, torch.quint8)
            return conv(xq).dequantize()

        return Kernel(spec, run)

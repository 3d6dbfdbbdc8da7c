"""The registry of convolution primitives: a name maps to the class (or factory) that makes it.

A new primitive is one class plus one line in :data:`PRIMITIVES`.
"""

from __future__ import annotations

from collections.abc import Callable

from rooftune.errors import InvalidArgument
from rooftune.primitives.base import Primitive
from rooftune.primitives.onnx_mlas import OnnxRuntimeMLAS
from rooftune.primitives.quantized import QuantizedEngine
from rooftune.primitives.torch_conv import (
    NNPACK,
    ATenNative,
    Gemm1x1,
    Im2colGemm,
    OneDNNDirect,
    OneDNNPrepacked,
    PyTorchDefault,
)
from rooftune.primitives.transforms_domain import FFTConv, Winograd

PRIMITIVES: dict[str, Callable[[], Primitive]] = {
    "pytorch-default": PyTorchDefault,
    "onednn-nchw": lambda: OneDNNDirect("NCHW"),
    "onednn-nhwc": lambda: OneDNNDirect("NHWC"),
    "onednn-prepacked-nhwc": OneDNNPrepacked,
    "aten-im2col-gemm": ATenNative,
    "nnpack": NNPACK,
    "im2col-gemm": Im2colGemm,
    "gemm-1x1-nchw": lambda: Gemm1x1("NCHW"),
    "gemm-1x1-nhwc": lambda: Gemm1x1("NHWC"),
    "winograd-f2x2": lambda: Winograd(2),
    "winograd-f4x4": lambda: Winograd(4),
    "fft": FFTConv,
    "int8-fbgemm": lambda: QuantizedEngine("fbgemm"),
    "int8-onednn": lambda: QuantizedEngine("onednn"),
    "int8-x86": lambda: QuantizedEngine("x86"),
    "onnxruntime-mlas": OnnxRuntimeMLAS,
}


def get_primitive(name: str) -> Primitive:
    """A new instance of the primitive ``name``; an unknown name lists the valid ones."""
    if name not in PRIMITIVES:
        raise InvalidArgument("primitive", name, f"allowed {', '.join(PRIMITIVES)}")
    return PRIMITIVES[name]()


def all_primitives(names: list[str] | None = None) -> list[Primitive]:
    """An instance of each of ``names`` (default: every registered primitive)."""
    return [get_primitive(n) for n in (names or list(PRIMITIVES))]

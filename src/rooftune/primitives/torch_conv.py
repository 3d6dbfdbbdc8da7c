"""Convolution through PyTorch's own kernel libraries: oneDNN (direct and prepacked), ATen's
native im2col + BLAS path, NNPACK, and explicit im2col/1x1 GEMMs on MKL's sgemm."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rooftune.primitives.base import Kernel, Primitive, needs, to_layout
from rooftune.primitives.spec import ConvSpec


class PyTorchDefault(Primitive):
    """What ``F.conv2d`` does with an NCHW tensor (the framework's own choice): the baseline."""

    name = "pytorch-default"
    library = "PyTorch (dispatcher's choice)"
    description = "F.conv2d as a user calls it"

    def prepare(self, spec: ConvSpec, weight: torch.Tensor, bias: torch.Tensor | None) -> Kernel:
        st, pd, dl, g = spec.stride, spec.padding, spec.dilation, spec.groups

        def run(x: torch.Tensor) -> torch.Tensor:
            return F.conv2d(x, weight, bias, st, pd, dl, g)

        return Kernel(spec, run)


class OneDNNDirect(Primitive):
    """aten::mkldnn_convolution: oneDNN's convolution (it reorders the weights per call, as
    PyTorch's eager path does)."""

    library = "oneDNN"

    def __init__(self, layout: str = "NCHW") -> None:
        self.in_layout = self.out_layout = layout
        self.name = f"onednn-{layout.lower()}"
        self.description = f"oneDNN convolution on {layout} activations"

    def available(self) -> str | None:
        return None if torch.backends.mkldnn.is_available() else "this PyTorch build has no oneDNN"

    def prepare(self, spec: ConvSpec, weight: torch.Tensor, bias: torch.Tensor | None) -> Kernel:
        w = to_layout(weight, self.in_layout)
        st, pd, dl, g = list(spec.stride), list(spec.padding), list(spec.dilation), spec.groups

        def run(x: torch.Tensor) -> torch.Tensor:
            return torch.mkldnn_convolution(x, w, bias, pd, st, dl, g)

        return Kernel(spec, run)


class OneDNNPrepacked(Primitive):
    """oneDNN with the weights reordered once into its blocked format (what torch.compile's
    freezing does): mkldnn._convolution_pointwise on NHWC activations."""

    name = "onednn-prepacked-nhwc"
    library = "oneDNN"
    in_layout = out_layout = "NHWC"
    description = "oneDNN convolution, weights prepacked once"

    def available(self) -> str | None:
        if not torch.backends.mkldnn.is_available():
            return "this PyTorch build has no oneDNN"
        if not hasattr(torch.ops.mkldnn, "_convolution_pointwise"):
            return "this PyTorch build has no mkldnn._convolution_pointwise"
        return None

    def prepare(self, spec: ConvSpec, weight: torch.Tensor, bias: torch.Tensor | None) -> Kernel:
        st, pd, dl, g = list(spec.stride), list(spec.padding), list(spec.dilation), spec.groups
        # torch's stub leaves out the op's last parameter, input_size (the aten schema has it)
        packed = torch._C._nn.mkldnn_reorder_conv2d_weight(  # type: ignore[call-arg]
            weight.contiguous().to_mkldnn(), pd, st, dl, g, list(spec.input_shape))
        op = torch.ops.mkldnn._convolution_pointwise.default

        def run(x: torch.Tensor) -> torch.Tensor:
            return op(x, packed, bias, pd, st, dl, g, "none", [], "")

        return Kernel(spec, run)


class ATenNative(Primitive):
    """ATen's own convolution with oneDNN and NNPACK switched off: im2col (unfold) into a buffer,
    then MKL's sgemm (slow_conv2d), or ATen's depthwise kernel."""

    name = "aten-im2col-gemm"
    library = "ATen + MKL"
    description = "ATen native convolution (mkldnn disabled)"

    def prepare(self, spec: ConvSpec, weight: torch.Tensor, bias: torch.Tensor | None) -> Kernel:
        st, pd, dl, g = spec.stride, spec.padding, spec.dilation, spec.groups

        def run(x: torch.Tensor) -> torch.Tensor:
            # Only the switch itself: torch.backends.mkldnn.flags() also sets allow_tf32 (True by
            # default), which torch 2.15 warns about on every CPU-only build.
            was = torch._C._get_mkldnn_enabled()
            torch._C._set_mkldnn_enabled(False)
            try:
                with torch.backends.nnpack.flags(enabled=False):
                    return F.conv2d(x, weight, bias, st, pd, dl, g)
            finally:
                torch._C._set_mkldnn_enabled(was)

        return Kernel(spec, run)


class NNPACK(Primitive):
    """NNPACK's spatial convolution (it picks its own algorithm: implicit GEMM, Winograd or FFT)."""

    name = "nnpack"
    library = "NNPACK"
    thread_pool = "pthreadpool"
    description = "torch._nnpack_spatial_convolution"

    def available(self) -> str | None:
        return None if torch._nnpack_available() else "this PyTorch build has no NNPACK"

    def _supports(self, spec: ConvSpec) -> bool | str:
        return needs(spec, groups1=True, dilation1=True)

    def prepare(self, spec: ConvSpec, weight: torch.Tensor, bias: torch.Tensor | None) -> Kernel:
        pd, st = list(spec.padding), list(spec.stride)
        b = bias if bias is not None else torch.zeros(spec.K)
        torch._nnpack_available()  # initializes NNPACK: without it every call fails

        def run(x: torch.Tensor) -> torch.Tensor:
            return torch._nnpack_spatial_convolution(x, weight, b, pd, st)

        return Kernel(spec, run)


class Im2colGemm(Primitive):
    """Explicit im2col (F.unfold) and one batched GEMM per group (torch.matmul on MKL)."""

    name = "im2col-gemm"
    library = "PyTorch unfold + MKL sgemm"
    description = "unfold, then matmul"

    def prepare(self, spec: ConvSpec, weight: torch.Tensor, bias: torch.Tensor | None) -> Kernel:
        g, K, P, Q = spec.groups, spec.K, spec.P, spec.Q
        w = weight.reshape(g, K // g, -1).contiguous()  # G x K/G x (C/G R S)
        b = bias.reshape(1, K, 1) if bias is not None else None
        ks, dl, pd, st = (spec.R, spec.S), spec.dilation, spec.padding, spec.stride

        def run(x: torch.Tensor) -> torch.Tensor:
            n = x.shape[0]
            cols = F.unfold(x, ks, dilation=dl, padding=pd, stride=st)  # N x (C R S) x L
            cols = cols.reshape(n, g, -1, P * Q)
            y = torch.matmul(w, cols).reshape(n, K, P * Q)
            if b is not None:
                y = y + b
            return y.reshape(n, K, P, Q)

        return Kernel(spec, run)


class Gemm1x1(Primitive):
    """A 1x1 convolution is one GEMM: on NHWC activations (N H W) x C times C x K, no copies."""

    library = "MKL sgemm"

    def __init__(self, layout: str = "NHWC") -> None:
        self.in_layout = self.out_layout = layout
        self.name = f"gemm-1x1-{layout.lower()}"
        self.description = f"1x1 convolution as one GEMM on {layout}"

    def _supports(self, spec: ConvSpec) -> bool | str:
        ok = needs(spec, groups1=True, dilation1=True, kernel=(1, 1))
        if ok is not True:
            return ok
        return True if spec.padding == (0, 0) else f"padding {spec.padding} not supported (1x1 without padding only)"

    def prepare(self, spec: ConvSpec, weight: torch.Tensor, bias: torch.Tensor | None) -> Kernel:
        K, C = spec.K, spec.C
        sh, sw = spec.stride
        w_kc = weight.reshape(K, C).contiguous()
        w_ck = w_kc.t().contiguous()
        nhwc = self.in_layout == "NHWC"

        def run(x: torch.Tensor) -> torch.Tensor:
            if sh > 1 or sw > 1:
                x = x[:, :, ::sh, ::sw]
            n, _, h, w_ = x.shape
            if nhwc:
                rows = x.permute(0, 2, 3, 1).reshape(n * h * w_, C)  # a view when x is channels_last
                y = torch.addmm(bias, rows, w_ck) if bias is not None else rows @ w_ck
                return y.reshape(n, h, w_, K).permute(0, 3, 1, 2)  # logical NCHW, channels_last memory
            y = torch.matmul(w_kc, x.reshape(n, C, h * w_))
            if bias is not None:
                y = y + bias.reshape(1, K, 1)
            return y.reshape(n, K, h, w_)

        return Kernel(spec, run)

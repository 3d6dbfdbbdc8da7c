"""Fast-algorithm convolutions written in PyTorch: Winograd F(2x2,3x3) and F(4x4,3x3) with the
transform-domain products done as one batched GEMM per tile point (Lavin & Gray 2016), and FFT
convolution with torch.fft (the per-frequency channel contraction as a batched complex GEMM)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from rooftune.primitives.base import Kernel, Primitive, needs
from rooftune.primitives.spec import ConvSpec
from rooftune.units import fmt_size

#: Largest frequency-domain filter bank FFTConv builds (its peak is about twice this, with the
#: per-frequency copy): a 1x1 layer of 2048 x 512 channels at 65x65 would need 17 GiB, and is
#: thousands of times slower this way than by GEMM; a profiling campaign must not be killed by it.
FFT_MAX_WEIGHT_BYTES = 2 * 1024**3


def fft_weight_bytes(spec: ConvSpec) -> int:
    """Bytes of FFTConv's transformed filters: K x C complex64 values per rfft2 frequency."""
    hp, wp = spec.H + 2 * spec.padding[0], spec.W + 2 * spec.padding[1]
    return 8 * spec.K * (spec.C // spec.groups) * hp * (wp // 2 + 1)

# Lavin & Gray's matrices: Y = A^T [ (G g G^T) * (B^T d B) ] A
WINOGRAD_MATRICES = {
    2: (
        [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]],
    ),
    4: (
        [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
         [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
         [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
    ),
}


class Winograd(Primitive):
    """Winograd F(m x m, 3 x 3): input tiles of (m+2)^2 transformed, (m+2)^2 GEMMs of
    K x C times C x tiles, output tiles transformed back. 3x3, stride 1, dilation 1, groups 1."""

    library = "PyTorch (batched GEMM on MKL)"
    fast_algorithm = True

    def __init__(self, m: int = 2) -> None:
        self.m = m
        self.name = f"winograd-f{m}x{m}"
        self.description = f"Winograd F({m}x{m},3x3), transform-domain products as batched GEMMs"
        bt, g, at = WINOGRAD_MATRICES[m]
        self.BT = torch.tensor(bt, dtype=torch.float64)
        self.G = torch.tensor(g, dtype=torch.float64)
        self.AT = torch.tensor(at, dtype=torch.float64)

    def _supports(self, spec: ConvSpec) -> bool | str:
        return needs(spec, groups1=True, stride1=True, dilation1=True, kernel=(3, 3))

    def prepare(self, spec: ConvSpec, weight: torch.Tensor, bias: torch.Tensor | None) -> Kernel:
        m, a = self.m, self.m + 2
        K, C, P, Q = spec.K, spec.C, spec.P, spec.Q
        # U = G w G^T, computed in fp64 once, stored fp32: (a*a) x K x C
        u = torch.einsum("ar,kcrs,bs->abkc", self.G, weight.double(), self.G).reshape(a * a, K, C).float().contiguous()
        bt = self.BT.float()
        at = self.AT.float()
        th, tw = math.ceil(P / m), math.ceil(Q / m)
        ph, pw = spec.padding
        pad = (pw, tw * m + 2 - spec.W - pw, ph, th * m + 2 - spec.H - ph)
        b = bias.reshape(1, K, 1, 1) if bias is not None else None

        def run(x: torch.Tensor) -> torch.Tensor:
            n = x.shape[0]
            xp = F.pad(x, pad)
            tiles = xp.unfold(2, a, m).unfold(3, a, m)  # N C th tw a a
            v = torch.einsum("ai,nctuij,bj->abcntu", bt, tiles, bt).reshape(a * a, C, n * th * tw)
            mm = torch.bmm(u, v).reshape(a, a, K, n, th, tw)  # the transform-domain GEMMs
            y = torch.einsum("ia,abkntu,jb->nktiuj", at, mm, at).reshape(n, K, th * m, tw * m)
            y = y[:, :, :P, :Q]
            return y + b if b is not None else y

        return Kernel(spec, run)


class FFTConv(Primitive):
    """Convolution by the FFT: rfft2 of the padded input and of the filters (once), a batched
    complex GEMM over channels per frequency, irfft2, crop. Stride 1, dilation 1, groups 1."""

    name = "fft"
    library = "PyTorch torch.fft (pocketfft/MKL)"
    description = "FFT convolution, per-frequency channel GEMMs"
    fast_algorithm = True

    def _supports(self, spec: ConvSpec) -> bool | str:
        ok = needs(spec, groups1=True, stride1=True, dilation1=True)
        size = fft_weight_bytes(spec)
        if ok is True and size > FFT_MAX_WEIGHT_BYTES:
            return f"its frequency-domain filters would take {fmt_size(size)} (limit {fmt_size(FFT_MAX_WEIGHT_BYTES)})"
        return ok

    def prepare(self, spec: ConvSpec, weight: torch.Tensor, bias: torch.Tensor | None) -> Kernel:
        K, C, P, Q = spec.K, spec.C, spec.P, spec.Q
        ph, pw = spec.padding
        hp, wp = spec.H + 2 * ph, spec.W + 2 * pw
        # cross-correlation = IFFT(X . conj(FFT(w))) with w zero-padded to the input's size
        wf = torch.fft.rfft2(weight, s=(hp, wp)).conj()  # K C hp wf
        freq = wf.shape[-2] * wf.shape[-1]
        wt = wf.reshape(K, C, freq).permute(2, 1, 0).contiguous()  # freq x C x K
        b = bias.reshape(1, K, 1, 1) if bias is not None else None

        def run(x: torch.Tensor) -> torch.Tensor:
            n = x.shape[0]
            xf = torch.fft.rfft2(F.pad(x, (pw, pw, ph, ph)))  # N C hp wf
            fh, fw = xf.shape[-2], xf.shape[-1]
            xt = xf.reshape(n, C, fh * fw).permute(2, 0, 1)  # freq x N x C
            yt = torch.bmm(xt, wt)  # freq x N x K
            yf = yt.permute(1, 2, 0).reshape(n, K, fh, fw)
            y = torch.fft.irfft2(yf, s=(hp, wp))[:, :, :P, :Q]
            return y + b if b is not None else y

        return Kernel(spec, run)

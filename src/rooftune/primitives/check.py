"""Verification of primitives against ``F.conv2d`` in fp64, shipped with the package: a primitive
that fails on a spec is recorded as failed there and never timed as if it worked.

    verify(primitive, spec)   -> Verdict (ok, errors, the rule applied)
    selftest()                -> every primitive on CHECK_SPECS (stride, padding, dilation, groups,
                                 batch, odd sizes, non-square kernels, int8)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rooftune.errors import InvalidArgument, one_line
from rooftune.primitives.base import Kernel, Primitive, in_layout, to_layout
from rooftune.primitives.spec import ConvSpec

#: Error bounds relative to the largest output magnitude, per kind of arithmetic, with the reason.
TOLERANCES: dict[str, tuple[float, str]] = {
    "fp32": (1e-4, "fp32 with sums reordered by blocking and vectorisation: a few ulps x sqrt(C R S)"),
    "winograd-f2x2": (1e-3, "Winograd F(2x2,3x3): the input and output transforms amplify rounding ~4x"),
    "winograd-f4x4": (1e-2, "Winograd F(4x4,3x3): transform entries up to 8 and 1/24 amplify rounding ~100x"),
    "fft": (1e-3, "FFT: O(log(H W)) rounding over the whole padded plane, then cropped"),
    "int8": (0.25, "int8: static activation ranges clip the rare value beyond them (max error), while the "
                   "cosine to fp64 stays >= 0.999"),
}
INT8_MIN_COSINE = 0.999


def cosine(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Cosine similarity of an output to its reference, in fp64, both first divided by the
    reference's largest magnitude: ``F.cosine_similarity`` clamps each norm at 1e-8, which turns
    the cosine of outputs of ~1e-10 (a deep network with random weights, such as
    mobilenet_v3_large) into a ratio of clamps instead of their angle."""
    a, b = out.detach().double().flatten(), ref.detach().double().flatten()
    scale = float(b.abs().max())
    if scale == 0.0 and not bool(a.any()):
        return 1.0  # both all zeros: the same output
    if not math.isfinite(scale) or scale == 0.0:
        scale = 1.0
    return float(F.cosine_similarity(a / scale, b / scale, dim=0))


def output_error(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, float]:
    """How far an output is from its reference, in fp64: the largest absolute error, that error
    over the reference's largest magnitude, and their :func:`cosine`."""
    a, b = out.detach().double(), ref.detach().double()
    max_abs = float((a - b).abs().max())
    return max_abs, max_abs / (float(b.abs().max()) or 1.0), cosine(a, b)


def tolerance_for(primitive: Primitive) -> tuple[str, float, str]:
    key = primitive.name if primitive.name in TOLERANCES else "int8" if primitive.precision == "int8" else "fp32"
    tol, why = TOLERANCES[key]
    return key, tol, why


@dataclass(frozen=True)
class Verdict:
    primitive: str
    spec: ConvSpec
    status: str  # ok | failed | unsupported
    reason: str = ""
    max_rel: float = math.nan
    cosine: float = math.nan
    tolerance: float = math.nan

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def example(spec: ConvSpec, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded input, weight (scaled by 1/sqrt(fan-in), as Kaiming's rule) and bias for ``spec``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(spec.input_shape, generator=g)
    fan_in = (spec.C // spec.groups) * spec.R * spec.S
    w = torch.randn(spec.weight_shape, generator=g) / math.sqrt(fan_in)
    b = torch.randn(spec.K, generator=g) * 0.1
    return x, w, b


def reference(spec: ConvSpec, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return F.conv2d(x.double(), w.double(), b.double() if b is not None else None,
                    spec.stride, spec.padding, spec.dilation, spec.groups)


def verify(primitive: Primitive | str, spec: ConvSpec, seed: int = 0) -> Verdict:
    """Run ``primitive`` (one, or its name) on a seeded example of ``spec`` and compare with fp64
    ``F.conv2d``."""
    if isinstance(primitive, str):
        from rooftune.primitives import get_primitive

        primitive = get_primitive(primitive)
    if not isinstance(spec, ConvSpec):
        raise InvalidArgument("spec", spec, "allowed a rooftune.primitives.ConvSpec")
    ok = primitive.supports(spec)
    if ok is not True:
        return Verdict(primitive.name, spec, "unsupported", str(ok))
    x, w, b = example(spec, seed)
    return verify_kernel(primitive, spec, x, w, b, reference(spec, x, w, b))[0]


def verify_kernel(primitive: Primitive, spec: ConvSpec, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
                  ref: torch.Tensor) -> tuple[Verdict, Kernel | None]:
    """Prepare ``primitive`` on (w, b), run x, compare with ``ref``: the verdict, and the kernel
    when it verified (so a campaign times exactly what was checked)."""
    _, tol, why = tolerance_for(primitive)
    try:
        kernel = primitive.prepare(spec, w, b)
        y = kernel.run(to_layout(x, primitive.in_layout))
    except Exception as exc:  # a library refusing or crashing on a spec is a failed primitive there
        return Verdict(primitive.name, spec, "failed", f"{type(exc).__name__}: {one_line(exc, 200)}",
                       tolerance=tol), None
    if tuple(y.shape) != tuple(ref.shape):
        return Verdict(primitive.name, spec, "failed", f"output shape {tuple(y.shape)}, expected {tuple(ref.shape)}",
                       tolerance=tol), None
    if not in_layout(y, primitive.out_layout):
        return Verdict(primitive.name, spec, "failed", f"output not in its declared layout {primitive.out_layout}",
                       tolerance=tol), None
    yd = y.double()
    if not bool(torch.isfinite(yd).all()):
        return Verdict(primitive.name, spec, "failed", "non-finite output", tolerance=tol), None
    _, rel, cos = output_error(yd, ref)
    good = rel <= tol and (primitive.precision != "int8" or cos >= INT8_MIN_COSINE)
    reason = "" if good else f"max error {rel:.3g} of the output's scale > {tol:g} ({why})" + (
        f", cosine {cos:.4f}" if primitive.precision == "int8" else "")
    verdict = Verdict(primitive.name, spec, "ok" if good else "failed", reason, rel, cos, tol)
    return verdict, kernel if good else None


def _specs() -> list[ConvSpec]:
    out = []
    for dtype in ("fp32", "int8"):
        out += [
            ConvSpec(1, 8, 12, 12, 16, 3, 3, padding=1, dtype=dtype),              # 3x3 same
            ConvSpec(2, 8, 13, 11, 12, 3, 3, padding=1, dtype=dtype),              # batch 2, odd sizes
            ConvSpec(1, 8, 15, 15, 8, 3, 3, stride=2, padding=1, dtype=dtype),     # stride 2
            ConvSpec(1, 6, 16, 16, 6, 3, 3, padding=2, dilation=2, dtype=dtype),   # dilation 2
            ConvSpec(1, 8, 10, 10, 8, 3, 3, padding=1, groups=2, dtype=dtype),     # grouped
            ConvSpec(1, 16, 14, 14, 16, 3, 3, padding=1, groups=16, dtype=dtype),  # depthwise
            ConvSpec(3, 16, 9, 9, 24, 1, 1, dtype=dtype),                          # 1x1
            ConvSpec(1, 16, 14, 14, 8, 1, 1, stride=2, dtype=dtype),               # 1x1 stride 2
            ConvSpec(1, 3, 23, 23, 8, 5, 5, stride=2, padding=2, dtype=dtype),     # 5x5 stem-like
            ConvSpec(1, 8, 12, 12, 8, 1, 7, padding=(0, 3), dtype=dtype),          # 1x7 (inception)
            ConvSpec(1, 8, 12, 12, 8, 7, 1, padding=(3, 0), dtype=dtype),          # 7x1
            ConvSpec(1, 4, 7, 7, 4, 3, 3, dtype=dtype),                            # valid, odd
        ]
    return out


#: The specs every primitive is checked on (each primitive where it applies).
CHECK_SPECS: tuple[ConvSpec, ...] = tuple(_specs())


def selftest(primitives: list[Primitive] | None = None, specs: tuple[ConvSpec, ...] = CHECK_SPECS) -> list[Verdict]:
    """Every primitive on every check spec: the verdicts (unsupported ones with their reasons)."""
    from rooftune.primitives import all_primitives

    return [verify(p, s) for p in primitives or all_primitives() for s in specs]

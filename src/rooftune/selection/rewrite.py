"""Rewriting a PyTorch model so every convolution runs its selected primitive, converting its input
to the layout the primitive reads; verification layer by layer (a layer whose primitive disagrees
with ``F.conv2d`` on the real activation falls back to the default path) and end to end."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from rooftune.primitives import get_primitive, in_layout, to_layout
from rooftune.primitives.check import output_error, tolerance_for
from rooftune.primitives.spec import ConvSpec, explicit_padding
from rooftune.selection.solve import Selection
from rooftune.workload.outputs import compare_outputs, output_tensors


class SelectedConv(torch.nn.Module):
    """A Conv2d that runs a chosen primitive on inputs of the shape it was selected for (any other
    shape, or a failed verification, runs the original convolution)."""

    def __init__(self, conv: torch.nn.Conv2d, spec: ConvSpec, primitive: str) -> None:
        super().__init__()
        self.conv = conv
        self.spec = spec
        self.primitive = primitive
        self.pad = explicit_padding(conv)
        left, right, top, bottom = self.pad or (0, 0, 0, 0)
        self.input_shape = (spec.N, spec.C, spec.H - top - bottom, spec.W - left - right)
        p = get_primitive(primitive)
        self.layout = p.in_layout
        with torch.no_grad():
            self.kernel = p.prepare(spec, conv.weight.detach(), None if conv.bias is None else conv.bias.detach())
        self.fallback = False
        self.checking = False
        self.check: dict[str, Any] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fallback or tuple(x.shape) != self.input_shape:
            return self.conv(x)
        xp = x
        if self.pad is not None:  # as torch's Conv2d pads (its mode, or 'same' uneven), before a padding-free primitive
            mode = self.conv.padding_mode
            xp = F.pad(x, self.pad, mode="constant" if mode == "zeros" else mode)
        y = self.kernel.run(xp if in_layout(xp, self.layout) else to_layout(xp, self.layout))
        if self.checking:  # against the layer's own forward (its padding mode included), in float64
            bias = None if self.conv.bias is None else self.conv.bias.double()
            ref = self.conv._conv_forward(x.double(), self.conv.weight.double(), bias)
            _, rel, _ = output_error(y, ref)
            _, tol, why = tolerance_for(get_primitive(self.primitive))
            self.check = {"max_rel": rel, "tolerance": tol, "ok": rel <= tol and bool(torch.isfinite(y).all()),
                          "why": why}
            if not self.check["ok"]:
                return self.conv(x)
        return y

    def extra_repr(self) -> str:
        return f"{self.primitive}{' (fallback)' if self.fallback else ''}: {self.spec.describe()}"


@dataclass
class Verification:
    ok: bool
    max_rel: float
    cosine: float
    tolerance: float
    fallbacks: list[dict[str, Any]] = field(default_factory=list)
    #: How many output tensors were compared, each on its own scale (the figures are the worst).
    outputs: int = 1
    #: Why the check failed, in a line ("" when it passed).
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "max_rel": self.max_rel, "cosine": self.cosine, "tolerance": self.tolerance,
                "fallbacks": self.fallbacks, "outputs": self.outputs, "why": self.why}


def rewrite(model: torch.nn.Module, selection: Selection) -> torch.nn.Module:
    """A copy of ``model`` with each selected convolution replaced by a :class:`SelectedConv`."""
    from rooftune.workload import eval_mode

    new = eval_mode(copy.deepcopy(model))
    for c in selection.choices:
        parent_name, _, attr = c.layer.rpartition(".")
        parent = new.get_submodule(parent_name) if parent_name else new
        conv = getattr(parent, attr)
        setattr(parent, attr, SelectedConv(conv, c.spec, c.primitive))
    return new


def selected_layers(model: torch.nn.Module) -> list[tuple[str, SelectedConv]]:
    return [(n, m) for n, m in model.named_modules() if isinstance(m, SelectedConv)]


#: End-to-end bound on the rewritten model's output, relative to its largest magnitude: the layers'
#: own bounds compound through the network; lossy transforms (Winograd, FFT) get the looser one.
END_TO_END_TOLERANCE = {"exact": 1e-3, "lossy": 2e-2}
MIN_COSINE = 0.9999


def verify(original: torch.nn.Module, rewritten: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> Verification:
    """Each SelectedConv checked on its real input (falls back when it disagrees), then the whole
    output against the original model's."""
    layers = selected_layers(rewritten)
    for _, m in layers:
        m.checking, m.check = True, {}
    try:
        with torch.no_grad():
            rewritten(*inputs)
    finally:
        for _, m in layers:
            m.checking = False
    fallbacks = []
    for name, m in layers:
        if m.check and not m.check["ok"]:
            m.fallback = True
            fallbacks.append({"layer": name, "primitive": m.primitive, "max_rel": m.check["max_rel"],
                              "tolerance": m.check["tolerance"], "reason": m.check["why"]})
    with torch.no_grad():
        refs = output_tensors(original(*inputs))
        outs = output_tensors(rewritten(*inputs))
    lossy = any(m.primitive.startswith(("winograd", "fft")) for _, m in layers if not m.fallback)
    tol = END_TO_END_TOLERANCE["lossy" if lossy else "exact"]
    # the check a tuned configuration passes, with the rewrite's bounds: each output on its own
    # scale (a small second output's error would not hide under a large first's), integer outputs
    # by their agreement
    check = compare_outputs(outs, refs, "fp32", tolerance=tol, min_cosine=MIN_COSINE)
    # (no figures where the number of outputs or a shape differs)
    return Verification(check["ok"], check.get("max_rel", math.inf), check.get("cosine", 0.0), tol, fallbacks,
                        len(refs), check["why"])

"""Which layers are worth int8, and which does the metric forgive: each quantizable layer's
sensitivity on the user's data beside its place on this machine's roofline.

    sensitivity   the metric's drop on the evaluation part with that layer alone in int8,
                  simulated in PyTorch (weights per output channel, symmetric s8; the layer's
                  input per tensor, asymmetric u8 over the range the calibration part gave it:
                  the schemes the runtimes' x86 quantizers use), every other layer in fp32
    int8 gain     the layer's measured time (the analysis's ops of that module) over its floor
                  at int8: max(FLOPs / the int8 GEMM roof, its bytes at one byte an element /
                  the bandwidth of the level it reads from, the dispatch floor)

A layer whose int8 gain is small by its roofline position (dispatch-bound, memory-bound,
depthwise) stays at higher precision whatever its sensitivity, with that reason. The mixed plan
keeps, from the layers worth int8, the fewest (least time saved per point of drop first) at
higher precision so that the simulated drop with all the others in int8 stays within the
budget. The plan is simulated: a runtime's own quantizer decides the real figures, which a study
measures and checks on the same evaluation part.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from rooftune.workload.data import DataSpec, Split, batches, unbatch
from rooftune.workload.metrics import evaluate, metric_name

#: The layers simulated in int8: those every runtime's int8 path quantizes (convolutions and
#: matrix products with weights).
QUANTIZABLE = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)
#: Below this expected speedup at int8, a layer stays at higher precision: the quantize and
#: dequantize steps around it cost about what it saves.
MIN_INT8_GAIN = 1.2
#: Samples of the evaluation part each sensitivity run reads at most: a layer's drop is measured
#: once per layer, and the pass must stay within minutes on a small machine (the count is stated).
MAX_SENSITIVITY_SAMPLES = 256
#: Batch of the simulated runs (any batch gives the same outputs in eager PyTorch).
SIM_BATCH = 32


@dataclass(frozen=True)
class LayerSensitivity:
    """One quantizable layer: its drop alone in int8 (with its interval), its measured time and
    roofline position where an analysis was given, its expected int8 gain, and the verdict."""

    name: str
    kind: str
    drop: float
    drop_interval: tuple[float, float]
    time_s: float | None = None
    bound: str | None = None
    int8_gain: float | None = None
    #: "int8", or why it stays at higher precision.
    keep: str = "int8"


@dataclass(frozen=True)
class Sensitivity:
    """The ranking (most sensitive first), the mixed plan and how it was measured."""

    metric: str
    max_drop: float
    samples: int
    layers: tuple[LayerSensitivity, ...]
    uniform_drop: float
    mixed_drop: float
    kept: tuple[str, ...]
    seconds: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def keep(self) -> tuple[str, ...]:
        """The mixed set's layers at higher precision: those not worth int8 by their roofline
        position, then those the budget keeps (:attr:`kept`), in the model's order of the ranking."""
        return tuple(r.name for r in self.layers if r.keep != "int8") + self.kept

    def quantized(self) -> int:
        """How many layers the mixed set leaves in int8."""
        return len(self.layers) - len(self.keep)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "layers": [asdict(x) for x in self.layers], "keep": list(self.keep)}


def _quantize_weight(w: torch.Tensor) -> torch.Tensor:
    dims = tuple(range(1, w.dim()))
    scale = w.abs().amax(dim=dims, keepdim=True).clamp_min(1e-12) / 127.0
    return (w / scale).round().clamp(-128, 127) * scale


def _quantize_input(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    lo, hi = min(lo, 0.0), max(hi, 0.0)  # zero stays exact, as the quantizers keep it
    scale = max(hi - lo, 1e-12) / 255.0
    zero = round(-lo / scale)
    return ((x / scale).round() + zero).clamp(0, 255).sub(zero) * scale


class _Simulated:
    """Layers of ``module`` switched to simulated int8 and back, with the input ranges the
    calibration part gave each."""

    def __init__(self, module: nn.Module, layers: dict[str, nn.Module]) -> None:
        self.module, self.layers = module, layers
        self.ranges: dict[str, tuple[float, float]] = {}
        self._handles: list[Any] = []
        self._saved: dict[str, torch.Tensor] = {}

    def calibrate(self, xs: Sequence[tuple[torch.Tensor, ...]]) -> None:
        def observe(name: str) -> Any:
            def hook(_m: nn.Module, args: tuple[Any, ...]) -> None:
                x = args[0].detach()
                lo, hi = self.ranges.get(name, (math.inf, -math.inf))
                self.ranges[name] = (min(lo, float(x.min())), max(hi, float(x.max())))
            return hook

        handles = [m.register_forward_pre_hook(observe(n)) for n, m in self.layers.items()]
        try:
            with torch.no_grad():
                for x in xs:
                    self.module(*x)
        finally:
            for h in handles:
                h.remove()

    def __call__(self, names: Sequence[str]) -> _Simulated:
        self._names = list(names)
        return self

    def __enter__(self) -> None:
        for name in self._names:
            m = self.layers[name]
            self._saved[name] = m.weight.data.clone()
            m.weight.data.copy_(_quantize_weight(m.weight.data))
            lo, hi = self.ranges[name]
            self._handles.append(m.register_forward_pre_hook(
                lambda _m, args, lo=lo, hi=hi: (_quantize_input(args[0], lo, hi), *args[1:])))

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        for name, w in self._saved.items():
            self.layers[name].weight.data.copy_(w)
        self._saved.clear()


def _gain(ops: Sequence[Any], roofs: dict[str, Any]) -> tuple[float | None, float | None, str | None]:
    """(time, expected int8 gain, bound) of one layer's ops in an analysis."""
    if not ops:
        return None, None, None
    t = math.fsum(o.time_s for o in ops)
    peak = (roofs.get("peak") or {}).get("gemm_int8")
    bw = roofs.get("bandwidth") or {}
    dispatch = float(roofs.get("dispatch_s") or 0.0)
    main = max(ops, key=lambda o: o.time_s)
    if not peak or main.flops is None:
        return t, None, main.bound
    floor = 0.0
    for o in ops:
        nbytes = float(o.moved_bytes or 0.0) / 4.0  # one byte an element where fp32 moved four
        level_bw = bw.get(o.level) or max(bw.values(), default=0.0)
        floor += max(float(o.flops or 0.0) / peak, nbytes / level_bw if level_bw else 0.0, dispatch)
    return t, (t / floor if floor > 0 else None), main.bound


def _verdict(layer: nn.Module, gain: float | None, bound: str | None) -> str:
    if isinstance(layer, nn.Conv1d | nn.Conv2d | nn.Conv3d) and layer.groups > 1 and layer.groups == layer.in_channels:
        return "kept: depthwise (little arithmetic per byte; int8 kernels gain little)"
    if bound == "overhead":
        return "kept: dispatch-bound (its time is the call, not the arithmetic)"
    if gain is not None and gain < MIN_INT8_GAIN:
        where = f"{bound}-bound" if bound and not bound.startswith("memory") else (bound or "its roofline position")
        return f"kept: expected int8 gain {gain:.2f}x < {MIN_INT8_GAIN}x ({where})"
    return "int8"


def layer_sensitivity(module: nn.Module, split: Split, spec: DataSpec, analysis: Any = None) -> Sensitivity:
    """Each quantizable layer's sensitivity on ``split``'s evaluation part (at most
    :data:`MAX_SENSITIVITY_SAMPLES` of it), with its time and int8 gain from ``analysis`` (an
    :class:`rooftune.analysis.Analysis` of the same model) where given, and the mixed plan within
    ``spec.max_drop``."""
    t0 = time.perf_counter()
    module = module.eval()
    layers = {n: m for n, m in module.named_modules() if isinstance(m, QUANTIZABLE) and n}
    part = split.evaluation.subset(range(min(len(split.evaluation), MAX_SENSITIVITY_SAMPLES)))
    metric = metric_name(spec.metric, part.labels is not None)
    xs = batches(part.inputs, SIM_BATCH)
    sim = _Simulated(module, layers)
    sim.calibrate(batches(split.calibration.inputs, SIM_BATCH))
    # a module the forward never calls (an auxiliary head off in eval mode, a weight read by a
    # functional call) has no input range: it is not ranked, and no quantizer sees it as a layer
    uncalled = [n for n in layers if n not in sim.ranges]
    for n in uncalled:
        del layers[n]

    def run() -> torch.Tensor:
        with torch.no_grad():
            return unbatch([module(*x) for x in xs], len(part)).float()

    ref = run()

    def drop(names: Sequence[str]) -> dict[str, Any]:
        with sim(names):
            return evaluate(run(), ref, part.labels, metric, spec.max_drop, spec.seed)

    by_module: dict[str, list[Any]] = {}
    for op in getattr(analysis, "ops", ()) or ():
        by_module.setdefault(op.module, []).append(op)
    roofs = getattr(analysis, "roofs", None) or {}
    rows = []
    for name, layer in layers.items():
        d = drop([name])
        t, gain, bound = _gain(by_module.get(name, ()), roofs)
        rows.append(LayerSensitivity(name, type(layer).__name__.lower(), d["drop"], tuple(d["drop_interval"]),
                                     t, bound, gain, _verdict(layer, gain, bound)))
    rows.sort(key=lambda r: r.drop, reverse=True)
    worth = [r for r in rows if r.keep == "int8"]
    uniform = drop(list(layers))["drop"]
    # keep at higher precision, one at a time, the layer that saves least time per point of drop
    kept: list[str] = []
    quantized = [r.name for r in worth]
    mixed = drop(quantized)["drop"] if quantized else 0.0
    drops = {r.name: r.drop for r in rows}
    saved = {r.name: (r.time_s or 0.0) * (1 - 1 / r.int8_gain) if r.int8_gain else 0.0 for r in worth}
    while quantized and mixed > spec.max_drop:
        # (without times every layer saves nothing known: the most sensitive goes first)
        worst = min(quantized, key=lambda n: (saved[n] / max(drops[n], 1e-9), -drops[n]))
        quantized.remove(worst)
        kept.append(worst)
        mixed = drop(quantized)["drop"] if quantized else 0.0
    notes = [f"simulated in PyTorch on {len(part)} evaluation samples (of {len(split.evaluation)}); the runtimes' "
             "own quantizers decide the real figures"]
    if analysis is None:
        notes.append("no analysis given: times and int8 gains unknown, every layer counted as worth int8")
    if uncalled:
        notes.append(f"not ranked, never called by the model's forward: {', '.join(uncalled[:6])}"
                     + (f" and {len(uncalled) - 6} more" if len(uncalled) > 6 else ""))
    return Sensitivity(metric, float(spec.max_drop), len(part), tuple(rows), uniform, mixed, tuple(kept),
                       time.perf_counter() - t0, tuple(notes))


def sensitivity(model: str, data: DataSpec | str, *, inputs: Sequence[tuple[int, ...]] | None = None,
                options: dict[str, Any] | None = None, analysis: Any = None) -> Sensitivity:
    """:func:`layer_sensitivity` of ``model`` (a name as ``rooftune analyze`` takes it, at its
    own batch) on ``data`` (a :class:`DataSpec`, or the data's path or ``MODULE:CALLABLE``), with
    the times and roofline positions of ``analysis`` where given."""
    from rooftune.errors import InvalidArgument
    from rooftune.workload import load_workload
    from rooftune.workload.data import data_spec, load_samples, split

    spec = data_spec(data)
    wl = load_workload(model, inputs=inputs, options=options)
    if not isinstance(wl.module, nn.Module):
        raise InvalidArgument("model", model, "a PyTorch model for the sensitivity per layer (a TensorFlow model's "
                              "layers are not simulated in int8)")
    if analysis is not None and analysis.batch != wl.batch:
        analysis = None  # another batch's times would be misread as this one's
    return layer_sensitivity(wl.module, split(load_samples(spec, wl.inputs), spec), spec, analysis)

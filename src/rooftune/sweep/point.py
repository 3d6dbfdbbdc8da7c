"""One point of a sweep, built, checked against its fp32 reference, timed and placed.

    case      the family builds the module (fp32, seeded) and its inputs; the precision converts
              them (fwd, bwd) or runs the step under autocast (the parameters and their update stay
              fp32, as mixed-precision training does); the layout, the algorithm (a primitive) and
              the threads follow the variant
    check     every point but the fp32 framework default in the first layout computes what that
              reference computes (the output; the input and weight gradients; one step's change of
              every parameter) and is compared with it: the largest error over the reference's
              largest magnitude within the precision's tolerance (TOLERANCES), else the point fails
              with the error it had and is never timed
    time      rooftune.bench.measure, one call per sample group: fwd the forward under no_grad; bwd
              torch.autograd.grad of a forward taken once before (retain_graph); step the shared
              TrainStep (rooftune.workload.training)
    place     FLOPs and bytes of the pass, the working set against each cache level, attained
              FLOP/s and bandwidth, and the bound (rooftune.analysis.placement.place: compute at the
              precision's roof, a memory level, or the dispatch floor)
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from rooftune.errors import one_line
from rooftune.sweep.base import Case, Family
from rooftune.sweep.plan import DEFAULT_ALGORITHM, PointSpec, Variant

if TYPE_CHECKING:
    import torch

    from rooftune.analysis.placement import Roofs
    from rooftune.bench import Policy
    from rooftune.costs import OpCost

#: Largest error over the reference's largest magnitude each precision may show, with the reason.
TOLERANCES: dict[str, tuple[float, str]] = {
    "fp32": (1e-4, "fp32 with sums reordered by blocking and vectorisation: a few ulps x sqrt(terms)"),
    "tf32": (5e-3, "TF32 keeps 10 mantissa bits of each product's operands: ~1e-3 relative per term"),
    "fp16": (1e-2, "fp16 keeps 11 significant bits: inputs and weights rounded by up to 2^-11, sums of "
                   "many terms a few times that"),
    "bf16": (5e-2, "bf16 keeps 8 significant bits: inputs and weights rounded by up to 2^-9, sums of "
                   "many terms within a few percent of the output's scale"),
    "int8": (0.25, "int8: static activation ranges clip the rare value beyond them (max error), while the "
                   "cosine to fp32 stays >= 0.999"),
}
INT8_MIN_COSINE = 0.999
#: A point whose 95 % confidence interval of the median is wider than +-5 % is flagged (the
#: sweep's target on a quiet host).
FLAG_REL_CI = 0.05
TORCH_DTYPE_NAMES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8"}
#: Seed of the backward pass's output gradient.
GRAD_SEED = 2


@dataclass(frozen=True)
class SweepPoint:
    """One stored point: what ran, its figures, or why it failed."""

    key: str
    family: str
    params: dict[str, int]
    pass_: str
    precision: str
    variant: Variant
    device: str
    platform_id: str
    status: str  # ok | failed
    reason: str = ""
    flops: float | None = None
    bytes: float | None = None
    traffic: float | None = None
    working_set: float | None = None
    fits: dict[str, bool] = field(default_factory=dict)
    median_s: float | None = None
    fastest_s: float | None = None
    ci_low_s: float | None = None
    ci_high_s: float | None = None
    rel_ci: float | None = None
    samples: int = 0
    flagged: bool = False
    warnings: tuple[str, ...] = ()
    attained_flops: float | None = None
    attained_bandwidth: float | None = None
    level: str = ""
    roof_name: str = ""
    roof_flops: float | None = None
    lower_bound_s: float | None = None
    efficiency: float | None = None
    bound: str = ""
    verified: str = ""
    error: float | None = None
    tolerance: float | None = None
    created_at: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["variant"] = self.variant.to_dict()
        d["warnings"] = list(self.warnings)
        d["params"] = dict(self.params)
        d["fits"] = dict(self.fits)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SweepPoint:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in d.items() if k in known}
        values["variant"] = Variant.from_dict(d["variant"])
        values["warnings"] = tuple(d.get("warnings") or ())
        values["params"] = {k: int(v) for k, v in d["params"].items()}
        return cls(**values)

    def flat(self) -> dict[str, Any]:
        """One row for a table (CSV, Parquet): parameters and variant as columns of their own."""
        d = self.to_dict()
        row = {k: v for k, v in d.items() if k not in ("params", "variant", "fits", "warnings")}
        row.update({f"param_{k}": v for k, v in self.params.items()})
        row.update({f"variant_{k}": v for k, v in self.variant.to_dict().items()})
        row.update({f"fits_{k}": v for k, v in self.fits.items()})
        row["warnings"] = "; ".join(self.warnings)
        return row


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def _cuda_settings(spec: PointSpec) -> Iterator[None]:
    """cuDNN autotuning and TF32 as the point asks, the caller's settings back after."""
    import torch

    saved = (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.benchmark = spec.variant.autotune
    tf32 = spec.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        yield
    finally:
        (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32,
         torch.backends.cuda.matmul.allow_tf32) = saved


def _settings(spec: PointSpec) -> contextlib.AbstractContextManager[None]:
    return _cuda_settings(spec) if spec.device != "cpu" else contextlib.nullcontext()


def _dtype(precision: str) -> torch.dtype:
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)


def prepare(family: Family, spec: PointSpec) -> tuple[Case, dict[str, int]]:
    """The point's case in its precision (fwd and bwd), layout, algorithm and device."""
    import torch

    p = spec.param_dict
    case = family.build(p)
    v = spec.variant
    if v.algorithm != DEFAULT_ALGORITHM:
        return family.with_algorithm(case, p, v.algorithm, v.layout), p
    module, inputs = case.module, case.inputs
    if spec.device != "cpu":
        module = module.to(spec.device)
        inputs = tuple(x.to(spec.device) for x in inputs)
    if spec.pass_ != "step" and spec.precision in ("bf16", "fp16"):
        module = module.to(_dtype(spec.precision))
        inputs = tuple(x.to(_dtype(spec.precision)) for x in inputs)
    if v.layout == "NHWC":
        module = module.to(memory_format=torch.channels_last)
        inputs = tuple(x.contiguous(memory_format=torch.channels_last) for x in inputs)
    return Case(module, inputs, lambda: module(*inputs)), p


@dataclass
class Pass:
    """A pass ready to time: the callable, the tensors it computes (for the check), and the
    forward's output (for its cost)."""

    fn: Callable[[], Any]
    results: list[torch.Tensor]
    output: Any
    parameters: int


def make_pass(case: Case, spec: PointSpec, *, check: bool = True) -> Pass:
    """The pass ready to time; with ``check`` also what it computes, for the comparison with the
    reference (a reference point itself skips that call)."""
    import torch

    from rooftune.workload.training import TrainSpec, TrainStep, first_tensor

    params = [p for p in case.module.parameters() if p.requires_grad]
    nparams = sum(p.numel() for p in params)
    if spec.pass_ == "fwd":
        with torch.no_grad():
            out = case.forward()

        def fwd() -> Any:
            with torch.no_grad():
                return case.forward()

        return Pass(fwd, [first_tensor(out).detach().float()], out, nparams)
    inputs = tuple(x.detach().requires_grad_(True) for x in case.inputs)
    module = case.module
    if spec.pass_ == "bwd":
        out = module(*inputs)
        y = first_tensor(out)
        gen = torch.Generator().manual_seed(GRAD_SEED)
        gy = torch.randn(tuple(y.shape), generator=gen).to(device=y.device, dtype=y.dtype)
        targets = [*inputs, *params]

        def bwd() -> Any:
            return torch.autograd.grad(y, targets, gy, retain_graph=True)

        return Pass(bwd, [g.float() for g in bwd()] if check else [], out, nparams)
    autocast = _dtype(spec.precision) if spec.precision in ("bf16", "fp16") else None
    step = TrainStep(module, inputs, TrainSpec(), name=spec.family, autocast=autocast)
    with torch.no_grad():
        out = module(*inputs)
    changes: list[torch.Tensor] = []
    if check:
        before = step.parameters()
        step.step()
        changes = [(a.detach() - b).float() for a, b in zip(step.params, before, strict=True)]
    return Pass(step.step, changes, out, nparams)


def compare(results: list[torch.Tensor], reference: list[torch.Tensor], precision: str,
            tolerance: tuple[float, str]) -> tuple[float, str]:
    """The largest error over the reference's scale among the results, and "" or why it fails."""
    from rooftune.primitives.check import output_error

    tol, why = tolerance
    worst, worst_cos = 0.0, 1.0
    for a, b in zip(results, reference, strict=True):
        if tuple(a.shape) != tuple(b.shape):
            return math.inf, f"shape {tuple(a.shape)} against the reference's {tuple(b.shape)}"
        if not bool(a.isfinite().all()):
            return math.inf, "non-finite values"
        _, rel, cos = output_error(a.contiguous().cpu(), b.contiguous().cpu())
        worst, worst_cos = max(worst, rel), min(worst_cos, cos)
    if worst > tol:
        return worst, f"max error {worst:.3g} of the reference's scale > {tol:g} ({why})"
    if precision == "int8" and worst_cos < INT8_MIN_COSINE:
        return worst, f"cosine {worst_cos:.4f} to fp32 < {INT8_MIN_COSINE}"
    return worst, ""


def tolerance_for(spec: PointSpec) -> tuple[float, str]:
    if spec.variant.algorithm != DEFAULT_ALGORITHM:
        from rooftune.primitives import get_primitive
        from rooftune.primitives.check import tolerance_for as primitive_tolerance

        _, tol, why = primitive_tolerance(get_primitive(spec.variant.algorithm))
        return tol, why
    return TOLERANCES[spec.precision]


def is_reference(spec: PointSpec, first_layout: str) -> bool:
    return (spec.precision == "fp32" and spec.variant.algorithm == DEFAULT_ALGORITHM
            and spec.variant.layout == first_layout and spec.variant.launch == "eager")


def reference_results(family: Family, spec: PointSpec, first_layout: str) -> list[torch.Tensor]:
    """What the fp32 framework default in the first layout computes for the point's pass."""
    ref = PointSpec(spec.family, spec.params, spec.pass_, "fp32",
                    Variant(DEFAULT_ALGORITHM, first_layout, spec.variant.threads, spec.variant.autotune),
                    spec.device)
    with _settings(ref):
        case, _ = prepare(family, ref)
        return make_pass(case, ref).results


def pass_cost(family: Family, spec: PointSpec, case: Case, made: Pass) -> OpCost:
    """FLOPs and bytes of the point's pass: the forward's from the cost formulas, the backward's
    from the family, a step's the forward, the backward and the optimizer update
    (rooftune.workload.training.update_flops and update_bytes; the loss is not counted)."""
    from rooftune.costs import OpCost
    from rooftune.workload.training import TrainSpec, update_bytes, update_flops

    fwd = family.cost(case, made.output)
    if spec.pass_ == "fwd":
        return fwd
    itemsize = 2 if spec.precision in ("bf16", "fp16") and spec.pass_ == "bwd" else 4
    bwd = family.backward_cost(spec.param_dict, fwd, itemsize)
    if spec.pass_ == "bwd":
        return bwd
    train = TrainSpec()
    up_flops, up_bytes = update_flops(train, made.parameters), update_bytes(train, 4 * made.parameters)

    def moved(c: OpCost) -> float:
        return float(c.traffic if c.traffic is not None else c.bytes or 0.0)

    return OpCost(fwd.kind, float(fwd.flops or 0) + float(bwd.flops or 0) + up_flops,
                  float(fwd.bytes or 0) + float(bwd.bytes or 0) + up_bytes,
                  "step: forward + backward + update", moved(fwd) + moved(bwd) + up_bytes,
                  max(float(fwd.working_set or fwd.bytes or 0), float(bwd.working_set or bwd.bytes or 0)))


def run_point(family: Family, spec: PointSpec, *, roofs: Roofs, platform_id: str, policy: Policy,
              first_layout: str, clock: Callable[[], float] | None = None) -> SweepPoint:
    """Build, check, time and place one point (see the module docstring). A point that cannot be
    built or fails its check is returned failed, with the reason, never timed."""
    from rooftune.analysis.placement import place
    from rooftune.bench import measure

    key = spec.key(platform_id)
    common: dict[str, Any] = dict(key=key, family=spec.family, params=spec.param_dict, pass_=spec.pass_,
                                  precision=spec.precision, variant=spec.variant, device=spec.device,
                                  platform_id=platform_id, created_at=time.time())
    with _threads(spec.variant.threads):
        try:
            reference = None if is_reference(spec, first_layout) else reference_results(family, spec, first_layout)
            with _settings(spec):
                case, _ = prepare(family, spec)
                made = make_pass(case, spec, check=reference is not None)
                error, tolerance, verified = None, None, "reference (fp32, framework default)"
                if reference is not None:
                    tolerance, why = tolerance_for(spec)
                    error, failure = compare(made.results, reference, spec.precision, (tolerance, why))
                    if failure:
                        return SweepPoint(status="failed", reason=f"differs from fp32: {failure}", error=error,
                                          tolerance=tolerance, **common)
                    verified = f"max error {error:.2g} <= {tolerance:g} of fp32's scale"
                fn = _graphed(made.fn) if spec.variant.launch == "graph" else made.fn
                label = f"sweep {family.describe(spec.param_dict)} {spec.pass_} {spec.precision} {spec.variant.label()}"
                timing = dict(clock=clock) if clock is not None else {}
                m = measure(fn, label=label, params={"key": key}, policy=policy, platform_id=platform_id, **timing)
                cost = pass_cost(family, spec, case, made)
        except Exception as exc:  # a kernel refusing a point is a failed point, the sweep goes on
            return SweepPoint(status="failed", reason=f"{type(exc).__name__}: {one_line(exc, 200)}", **common)
    dtype = TORCH_DTYPE_NAMES[spec.precision]
    placed = place(cost, m.median, dtype, roofs)
    moved = float(cost.traffic if cost.traffic is not None else cost.bytes or 0.0)
    ws = float(cost.working_set if cost.working_set is not None else cost.bytes or 0.0)
    lo, hi = (float(x) if math.isfinite(x) else None for x in m.ci)
    rel = m.rel_ci if math.isfinite(m.rel_ci) else None
    return SweepPoint(
        status="ok", flops=cost.flops, bytes=cost.bytes, traffic=moved, working_set=ws,
        fits={lv: ws <= cap for lv, cap in roofs.capacity.items()},
        median_s=m.median, fastest_s=m.min, ci_low_s=lo, ci_high_s=hi, rel_ci=rel, samples=m.n,
        flagged=bool(rel is None or rel > FLAG_REL_CI or m.warnings), warnings=tuple(m.warnings),
        attained_flops=float(cost.flops or 0.0) / m.median, attained_bandwidth=moved / m.median,
        level=placed.level, roof_name=placed.roof_name, roof_flops=placed.roof_flops,
        lower_bound_s=placed.lower_bound_s, efficiency=placed.efficiency, bound=placed.bound,
        verified=verified, error=error, tolerance=tolerance, **common)


def interleaved(family: Family, a: SweepPoint, b: SweepPoint, *, policy: Policy) -> tuple[float, float, float] | None:
    """``a``'s time over ``b``'s measured again interleaved (rooftune.bench.compare, A B B A ...):
    the ratio of their medians with its 95 % interval; None when either cannot be built again. Both
    run on ``a``'s threads (the pairs compared differ in one setting, never in threads)."""
    from rooftune.bench import compare

    specs = [PointSpec(p.family, tuple(sorted(p.params.items())), p.pass_, p.precision, p.variant, p.device)
             for p in (a, b)]
    with _threads(a.variant.threads):
        try:
            fns = []
            for spec in specs:
                case, _ = prepare(family, spec)
                fns.append(make_pass(case, spec, check=False).fn)
            c = compare(fns[0], fns[1], label_a=a.key, label_b=b.key, policy=policy, platform_id=a.platform_id)
        except Exception:  # a point that ran once and fails now: its finding keeps the separate medians
            return None
    lo, hi = c.ci
    if not (math.isfinite(c.ratio) and math.isfinite(lo) and math.isfinite(hi)):
        return None
    return c.ratio, lo, hi


def _graphed(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` captured once in a CUDA graph (after warm-up calls on a side stream, as torch's
    documentation prescribes) and replayed by each call."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay

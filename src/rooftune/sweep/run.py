"""``rooftune.sweep``: a kernel family over a grid of parameters, in each pass, precision and
variant, every point placed on the time-based roofline and stored.

    arguments  checked before anything runs or is stored: the family, every parameter and its
               values, passes, precisions, algorithms, layouts, threads, the device; every point
               resolved (an empty output is refused, naming the point) and its tensors estimated
               against the memory cap (refused, naming the point)
    plan       rooftune.sweep.plan: the points, and the combinations skipped with their reason
    ceilings   the stored ceilings of the device (measured now if the store has none)
    resume     the points whose key the store holds are taken from it, not run again
    run        each other point built, checked against fp32, timed and placed
               (rooftune.sweep.point), then stored in its own transaction; a budget stops the
               sweep between points (run the same sweep again to continue)
    findings   rooftune.sweep.findings, in words, from all the points
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rooftune.errors import InvalidArgument, is_real
from rooftune.sweep.base import Family
from rooftune.sweep.families import get_family
from rooftune.sweep.plan import (
    CPU_PRECISIONS,
    CUDA_PRECISIONS,
    DEFAULT_ALGORITHM,
    DEFAULT_PRECISIONS,
    LAUNCHES,
    Plan,
    Skipped,
    check_names,
    check_passes,
    check_threads,
    grid_axes,
    grid_points,
    plan,
    precision_reasons,
)
from rooftune.sweep.point import SweepPoint

#: A point whose tensors (inputs, weights, outputs, and their gradients in bwd and step) would
#: take more than this share of the memory available now is refused: the sweep would swap.
MEMORY_SHARE = 0.5
#: The cap where the kernel does not say how much memory is available.
FALLBACK_MEMORY_CAP = 8 * 1024**3
#: Tensors a pass holds per forward tensor: the forward's own; the gradients too in bwd; the
#: gradients and the optimizer's momentum in a step.
PASS_TENSORS = {"fwd": 1, "bwd": 2, "step": 3}
#: The harness's policy for one point: 5 ms samples, a short warm-up, stop once the median's 95 %
#: interval is within +-3 % (flagged above +-5 %), at most 0.6 s: a 100-point sweep in ~1 minute.
POINT_BUDGET_S = 0.6
#: An interleaved comparison times two callables: twice a point's budget, and at least enough for
#: its stop rule's six pairs of 2 ms samples on a busy host.
COMPARE_BUDGET_FACTOR = 2.0
MIN_COMPARE_BUDGET_S = 0.5


@dataclass(frozen=True)
class SweepResult:
    """A sweep: its points (those run now and those found in the store), what was skipped and why,
    and the findings in words."""

    family: str
    device: str
    platform_id: str
    platform: dict[str, Any]
    points: tuple[SweepPoint, ...]
    skipped: tuple[Skipped, ...]
    added: int
    resumed: int
    stopped_by_budget: bool
    duration_s: float
    roofs: dict[str, Any]
    findings: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok_points(self) -> list[SweepPoint]:
        return [p for p in self.points if p.ok]

    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family, "device": self.device, "platform_id": self.platform_id, "platform": self.platform,
            "points": [p.to_dict() for p in self.points],
            "skipped": [s.__dict__ for s in self.skipped], "added": self.added, "resumed": self.resumed,
            "stopped_by_budget": self.stopped_by_budget, "duration_s": self.duration_s, "roofs": self.roofs,
            "findings": list(self.findings), "warnings": list(self.warnings),
        }


def _memory_cap() -> int:
    from rooftune.platform.sysfs import available_memory

    avail = available_memory()
    return int(avail * MEMORY_SHARE) if avail else FALLBACK_MEMORY_CAP


def check_memory(family: Family, points: list[dict[str, int]], passes: Sequence[str], cap: int) -> None:
    """Refuse the first point whose tensors would exceed ``cap`` bytes, naming it."""
    from rooftune.units import fmt_size

    most = max(PASS_TENSORS[p] for p in passes)
    for p in points:
        need = 4 * family.tensor_elements(p) * most
        if need > cap:
            raise InvalidArgument("point", family.describe(p), f"its tensors would take ~{fmt_size(need)}, above the "
                                  f"cap of {fmt_size(cap)} ({MEMORY_SHARE:.0%} of the memory available); "
                                  "use smaller values")


def sweep(
    family: str,
    grid: Mapping[str, Any] | None = None,
    *,
    passes: Sequence[str] | str | None = None,
    precisions: Sequence[str] | str | None = None,
    algorithms: Sequence[str] | str | None = None,
    layouts: Sequence[str] | str | None = None,
    threads: int | Sequence[int] | None = None,
    device: str | None = None,
    autotune: Sequence[bool] = (False, True),
    launches: Sequence[str] | str | None = None,
    budget_s: float = float("inf"),
    point_budget_s: float = POINT_BUDGET_S,
    ceilings: Any = None,
    quick: bool = False,
    db: str | None = None,
    store: Any = None,
    memory_cap: int | None = None,
    confirm: bool = True,
    progress: Callable[[int, int, SweepPoint], None] | None = None,
) -> SweepResult:
    """Sweep ``family`` ("conv2d", "lstm") over ``grid`` (parameter -> values: a list, a range
    such as "16:1024:*2", or an integer; an alias such as ``channels`` sets several parameters to
    the same values). Without a grid the family's default study runs (batch, channels or hidden,
    kernel or sequence length, one at a time).

    ``passes`` fwd (default), bwd, step; ``precisions`` fp32 and bf16 by default (on a CPU also
    fp16 and int8; on CUDA fp32 with TF32 off, tf32, fp16, bf16), each skipped with its reason
    where the machine lacks it; ``algorithms`` "default" (the framework's) and rooftune's
    primitive names, or "all"; ``layouts`` NCHW and NHWC for conv2d (both by default);
    ``threads`` the thread counts (default: every usable core). ``device`` "cuda" or "cuda:N"
    runs on a GPU with cuDNN autotuning off and on (``autotune``) and eager or CUDA-graph launch
    (``launches``). Points already stored for this platform are taken from the store. With
    ``confirm`` (on a CPU) the speedups the findings state at each crossover and at the end of
    each line are measured again interleaved (rooftune.bench.compare). Returns a
    :class:`SweepResult`; figures and the HTML report are ``rooftune.report.write_sweep_report``.
    """
    started = time.perf_counter()
    args = check_arguments(family, grid, passes=passes, precisions=precisions, algorithms=algorithms, layouts=layouts,
                           threads=threads, device=device, autotune=autotune, launches=launches, budget_s=budget_s,
                           point_budget_s=point_budget_s, memory_cap=memory_cap)
    from rooftune.platform import current_platform
    from rooftune.platform.gpu import check_cuda

    host = current_platform()
    the_plan = plan_for(args, host)
    if args.on_cuda:
        check_cuda(args.index or 0, device)
    from rooftune.store import open_store

    own = store is None
    store = open_store(store or db)
    try:
        run = _Run(args.family, the_plan, args.device, args.index, ceilings, quick, store, args.policy, budget_s,
                   args.layouts[0], progress, host)
        run.confirm = bool(confirm) and not args.on_cuda
        return run.run(started)
    finally:
        if own:
            store.close()


@dataclass(frozen=True)
class Arguments:
    """A sweep's arguments once checked: what every platform's plan is made of (the thread counts
    and the precisions a machine lacks are its own: :func:`plan_for`)."""

    family: Family
    device: str
    index: int | None
    on_cuda: bool
    points: tuple[dict[str, int], ...]
    passes: tuple[str, ...]
    precisions: tuple[str, ...]
    algorithms: tuple[str, ...]
    layouts: tuple[str, ...]
    launches: tuple[str, ...]
    autotune: tuple[bool, ...]
    threads: Any
    budget_s: float
    policy: Any


def check_arguments(family: str, grid: Mapping[str, Any] | None, *, passes: Any, precisions: Any, algorithms: Any,
                    layouts: Any, threads: Any, device: str | None, autotune: Sequence[bool], launches: Any,
                    budget_s: float, point_budget_s: float, memory_cap: int | None) -> Arguments:
    """Every argument of :func:`sweep` checked, or the one-line error of the first that is not
    allowed (the thread counts are checked against each machine's cores by :func:`plan_for`)."""
    from rooftune.bench import Policy
    from rooftune.platform.gpu import parse_device

    fam = get_family(family)
    kind, index = parse_device(device)
    on_cuda = kind == "cuda"
    dev = f"cuda:{index or 0}" if on_cuda else "cpu"
    axes = grid_axes(fam, grid)
    point_params = grid_points(fam, axes)
    pass_list = check_passes(passes)
    allowed_precisions = CUDA_PRECISIONS if on_cuda else CPU_PRECISIONS
    prec_list = check_names(precisions, "precision", allowed_precisions, DEFAULT_PRECISIONS)
    from rooftune.primitives import PRIMITIVES

    algo_names = (DEFAULT_ALGORITHM, *[n for n in PRIMITIVES if n != "pytorch-default"])
    every = algorithms == "all" or algorithms == ["all"]
    algo_list = ((algo_names if fam.has_algorithms else (DEFAULT_ALGORITHM,)) if every
                 else check_names(algorithms, "algorithm", algo_names, (DEFAULT_ALGORITHM,)))
    if not fam.has_algorithms and any(a != DEFAULT_ALGORITHM for a in algo_list):
        raise InvalidArgument("algorithm", ",".join(a for a in algo_list if a != DEFAULT_ALGORITHM),
                              f"{fam.name} runs only the framework's default (rooftune's primitives are convolutions)")
    if fam.layouts == ("-",) and layouts is not None:
        raise InvalidArgument("layout", layouts, f"{fam.name} has no layout choice; leave --layout out")
    layout_list = check_names(layouts, "layout", fam.layouts, fam.layouts)
    launch_list = check_names(launches, "launch", LAUNCHES, LAUNCHES) if on_cuda else ("eager",)
    if not autotune or not all(isinstance(a, bool) for a in autotune):
        raise InvalidArgument("autotune", autotune, "allowed False, True or both")
    for name, value in (("budget", budget_s), ("point budget", point_budget_s)):
        if not is_real(value) or value != value or value <= 0:
            raise InvalidArgument(name, value, "allowed seconds > 0")
    check_memory(fam, point_params, pass_list, memory_cap or _memory_cap())
    policy = Policy(min_sample_time_s=0.005, warmup_s=0.02, target_rel_ci=0.03, budget_s=float(point_budget_s),
                    min_samples=6)
    return Arguments(fam, dev, index, on_cuda, tuple(point_params), tuple(pass_list), tuple(prec_list),
                     tuple(algo_list), tuple(layout_list), tuple(launch_list),
                     tuple(dict.fromkeys(autotune)) if on_cuda else (False,), threads, float(budget_s), policy)


def plan_for(args: Arguments, platform: Any) -> Plan:
    """The points ``args`` runs on ``platform``: its thread counts checked against the platform's
    cores (default: all of them), the precisions it lacks skipped with the reason."""
    thread_list = check_threads(args.threads, platform.usable_cores)
    skip = {} if args.on_cuda else precision_reasons(platform, args.precisions)
    return plan(args.family, list(args.points), passes=args.passes, precisions=args.precisions,
                algorithms=args.algorithms, layouts=args.layouts, threads=thread_list, device=args.device,
                precision_skip=skip, autotune=args.autotune, launches=args.launches)


class _Run:
    """The phases of one sweep after its arguments were checked: ceilings, resume, run, findings."""

    def __init__(self, family: Family, the_plan: Plan, device: str, index: int | None, ceilings: Any, quick: bool,
                 store: Any, policy: Any, budget_s: float, first_layout: str,
                 progress: Callable[[int, int, SweepPoint], None] | None, host: Any) -> None:
        self.family, self.plan, self.device, self.index = family, the_plan, device, index
        self.ceilings, self.quick, self.store, self.policy = ceilings, quick, store, policy
        self.budget_s, self.first_layout, self.progress, self.host = budget_s, first_layout, progress, host
        #: Whether the findings' speedups are measured again interleaved (on a CPU: a CUDA pair's
        #: settings are process-wide flags, which interleaved calls cannot switch).
        self.confirm = False

    def get_ceilings(self) -> Any:
        if self.ceilings is not None:
            return self.ceilings
        if self.device != "cpu":
            from rooftune.machine.gpu import get_gpu_ceilings

            return get_gpu_ceilings(self.index or 0, quick=self.quick, store=self.store)
        from rooftune.machine import get_ceilings

        return get_ceilings(quick=self.quick, store=self.store, platform=self.host)

    def roofs(self, ceilings: Any, threads: int) -> Any:
        from rooftune.analysis.placement import Roofs

        if self.device != "cpu":
            return Roofs.from_gpu(ceilings, threads)
        return Roofs.from_ceilings(ceilings, threads)

    def run(self, started: float) -> SweepResult:
        from rooftune.sweep.findings import findings
        from rooftune.sweep.point import run_point

        ceilings = self.get_ceilings()
        platform = ceilings.platform
        stored = {d["key"]: SweepPoint.from_dict(d) for d in self.store.sweep_points(platform.id, self.family.name)}
        clock = None
        if self.device != "cpu":
            from rooftune.machine.gpu import cuda_clock

            clock = cuda_clock(self.index or 0)
        roofs: dict[int, Any] = {}
        points: list[SweepPoint] = []
        added = resumed = 0
        stopped = False
        total = len(self.plan.points)
        for i, spec in enumerate(self.plan.points):
            key = spec.key(platform.id)
            if key in stored:
                points.append(stored[key])
                resumed += 1
                continue
            if time.perf_counter() - started > self.budget_s:
                stopped = True
                break
            t = spec.variant.threads
            if t not in roofs:
                roofs[t] = self.roofs(ceilings, t)
            point = run_point(self.family, spec, roofs=roofs[t], platform_id=platform.id, policy=self.policy,
                              first_layout=self.first_layout, clock=clock)
            self.store.save_sweep_point(platform, point.to_dict())
            points.append(point)
            added += 1
            if self.progress is not None:
                self.progress(i + 1, total, point)
        confirmed = self.confirmations(points)
        first = roofs.get(max(roofs)) if roofs else self.roofs(ceilings, max(
            (s.variant.threads for s in self.plan.points), default=1))
        return SweepResult(
            family=self.family.name, device=self.device, platform_id=platform.id, platform=platform.to_dict(),
            points=tuple(points), skipped=self.plan.skipped, added=added, resumed=resumed,
            stopped_by_budget=stopped, duration_s=time.perf_counter() - started, roofs=roof_dict(first),
            findings=tuple(findings(self.family, points, self.plan.skipped, confirmed)))

    def confirmations(self, points: list[SweepPoint]) -> dict[tuple[str, str], tuple[float, float, float]]:
        return confirmations(self.family, points, self.policy) if self.confirm else {}


def roof_dict(roofs: Any) -> dict[str, Any]:
    """The roofs a result reports (its figures' lines): those of the sweep's most threads."""
    if roofs is None:
        return {}
    return {"peak": dict(roofs.peak), "bandwidth": dict(roofs.bandwidth), "capacity": dict(roofs.capacity),
            "dispatch_s": roofs.dispatch_s, "threads": roofs.threads}


def confirmations(family: Family, points: Sequence[SweepPoint],
                  point_policy: Any) -> dict[tuple[str, str], tuple[float, float, float]]:
    """The findings' speedups measured again interleaved, by (base key, other key), on this
    machine (the points of one platform)."""
    from rooftune.bench import Policy
    from rooftune.sweep.findings import to_confirm
    from rooftune.sweep.point import interleaved

    policy = Policy(min_sample_time_s=0.002, warmup_s=0.02, target_rel_ci=0.03,
                    budget_s=max(COMPARE_BUDGET_FACTOR * point_policy.budget_s, MIN_COMPARE_BUDGET_S), min_samples=6)
    out = {}
    for a, b in to_confirm(points):
        ratio = interleaved(family, a, b, policy=policy)
        if ratio is not None:
            out[(a.key, b.key)] = ratio
    return out

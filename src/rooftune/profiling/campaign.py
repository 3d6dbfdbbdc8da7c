"""Profiling campaigns: every applicable primitive on every spec at every thread count, verified
then timed by the harness, one stored row per (platform, spec, primitive, threads).

Resumable: rows already stored are skipped, and the rows of each spec are committed together, so
a killed campaign loses at most the spec it was on and never stores a row twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from rooftune.bench import Policy, measure
from rooftune.errors import InvalidArgument
from rooftune.primitives import TRANSFORMS, ConvSpec, Primitive, all_primitives, to_layout
from rooftune.primitives.check import example, reference, verify_kernel

#: Timing of one primitive on one spec: short samples (kernels run for microseconds to tens of
#: milliseconds), a 0.4 s budget so that resnet50 + mobilenet_v2 fit in minutes.
PROFILE_POLICY = Policy(min_sample_time_s=0.002, warmup_s=0.02, budget_s=0.4, min_samples=6, target_rel_ci=0.02)

Progress = Callable[[str, int, int], None]


@dataclass
class CampaignResult:
    platform_id: str
    planned: int = 0
    skipped: int = 0
    added: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {"ok": 0, "unsupported": 0, "failed": 0})
    stopped_by_budget: bool = False
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"platform_id": self.platform_id, "planned": self.planned, "skipped": self.skipped,
                "added": self.added, **self.counts, "stopped_by_budget": self.stopped_by_budget,
                "duration_s": self.duration_s}


def _row(spec: ConvSpec, name: str, threads: int, status: str, sources: Sequence[str], *, median: float | None = None,
         iqr: float | None = None, reps: int = 0, reason: str = "", warnings: Sequence[str] = ()) -> dict[str, Any]:
    return {"spec_key": spec.key(), "spec": spec.to_dict(), "primitive": name, "threads": threads, "status": status,
            "median_s": median, "iqr_s": iqr, "repetitions": reps, "reason": reason, "warnings": list(warnings),
            "sources": list(sources), "created_at": time.time()}


#: Every timed row is measured in this many rounds, round-robin over the spec's primitives and
#: transforms, and keeps the fastest round's median. The hosts these campaigns run on are shared:
#: a measurement can land in a stretch where another tenant holds a core (a tiny convolution then
#: reads ~8 ms instead of 0.1 ms, with a tight IQR), and interference only ever slows a kernel.
PROFILE_ROUNDS = 2
#: Rounds further apart than this (slowest / fastest median) are noted on the row.
ROUNDS_DISAGREE = 1.10


def profile_spec(spec: ConvSpec, primitives: Sequence[Primitive], threads: int, sources: Sequence[str] = (),
                 skip: set[str] | frozenset[str] = frozenset(), policy: Policy = PROFILE_POLICY,
                 transforms: bool = True, rounds: int = PROFILE_ROUNDS) -> list[dict[str, Any]]:
    """The rows of one spec at one thread count (the caller sets the threads): each primitive
    unsupported (with the reason), failed (with the error or the verification's finding), or
    verified and timed; then the layout transforms of the spec's input. Timed rows are measured
    in ``rounds`` round-robin passes and keep the fastest pass's median."""
    rows: list[dict[str, Any]] = []
    x, w, b = example(spec)
    ref = None
    timed: list[tuple[str, str, Callable[[], Any], dict[str, Any]]] = []
    for p in primitives:
        if p.name in skip:
            continue
        ok = p.supports(spec)
        if ok is not True:
            rows.append(_row(spec, p.name, threads, "unsupported", sources, reason=str(ok)))
            continue
        if ref is None:
            ref = reference(spec, x, w, b)
        verdict, kernel = verify_kernel(p, spec, x, w, b, ref)
        if not verdict.ok or kernel is None:
            rows.append(_row(spec, p.name, threads, "failed", sources, reason=verdict.reason))
            continue
        xin = to_layout(x, p.in_layout)
        timed.append((p.name, f"conv.{p.name}", (lambda k=kernel, xi=xin: k.run(xi)),
                      {"spec": spec.key(), "threads": threads}))
    if transforms:
        for t in TRANSFORMS.values():
            name = f"transform:{t.name}"
            if name in skip or (t.src[1] == "int8" or t.dst[1] == "int8") and spec.dtype != "int8":
                continue
            xt = t.example(spec.input_shape)
            fn = t.prepare(spec.input_shape)
            timed.append((name, f"transform.{t.name}", (lambda f=fn, xx=xt: f(xx)), {"shape": list(spec.input_shape)}))
    results: dict[str, list[Any]] = {name: [] for name, *_ in timed}
    failed: dict[str, str] = {}
    for _ in range(max(1, rounds)):
        for name, label, fn, params in timed:
            if name in failed:
                continue
            try:
                results[name].append(measure(fn, label=label, policy=policy, params=params))
            except Exception as exc:  # a primitive that verified once and then raises is failed, not timed
                failed[name] = f"{type(exc).__name__}: {exc}"[:200]
    for name, *_ in timed:
        if name in failed:
            rows.append(_row(spec, name, threads, "failed", sources, reason=failed[name]))
            continue
        ms = results[name]
        best = min(ms, key=lambda m: m.median)
        warnings = list(best.warnings)
        medians = [m.median for m in ms]
        if len(ms) > 1 and max(medians) > ROUNDS_DISAGREE * min(medians):
            warnings.append("rounds disagree: " + ", ".join(f"{v * 1e3:.3f}" for v in medians)
                            + " ms; the fastest is kept (interference only slows)")
        rows.append(_row(spec, name, threads, "ok", sources, median=best.median, iqr=best.iqr,
                         reps=sum(m.n * m.number for m in ms), warnings=warnings))
    return rows


def run_campaign(
    specs: Sequence[tuple[ConvSpec, Sequence[str]]],
    *,
    store: Any,
    primitives: Sequence[str] | None = None,
    threads: Sequence[int] = (1,),
    budget_s: float = 3600.0,
    policy: Policy = PROFILE_POLICY,
    progress: Progress | None = None,
    transforms: bool = True,
) -> CampaignResult:
    """Profile ``specs`` (each with the names of the models it comes from) and store every row.
    Stops between specs when ``budget_s`` is spent; running it again continues."""
    from rooftune.platform import current_platform

    platform = current_platform()
    for t in threads:
        if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= platform.usable_cores:
            raise InvalidArgument("threads", t, f"allowed 1..{platform.usable_cores} (the usable cores of this machine)")
    if not (isinstance(budget_s, (int, float)) and budget_s > 0):
        raise InvalidArgument("budget", budget_s, "allowed a positive number of seconds")
    prims = all_primitives(list(primitives) if primitives else None)
    names = [p.name for p in prims] + ([f"transform:{t}" for t in TRANSFORMS] if transforms else [])
    have = store.profile_keys(platform.id)
    started = time.perf_counter()
    result = CampaignResult(platform.id)
    todo = []
    for t in threads:
        for spec, sources in specs:
            skip = {n for n in names if (spec.key(), n, t) in have}
            result.skipped += len(skip)
            if len(skip) < len(names):
                todo.append((t, spec, sources, skip))
    result.planned = len(todo)
    step = progress or (lambda *_: None)
    previous = torch.get_num_threads()
    try:
        for i, (t, spec, sources, skip) in enumerate(todo):
            if time.perf_counter() - started > budget_s:
                result.stopped_by_budget = True
                break
            step(f"profiling ({t} thread{'s' if t > 1 else ''})", i, len(todo))
            torch.set_num_threads(t)
            rows = profile_spec(spec, prims, t, sources, skip, policy, transforms)
            result.added += store.save_profiles(platform, rows)
            for r in rows:
                result.counts[r["status"]] = result.counts.get(r["status"], 0) + 1
        else:
            step("profiling", len(todo), len(todo))
    finally:
        torch.set_num_threads(previous)
    result.duration_s = time.perf_counter() - started
    return result

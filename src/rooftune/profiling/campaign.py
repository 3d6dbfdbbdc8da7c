"""Profiling campaigns: every applicable primitive on every spec at every thread count, verified
then timed by the harness, one stored row per (platform, spec, primitive, threads).

Every ok row is timed in several passes over the whole campaign and keeps its fastest pass; a
machine-speed probe (:mod:`rooftune.bench.canary`) is read between rows, so each pass knows whether
the machine was quiet around it. A row whose fastest pass is not confirmed by a quiet pass gets up to
a few more passes, each spec of them timed once the probe reads quiet again.
Resumable: rows already stored are skipped, rows already timed in a pass are not timed in it
again, and the rows of each spec are committed together, so a killed campaign loses at most the
spec it was on and never stores a row twice.

The kernels are prepared and timed in a warm worker subprocess (:mod:`rooftune.profiling.isolated`):
a primitive that crashes it or hangs is stored as a failed row with the reason ("crashed (signal
11, SIGSEGV)", "timed out after 60 s") as soon as that is known, ahead of its spec's other rows,
so neither a resumed campaign nor a later pass runs it again; a fresh worker takes the next item.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from rooftune.bench import Policy
from rooftune.bench.canary import Canary, Steal, fastest_reading, is_quiet, steal_warning, wait_quiet
from rooftune.errors import InvalidArgument
from rooftune.primitives import TRANSFORMS, ConvSpec, Primitive, all_primitives
from rooftune.profiling.isolated import Isolated
from rooftune.profiling.work import TRANSFORM_PREFIX, InProcess, Outcome, Probe, Runner

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
    passes: int = 1
    #: Rows timed again in a later pass (each pass of a row counts once).
    retimed: int = 0
    #: Confirmation passes allowed after the fixed ones, and how many were run.
    extra_passes: int = 0
    extra_run: int = 0
    #: ok rows whose fastest pass no quiet pass confirmed (within CONFIRM) when the campaign ended.
    unconfirmed: int = 0
    #: ok rows with at least one pass timed while the probe read quiet, and the seconds spent
    #: waiting for quiet stretches before confirmation passes.
    quiet_rows: int = 0
    waited_s: float = 0.0
    #: The hypervisor's share of the CPU time during the campaign (None where not known).
    steal_share: float | None = None
    #: The probe's stored readings (every pass of every ok row) against the fastest one: their
    #: median and the share within QUIET (None without readings). A host that slows the machine
    #: without steal time (another tenant on its cores, caches or memory) shows here.
    probe_median: float | None = None
    probe_quiet_share: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"platform_id": self.platform_id, "planned": self.planned, "skipped": self.skipped,
                "added": self.added, **self.counts, "passes": self.passes, "retimed": self.retimed,
                "extra_passes": self.extra_passes, "extra_run": self.extra_run, "unconfirmed": self.unconfirmed,
                "quiet_rows": self.quiet_rows, "waited_s": self.waited_s, "steal_share": self.steal_share,
                "probe_median": self.probe_median, "probe_quiet_share": self.probe_quiet_share,
                "stopped_by_budget": self.stopped_by_budget, "duration_s": self.duration_s}


def _row(spec: ConvSpec, name: str, threads: int, status: str, sources: Sequence[str], *, median: float | None = None,
         iqr: float | None = None, reps: int = 0, reason: str = "", warnings: Sequence[str] = (),
         canary: tuple[float, float] | None = None, fastest: float | None = None) -> dict[str, Any]:
    around = max(canary) if canary else None
    return {"spec_key": spec.key(), "spec": spec.to_dict(), "primitive": name, "threads": threads, "status": status,
            "median_s": median, "iqr_s": iqr, "repetitions": reps, "reason": reason, "warnings": list(warnings),
            "sources": list(sources), "created_at": time.time(), "canary_s": around, "fastest_s": fastest,
            "pass_canary": [around] if around is not None else None}


#: A campaign times every row in this many passes over all its specs and keeps the fastest pass's
#: median. On a shared host a measurement can land in a stretch where another tenant holds a core
#: (a tiny convolution then reads many times its time, with a tight IQR), and such stretches last
#: seconds to minutes, so that two measurements of one row taken back to back are slowed together.
#: Passes over the whole campaign put a full pass between two measurements of a row; three is where
#: the fastest pass of one campaign agrees with another's on nearly every row
#: (docs/benchmarks/history.md gives the check).
PROFILE_PASSES = 3
MAX_PASSES = 10
#: After the fixed passes, a row is confirmed when a pass timed while the probe read quiet has a
#: median within this factor of its fastest (the fastest pass itself, quiet, counts): the floor was
#: seen on a quiet machine. Passes that agree with each other in a slow stretch (a 1.5x slowdown
#: reads steady) do not confirm. Rows stored without probe readings fall back to two passes within
#: CONFIRM. An unconfirmed row is timed in up to EXTRA_PASSES more passes over the unconfirmed rows
#: only, each spec once the probe reads quiet (or QUIET_WAIT_S has passed).
CONFIRM = 1.03
EXTRA_PASSES = 3
#: Longest wait for a quiet stretch before one spec of a confirmation pass; the waits of a campaign
#: together take at most QUIET_WAIT_SHARE of the time its fixed passes took (of the budget left, in
#: a run that resumes after its fixed passes). Slow stretches on a shared host last seconds to tens
#: of seconds; the caps keep a host that is rarely quiet from spending the confirmation passes'
#: budget on waiting (BENCHMARKS.md, profiling throughput).
QUIET_WAIT_S = 10.0
QUIET_WAIT_SHARE = 0.25
#: Passes further apart than this (slowest / fastest median) are noted on the row.
PASSES_DISAGREE = 1.10
_DISAGREE_NOTE = "passes disagree: "


def profile_spec(spec: ConvSpec, primitives: Sequence[Primitive], threads: int, sources: Sequence[str] = (),
                 skip: set[str] | frozenset[str] = frozenset(), policy: Policy = PROFILE_POLICY,
                 transforms: bool = True, canary: Probe | None = None, runner: Runner | None = None,
                 on_crash: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """The rows of one spec at one thread count (the caller sets the threads): each primitive
    unsupported (with the reason), failed (with the error or the verification's finding), or
    verified and timed once; then the layout transforms of the spec's input. With a ``canary``,
    the probe is read before the first timed row and after each timed one, and a row carries the
    slower of the two readings around it (``canary_s``).

    ``runner`` prepares and times the kernels (default: in this process). A row whose primitive
    took the runner's worker down (a crash or a hang) is failed with the reason, and handed to
    ``on_crash`` as soon as it is known (a campaign stores it at once: run again, it must not)."""
    runner = runner if runner is not None else InProcess(primitives)
    rows: list[dict[str, Any]] = []

    def failed(name: str, out: Outcome) -> None:
        row = _row(spec, name, threads, "failed", sources, reason=out.reason)
        if out.crashed and on_crash is not None:
            on_crash(row)
        rows.append(row)

    names = [p.name for p in primitives if p.name not in skip]
    if transforms:
        names += [name for t in TRANSFORMS.values() if (name := f"{TRANSFORM_PREFIX}{t.name}") not in skip
                  and not ((t.src[1] == "int8" or t.dst[1] == "int8") and spec.dtype != "int8")]
    if not names:
        return rows
    runner.begin(spec, threads)
    timed: list[str] = []
    for name in names:
        out = runner.prepare(name)
        if out.status == "unsupported":
            rows.append(_row(spec, name, threads, "unsupported", sources, reason=out.reason))
        elif out.status != "ok":
            failed(name, out)
        else:
            timed.append(name)
    before = canary.read() if canary is not None and timed else None
    steal = Steal()
    for name in timed:
        steal.restart()
        out = runner.measure(name, policy)
        m = out.measurement
        if m is None:
            failed(name, out)
            continue
        after = canary.read() if canary is not None else None
        around = (before, after) if before is not None and after is not None else None
        before = after
        stolen = steal_warning(steal.share(), "this measurement")
        rows.append(_row(spec, name, threads, "ok", sources, median=m.median, iqr=m.iqr, reps=m.n * m.number,
                         warnings=[*m.warnings, *([stolen] if stolen else [])], canary=around, fastest=m.min))
    return rows


def merge_pass(stored: dict[str, Any], new: dict[str, Any], index: int) -> dict[str, Any]:
    """``stored`` (an ok row after its earlier passes) with pass number ``index`` (``new``) added:
    the fastest pass's median and IQR, every pass's median, the fastest sample of all, the
    repetitions of all. A pass that
    failed makes the row failed: a kernel that stops verifying or raises is never kept as a time."""
    if new["status"] != "ok":
        return {**stored, "status": "failed", "median_s": None, "iqr_s": None, "pass_medians": [], "pass_canary": None,
                "fastest_s": None,
                "reason": f"pass {index}: {new['reason'] or new['status']}"}
    medians = [*stored["pass_medians"], new["median_s"]]
    # (stored rows come from the store, whose readings are None or one per pass)
    readings = [*(stored.get("pass_canary") or [None] * len(stored["pass_medians"])), new.get("canary_s")]
    notes = [w for w in stored.get("warnings") or [] if not str(w).startswith(_DISAGREE_NOTE)]
    median, iqr = stored["median_s"], stored["iqr_s"]
    if new["median_s"] < median:
        median, iqr, notes = new["median_s"], new["iqr_s"], list(new["warnings"])
    if max(medians) > PASSES_DISAGREE * min(medians):
        notes.append(_DISAGREE_NOTE + ", ".join(f"{v * 1e3:.3f}" for v in medians)
                     + " ms; the fastest is kept (interference only slows)")
    # the fastest sample of every pass (a row stored before samples were kept stays without one:
    # the later passes alone would not say it)
    old, got = stored.get("fastest_s"), new.get("fastest_s")
    fastest = min(old, got) if old is not None and got is not None else None
    return {**stored, "median_s": median, "iqr_s": iqr, "pass_medians": medians, "warnings": notes,
            "fastest_s": fastest, "pass_canary": readings if any(v is not None for v in readings) else None,
            "repetitions": int(stored.get("repetitions") or 0) + int(new["repetitions"])}


def check_passes(passes: Any, what: str = "passes", low: int = 1) -> int:
    """``passes`` if it is a campaign's number of passes (or of extra passes: ``low`` 0), else the
    one-line error."""
    if isinstance(passes, bool) or not isinstance(passes, int) or not low <= passes <= MAX_PASSES:
        raise InvalidArgument(what, passes, f"allowed an integer {low}..{MAX_PASSES}")
    return passes


def check_campaign(threads: Sequence[int], budget_s: float) -> None:
    """Refuses thread counts outside this machine's usable cores and a budget that is not a
    positive number of seconds (before anything is opened or measured)."""
    from rooftune.platform import current_platform

    cores = current_platform().usable_cores
    for t in threads:
        if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= cores:
            raise InvalidArgument("threads", t, f"allowed 1..{cores} (the usable cores of this machine)")
    if isinstance(budget_s, bool) or not (isinstance(budget_s, (int, float)) and budget_s > 0):
        raise InvalidArgument("budget", budget_s, "allowed a positive number of seconds")


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
    passes: int = PROFILE_PASSES,
    extra_passes: int = EXTRA_PASSES,
    isolate: bool = True,
    time_limit_s: float | None = None,
    runner: Runner | None = None,
) -> CampaignResult:
    """Profile ``specs`` (each with the names of the models it comes from) and store every row, then
    time the ok rows again in ``passes - 1`` more passes over all the specs (each row keeps its
    fastest pass), then, with two passes or more, the rows no quiet pass confirmed (``confirmed``)
    in up to ``extra_passes`` more, each spec once the probe reads quiet. Stops between specs when
    ``budget_s`` is spent; running it again continues where it stopped, in whichever pass.

    The kernels run in a warm worker subprocess (:mod:`rooftune.profiling.isolated`): a primitive
    that crashes it or does not answer within its time limit (``time_limit_s``, default from the
    policy's budget) is stored failed with the reason at once, and skipped when the campaign is run
    again. ``isolate=False`` runs them in this process (for primitives registered in it alone).
    ``runner``: one the caller keeps warm across campaigns (a fleet node's), used instead and left open."""
    from rooftune.platform import current_platform

    check_campaign(threads, budget_s)
    check_passes(passes)
    check_passes(extra_passes, "extra passes", low=0)
    campaign = _Campaign(current_platform(), specs, store, all_primitives(list(primitives) if primitives else None),
                         tuple(threads), budget_s, policy, progress, transforms, passes, extra_passes)
    own_runner = runner is None
    runner = runner if runner is not None else (
        Isolated(time_limit_s) if isolate else InProcess(campaign.prims, Canary()))
    previous = torch.get_num_threads()
    try:
        campaign.start(runner)
        campaign.first_pass()
        campaign.later_passes()
        campaign.confirmation_passes()
        campaign.summarize()
    finally:
        if own_runner:
            runner.close()
        torch.set_num_threads(previous)
    return campaign.finish()


class _Campaign:
    """One run of :func:`run_campaign`: its phases share the stored rows, the probe's references
    and the result, each phase a method in the order the function calls them."""

    def __init__(self, platform: Any, specs: Sequence[tuple[ConvSpec, Sequence[str]]], store: Any,
                 prims: Sequence[Any], threads: tuple[int, ...], budget_s: float, policy: Policy,
                 progress: Progress | None, transforms: bool, passes: int, extra_passes: int) -> None:
        self.platform, self.specs, self.store, self.prims = platform, specs, store, prims
        self.threads, self.budget_s, self.policy, self.transforms = threads, budget_s, policy, transforms
        self.passes = passes
        self.names = [p.name for p in prims] + ([f"{TRANSFORM_PREFIX}{t}" for t in TRANSFORMS] if transforms else [])
        self.keys = {(spec.key(), n, t) for t in threads for spec, _ in specs for n in self.names}
        self.stored = _stored(store, platform.id, self.keys)
        # a layer already profiled for another network: its rows now name this campaign's networks too
        # (splitting by network, `rooftune train --eval`, must see every network a layer belongs to)
        wanted = {spec.key(): list(sources) for spec, sources in specs}
        lacking = {k[0]: wanted[k[0]] for k, r in self.stored.items()
                   if any(x not in (r.get("sources") or []) for x in wanted[k[0]])}
        if lacking:  # read from the rows just loaded: a resumed campaign writes nothing
            store.add_profile_sources(platform.id, lacking)
        self.started = time.perf_counter()
        self.steal = Steal()
        self.result = CampaignResult(platform.id, passes=passes, extra_passes=extra_passes if passes > 1 else 0)
        self.todo = []
        for t in threads:
            for spec, sources in specs:
                skip = {n for n in self.names if (spec.key(), n, t) in self.stored}
                self.result.skipped += len(skip)
                if len(skip) < len(self.names):
                    self.todo.append((t, spec, sources, skip))
        self.result.planned = len(self.todo)
        # Later passes, as far as they can be known before the first: the new specs, and the stored
        # rows that lack passes. Only for the progress bar's total and ETA.
        fresh = {(t, spec.key()) for t, spec, _, _ in self.todo}
        self.later = [(index, t, spec, sources) for index in range(2, passes + 1) for t in threads
                      for spec, sources in specs]
        self.total = len(self.todo) + sum(1 for w in self.later
                                          if (w[1], w[2].key()) in fresh or _due(self.stored, *w[:3], self.names))
        self.step = progress or (lambda *_: None)
        # What quiet is measured against, per thread count: the fastest of the rows' stored readings
        # (each the slower of the two around a row), so that a resumed campaign judges its stored
        # passes as the uninterrupted one did.
        self.refs: dict[int, float | None] = {
            t: fastest_reading(v for k, r in self.stored.items() if k[2] == t for v in r.get("pass_canary") or [])
            for t in threads}
        self.done = 0

    def start(self, runner: Runner) -> None:
        self.runner = runner
        self.canary = runner.probe  # read where the kernels run, at their threads

    def seen(self, t: int, readings: Sequence[float | None]) -> None:
        self.refs[t] = fastest_reading([self.refs[t], *readings])

    def spent(self) -> bool:
        if time.perf_counter() - self.started > self.budget_s:
            self.result.stopped_by_budget = True
        return self.result.stopped_by_budget

    def label(self, t: int, index: int = 1) -> str:
        where = f", pass {index} of {self.passes}" if self.passes > 1 else ""
        return f"profiling{where} ({t} thread{'s' if t > 1 else ''})"

    def crashed(self, row: dict[str, Any]) -> None:  # stored before the spec's other rows: never run again
        self.result.added += self.store.save_profiles(self.platform, [row])

    def retime(self, index: int, t: int, spec: ConvSpec, sources: Sequence[str], due: set[str]) -> None:
        self.runner.set_threads(t)
        stored, result = self.stored, self.result

        def crashed_again(row: dict[str, Any]) -> None:
            merged = merge_pass(stored[spec.key(), row["primitive"], t], row, index)
            self.store.update_profiles(self.platform.id, [merged])

        new = profile_spec(spec, self.prims, t, sources, set(self.names) - due, self.policy, self.transforms,
                           self.canary, self.runner, crashed_again)
        self.seen(t, [r.get("canary_s") for r in new])
        rows = [merge_pass(stored[spec.key(), r["primitive"], t], r, index) for r in new]
        self.store.update_profiles(self.platform.id, rows)
        for r in rows:
            stored[spec.key(), r["primitive"], t] = r
            result.retimed += 1
            if r["status"] == "failed":
                result.counts["failed"] = result.counts.get("failed", 0) + 1

    def first_pass(self) -> None:
        """Every spec not stored yet, timed once."""
        result = self.result
        for t, spec, sources, skip in self.todo:
            if self.spent():
                break
            self.step(self.label(t), self.done, self.total)
            self.runner.set_threads(t)
            rows = profile_spec(spec, self.prims, t, sources, skip, self.policy, self.transforms, self.canary,
                                self.runner, self.crashed)
            self.seen(t, [r.get("canary_s") for r in rows])
            result.added += self.store.save_profiles(self.platform, rows)
            for r in rows:
                result.counts[r["status"]] = result.counts.get(r["status"], 0) + 1
            self.done += 1

    def later_passes(self) -> None:
        """Passes 2..N: every ok row with fewer passes than the current one is verified and timed
        again, spec by spec in the campaign's order, one transaction per spec."""
        self.stored = _stored(self.store, self.platform.id, self.keys)
        for index, t, spec, sources in self.later:
            due = _due(self.stored, index, t, spec, self.names)
            if not due:
                continue
            if self.spent():
                break
            self.step(self.label(t, index), self.done, self.total)
            self.retime(index, t, spec, sources, due)
            self.done += 1

    def confirmation_passes(self) -> None:
        """Only the rows whose fastest pass no quiet pass confirmed, each pass over all of them
        before the next (what is due follows from the stored passes: resumable), each spec once
        the probe reads quiet, within a share of the time the fixed passes took (a campaign resumed
        after its fixed passes: a share of the budget left instead)."""
        result, passes = self.result, self.passes
        elapsed = time.perf_counter() - self.started
        wait_left = QUIET_WAIT_SHARE * (elapsed if self.done else self.budget_s - elapsed)
        for index in range(passes + 1, passes + result.extra_passes + 1):
            if result.stopped_by_budget:
                break
            work = [(t, spec, sources, _due(self.stored, index, t, spec, self.names, confirming=True, ref=self.refs[t]))
                    for t in self.threads for spec, sources in self.specs]
            work = [w for w in work if w[3]]
            if not work:  # (a resumed campaign may have finished this pass and not the next)
                continue
            result.extra_run = index - passes
            self.total = self.done + len(work)
            for t, spec, sources, due in work:
                if self.spent():
                    break
                self.step(f"confirming unsteady rows, pass {index} ({t} thread{'s' if t > 1 else ''})",
                          self.done, self.total)
                self.runner.set_threads(t)
                limit = min(QUIET_WAIT_S, wait_left, self.budget_s - (time.perf_counter() - self.started))
                _, waited = wait_quiet(self.canary.read, self.refs[t], limit)
                wait_left -= waited
                result.waited_s += waited
                self.retime(index, t, spec, sources, due)
                self.done += 1

    def summarize(self) -> None:
        """How quiet the probe read over the stored rows, and how many rows no pass confirmed."""
        result, refs = self.result, self.refs
        ok = [(k[2], r) for k, r in self.stored.items() if r["status"] == "ok"]
        result.quiet_rows = sum(1 for t, r in ok if any(is_quiet(c, refs[t]) for c in r.get("pass_canary") or []))
        readings = [(c, refs[t]) for t, r in ok for c in r.get("pass_canary") or [] if c and refs[t]]
        if readings:
            result.probe_median = statistics.median(c / ref for c, ref in readings)
            result.probe_quiet_share = sum(is_quiet(c, ref) for c, ref in readings) / len(readings)
        if self.passes > 1:
            result.unconfirmed = sum(1 for t, r in ok
                                     if not confirmed(r["pass_medians"], r.get("pass_canary"), refs[t]))
        if not result.stopped_by_budget:
            self.step("profiling", self.total, self.total)

    def finish(self) -> CampaignResult:
        self.result.duration_s = time.perf_counter() - self.started
        self.result.steal_share = self.steal.share()
        return self.result


def confirmed(pass_medians: Sequence[float], pass_canary: Sequence[float | None] | None = None,
              ref: float | None = None) -> bool:
    """Whether a pass timed while the probe read quiet (against ``ref``) has a median within
    CONFIRM of the fastest; for a row without probe readings, whether a second pass does."""
    if not pass_medians:
        return False
    if not pass_canary or ref is None:
        m = sorted(pass_medians)
        return len(m) >= 2 and m[1] <= CONFIRM * m[0]
    fastest = min(pass_medians)
    return any(is_quiet(c, ref) and v <= CONFIRM * fastest for v, c in zip(pass_medians, pass_canary, strict=False))


def _stored(store: Any, platform_id: str, keys: set[tuple[str, str, int]]) -> dict[tuple[str, str, int], dict[str, Any]]:
    """The campaign's stored rows by (spec_key, primitive, threads)."""
    rows = (((r["spec_key"], r["primitive"], int(r["threads"])), r) for r in store.profiles(platform_id))
    return {k: r for k, r in rows if k in keys}


def _due(stored: dict[tuple[str, str, int], dict[str, Any]], index: int, t: int, spec: ConvSpec,
         names: Sequence[str], confirming: bool = False, ref: float | None = None) -> set[str]:
    """The ok rows of ``spec`` at ``t`` threads that have not had pass ``index`` yet; for a
    confirmation pass, those that had every pass before it and are not confirmed."""
    due = set()
    for n in names:
        r = stored.get((spec.key(), n, t))
        if r is None or r["status"] != "ok":
            continue
        m = r["pass_medians"]
        if (len(m) == index - 1 and not confirmed(m, r.get("pass_canary"), ref)) if confirming else len(m) < index:
            due.add(n)
    return due

"""The one timing harness of rooftune.

Algorithm of :func:`measure` (``fn`` is called ``number`` times per sample)::

    start = clock()
    number = policy.number or calibrate():     # these calls are warm-up too
        number = 1
        repeat: t = time(number calls)
                if t >= min_sample_time: done
                number = ceil(number * CALIBRATION_HEADROOM * min_sample_time / t)
    while clock() - start < warmup_s: time(number calls)           # discarded
    repeat:
        samples += time(number calls) / number
        if n >= min_samples and halfwidth(CI95(median)) / median <= target_rel_ci: stop "stable"
        if n >= max_samples:                                        stop "max_samples"
        if clock() - start >= budget_s:                             stop "budget"

A noisy or unconverged run is not an error: the Measurement carries warnings saying so.
:func:`compare` interleaves two callables under the same rules and stops on the confidence interval
of the ratio of their medians instead (``stats.comparison_ci``: the paired bootstrap's, never
narrower than the distribution-free interval of the median paired ratio); an ``elapsed`` clock,
when given, meters its warm-up and budget where the samples' clock is scaled. Two things an
interleaved pair does not cancel by itself are evened out::

    calls per sample: unless ``policy.number`` fixes them, both sides' samples last as long as the
        longer calibrated one (the number of calls each needs at its speed in the warm-up; with
        no warm-up round each keeps its calibration), so the cost of switching from one callable
        to the other (caches, allocator) weighs the same share of every sample on both sides;
    order: pairs run in blocks of two, A B B A then B A A B, so each side is first in a pair,
        first after a check of the interval and right after itself equally often.
:func:`measure_parts` times the parts of one run (the ops of a model) together with a reference
callable (the whole model), interleaved, one call per sample::

    warm-up as above (both callables; at least one run, none where the caller ran them just
        before and warmup_s is 0)
    repeat:
        whole += time(reference());  parts[i] += run(clock)[i] for every part i
        stop by the rule above, applied to both the whole and the per-run sum of the parts
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

import rooftune.bench.stats as stats
from rooftune.bench.measurement import NOISY_IQR_FRACTION, Comparison, Measurement, Method, Policy

Clock = Callable[[], float]

#: Calibration aims 20 % above the minimum sample time, so a sample landing just short of the
#: minimum (timer jitter) does not trigger another calibration round.
CALIBRATION_HEADROOM = 1.2
#: Upper bound on calls per sample; a callable faster than ~1 ns per call is not being timed.
MAX_NUMBER = 10**8
#: How often (in pairs) compare() re-computes its bootstrap interval once it has min_samples.
COMPARE_CHECK_EVERY = 2


def _time_calls(fn: Callable[[], Any], number: int, clock: Clock) -> float:
    t0 = clock()
    for _ in range(number):
        fn()
    return clock() - t0


def _calibrate(fn: Callable[[], Any], policy: Policy, clock: Clock) -> int:
    if policy.number is not None:
        return policy.number
    number = 1
    while True:
        t = _time_calls(fn, number, clock)
        if t >= policy.min_sample_time_s or number >= MAX_NUMBER:
            return number
        grow = CALIBRATION_HEADROOM * policy.min_sample_time_s / max(t, 1e-9)
        number = min(MAX_NUMBER, max(number + 1, math.ceil(number * grow)))


def _matched_numbers(number_a: int, per_a: float, number_b: int, per_b: float) -> tuple[int, int]:
    """Calls per sample making both sides' samples last about as long as the longer of the two.

    A sample of ``number`` calls carries the cost of switching to its callable once; with samples of
    the same length that cost is the same fraction of both sides' per-call times and cancels in
    their ratio. Calibration alone can settle on 4 calls for one side and 5 for an equal other.
    """
    if not (per_a > 0 and per_b > 0 and math.isfinite(per_a) and math.isfinite(per_b)):
        return number_a, number_b
    span = max(number_a * per_a, number_b * per_b)
    return (min(MAX_NUMBER, max(1, round(span / per_a))), min(MAX_NUMBER, max(1, round(span / per_b))))


def _a_first(pair: int) -> bool:
    """Whether A runs first in pair ``pair`` (0-based): blocks A B B A, then B A A B, and so on."""
    return (pair // 2) % 2 == pair % 2


def _stop_reason(stable: bool, n: int, policy: Policy, elapsed: float) -> str:
    """Why sampling stops now ('stable', 'max_samples', 'budget'), or '' to go on."""
    if stable:
        return "stable"
    if n >= policy.max_samples:
        return "max_samples"
    if elapsed >= policy.budget_s:
        return "budget"
    return ""


def _sample_warnings(samples: list[float], policy: Policy, stop_reason: str) -> list[str]:
    warnings: list[str] = []
    med = stats.median(samples)
    if stop_reason != "stable":
        lo, hi = stats.median_ci(samples)
        rel = stats.relative_half_width(lo, hi, med)
        shown = "undefined" if math.isinf(rel) else f"+-{rel:.1%}"
        warnings.append(
            f"unstable: 95% CI of the median is {shown} (target +-{policy.target_rel_ci:.0%}) after "
            f"{len(samples)} samples, stopped by {stop_reason}; raise the budget or quiet the machine"
        )
    if len(samples) >= 4 and med > 0 and stats.iqr(samples) / med > NOISY_IQR_FRACTION:
        warnings.append(
            f"noisy: IQR is {stats.iqr(samples) / med:.0%} of the median "
            f"(threshold {NOISY_IQR_FRACTION:.0%}); other work on the machine may be interfering"
        )
    return warnings


def _clock_name(clock: Clock) -> str:
    return getattr(clock, "__name__", type(clock).__name__)


def measure(
    fn: Callable[[], Any],
    *,
    label: str,
    params: dict[str, Any] | None = None,
    policy: Policy | None = None,
    clock: Clock = time.perf_counter,
    platform_id: str | None = None,
) -> Measurement:
    """Time ``fn()`` adaptively (see the module docstring) and return its :class:`Measurement`."""
    policy = policy or Policy()
    started_at = time.time()
    start = clock()
    number = _calibrate(fn, policy, clock)
    warmup_samples = 0
    while clock() - start < policy.warmup_s:
        _time_calls(fn, number, clock)
        warmup_samples += 1
    samples: list[float] = []
    while True:
        samples.append(_time_calls(fn, number, clock) / number)
        n = len(samples)
        stable = False
        if n >= policy.min_samples:
            lo, hi = stats.median_ci(samples)
            stable = stats.relative_half_width(lo, hi, stats.median(samples)) <= policy.target_rel_ci
        reason = _stop_reason(stable, n, policy, clock() - start)
        if reason:
            break
    return Measurement(
        label=label,
        samples=tuple(samples),
        number=number,
        method=Method(
            policy=policy, clock=_clock_name(clock), stop_reason=reason, warmup_samples=warmup_samples
        ),
        params=dict(params or {}),
        platform_id=platform_id,
        host=socket.gethostname(),
        started_at=started_at,
        warnings=tuple(_sample_warnings(samples, policy, reason)),
    )


def compare(
    fn_a: Callable[[], Any],
    fn_b: Callable[[], Any],
    *,
    label_a: str = "A",
    label_b: str = "B",
    params: dict[str, Any] | None = None,
    policy: Policy | None = None,
    clock: Clock = time.perf_counter,
    platform_id: str | None = None,
    before: Callable[[], Any] | None = None,
    elapsed: Clock | None = None,
) -> Comparison:
    """Interleave A and B (A B B A B A A B ...) and return ``median(A) / median(B)`` with its 95 % CI.

    Each side gets its own calls-per-sample, matched after the warm-up so both sides' samples
    last equally long (see the module docstring); the stop rule is on the interval of the ratio
    (``stats.comparison_ci``), with the same target, budget and sample limits as :func:`measure`.
    ``before``, when given, runs untimed before every timed call of either side (warm-up
    included), e.g. to evict the caches so that each call starts cold; it needs one call per
    sample (``policy.number == 1``). ``elapsed``, when given, meters the warm-up and the budget in
    place of ``clock``, which then only times the samples: a sample scaled to the time per item of
    a batch must not stretch the budget by the batch's size.
    """
    policy = policy or Policy()
    spent = elapsed or clock
    if before is not None:
        if policy.number != 1:
            raise ValueError("compare(before=...) needs one call per sample: Policy(number=1)")

        def timed_calls(fn: Callable[[], Any], number: int, clock: Clock) -> float:
            before()
            return _time_calls(fn, number, clock)
    else:
        timed_calls = _time_calls
    started_at = time.time()
    start = spent()
    number_a, number_b, warmup_samples = _warm_up_pair(fn_a, fn_b, timed_calls, policy, clock, spent, start)
    sa, sb, reason = _interleave(fn_a, fn_b, number_a, number_b, timed_calls, policy, clock, spent, start)
    ci = stats.comparison_ci(sa, sb)
    ratio = stats.median(sa) / stats.median(sb)
    host = socket.gethostname()

    def side(label: str, samples: list[float], number: int) -> Measurement:
        return Measurement(
            label=label,
            samples=tuple(samples),
            number=number,
            method=Method(
                policy=policy,
                isolation="interleaved",
                clock=_clock_name(clock),
                stop_reason=reason,
                warmup_samples=warmup_samples,
            ),
            params=dict(params or {}),
            platform_id=platform_id,
            host=host,
            started_at=started_at,
            warnings=tuple(
                w for w in _sample_warnings(samples, policy, "stable") if w.startswith("noisy")
            ),
        )

    warnings = []
    rel = stats.relative_half_width(ci[0], ci[1], ratio)
    if reason != "stable":
        shown = "undefined" if math.isinf(rel) else f"+-{rel:.1%}"
        warnings.append(
            f"unstable: 95% CI of the ratio is {shown} (target +-{policy.target_rel_ci:.0%}) after "
            f"{len(sa)} pairs, stopped by {reason}; raise the budget or quiet the machine"
        )
    a = side(label_a, sa, number_a)
    b = side(label_b, sb, number_b)
    warnings += [f"{m.label}: {w}" for m in (a, b) for w in m.warnings]
    return Comparison(a=a, b=b, ratio=ratio, ci=ci, stop_reason=reason, warnings=tuple(warnings))


def _warm_up_pair(fn_a: Callable[[], Any], fn_b: Callable[[], Any], timed_calls: Callable[..., float],
                  policy: Policy, clock: Clock, spent: Clock, start: float) -> tuple[int, int, int]:
    """Each side's calls per sample and the number of warm-up rounds: both sides calibrated, warmed
    in turn for ``policy.warmup_s``, then their calls matched at the warm speed, so that both
    sides' samples last equally long and the cost of switching between them weighs the same share
    of each (the module docstring's calls per sample)."""
    number_a = _calibrate(fn_a, policy, clock)
    number_b = _calibrate(fn_b, policy, clock)
    warmup_samples = 0
    warm_a: list[float] = []
    warm_b: list[float] = []
    while spent() - start < policy.warmup_s:
        warm_a.append(timed_calls(fn_a, number_a, clock) / number_a)
        warm_b.append(timed_calls(fn_b, number_b, clock) / number_b)
        warmup_samples += 1
    if policy.number is None and warm_a:
        # at the warm speed only: a side calibrated at one call timed its cold first call, which
        # can be many times its speed (a 1 s first call of a 60 ms network would have given the
        # other side 50 calls a sample); without a warm-up round each side keeps its calibration
        number_a, number_b = _matched_numbers(number_a, stats.median(warm_a), number_b, stats.median(warm_b))
    return number_a, number_b, warmup_samples


def _interleave(fn_a: Callable[[], Any], fn_b: Callable[[], Any], number_a: int, number_b: int,
                timed_calls: Callable[..., float], policy: Policy, clock: Clock, spent: Clock,
                start: float) -> tuple[list[float], list[float], str]:
    """The interleaved pairs of samples, in the order :func:`_a_first` gives, and why they stopped:
    the rule reads the interval of the ratio of medians, the figure a comparison reports, not
    either side's own interval; it is computed every ``COMPARE_CHECK_EVERY`` pairs past the
    minimum, so that each side is first after a check equally often (the module docstring's order)."""
    sa: list[float] = []
    sb: list[float] = []
    while True:
        if _a_first(len(sa)):
            ta = timed_calls(fn_a, number_a, clock)
            tb = timed_calls(fn_b, number_b, clock)
        else:
            tb = timed_calls(fn_b, number_b, clock)
            ta = timed_calls(fn_a, number_a, clock)
        sa.append(ta / number_a)
        sb.append(tb / number_b)
        n = len(sa)
        stable = False
        if n >= policy.min_samples and (n - policy.min_samples) % COMPARE_CHECK_EVERY == 0:
            ci = stats.comparison_ci(sa, sb)
            ratio = stats.median(sa) / stats.median(sb)
            stable = stats.relative_half_width(ci[0], ci[1], ratio) <= policy.target_rel_ci
        reason = _stop_reason(stable, n, policy, spent() - start)
        if reason:
            return sa, sb, reason


def measure_parts(
    run: Callable[[Clock], Sequence[float]],
    labels: Sequence[str],
    *,
    reference: Callable[[], Any],
    label: str,
    params: dict[str, Any] | None = None,
    policy: Policy | None = None,
    clock: Clock = time.perf_counter,
    platform_id: str | None = None,
    warm: bool = False,
) -> tuple[Measurement, Measurement, list[Measurement]]:
    """Time the parts of one run and the whole, interleaved (see the module docstring).

    ``run(clock)`` executes everything once and returns one duration per label, read from the clock
    it is given. Returns the Measurement of ``reference`` (the whole, untouched), that of the per-run
    sum of the parts, and one Measurement per part. One call per sample: a run is the unit of work,
    and the parts cannot be repeated alone without changing their caches.

    One warm-up run at least, even with ``policy.warmup_s`` 0, unless ``warm``: the caller ran
    the work just before (a training step's capture runs two steps), so with ``warmup_s`` 0 the
    first run is a sample.
    """
    policy = policy or Policy()
    started_at = time.time()
    start = clock()
    warmup_samples = 0
    while not (warm and policy.warmup_s <= 0):
        _time_calls(reference, 1, clock)
        run(clock)
        warmup_samples += 1
        if clock() - start >= policy.warmup_s:
            break
    whole: list[float] = []
    totals: list[float] = []
    per_part: list[list[float]] = [[] for _ in labels]
    while True:
        whole.append(_time_calls(reference, 1, clock))
        durations = list(run(clock))
        if len(durations) != len(labels):
            raise ValueError(f"run returned {len(durations)} durations for {len(labels)} parts")
        for samples, d in zip(per_part, durations, strict=True):
            samples.append(d)
        totals.append(math.fsum(durations))
        n = len(totals)
        stable = False
        if n >= policy.min_samples:  # both sides of the accounting must be stable
            stable = all(
                stats.relative_half_width(*stats.median_ci(xs), stats.median(xs)) <= policy.target_rel_ci
                for xs in (totals, whole)
            )
        reason = _stop_reason(stable, n, policy, clock() - start)
        if reason:
            break
    method = Method(
        policy=policy, isolation="interleaved", clock=_clock_name(clock), stop_reason=reason,
        warmup_samples=warmup_samples,
    )
    host = socket.gethostname()

    def make(name: str, samples: list[float], stop: str) -> Measurement:
        return Measurement(
            label=name, samples=tuple(samples), number=1, method=method, params=dict(params or {}),
            platform_id=platform_id, host=host, started_at=started_at,
            warnings=tuple(_sample_warnings(samples, policy, stop)),
        )

    # A part's own spread is reported as noise; the whole and the sum are held to the stop rule.
    parts = [make(name, samples, "stable") for name, samples in zip(labels, per_part, strict=True)]
    return make(label, whole, reason), make(f"{label} (sum of parts)", totals, reason), parts

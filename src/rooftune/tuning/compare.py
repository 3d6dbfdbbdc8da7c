"""The last phase of `rooftune tune`: the best re-measured interleaved (A B B A) against every
baseline, the runners-up and the guideline, in fresh pairs of processes.

    interleaved(a, b)      median(b) / median(a) over pairs of processes timed in turn, grouped CI
    Comparisons            two configurations compared again pool their pairs of processes
    against_baselines      fastest baseline first; one faster by the medians becomes the best (once,
                           and once more where pooled with the comparison that handed it on)
    FinalCost, comparison_s, pair_start_s   what the comparisons cost, for the budget kept for them
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rooftune.bench import Policy, compare, stats
from rooftune.runconfig import RunConfig
from rooftune.tuning.result import TrialResult, unsteady_ratios
from rooftune.tuning.trial import TrialFailed, VirtualClock

if TYPE_CHECKING:
    from rooftune.tuning.setup import Setup

#: Untimed calls before each timed one in the interleaved comparisons, after the worker resumes.
RESUME_WARMUP_CALLS = 1
#: Fresh pairs of processes each interleaved comparison is spread over (see interleaved).
COMPARE_PROCESS_PAIRS = 2
#: Its warm-up and budget are seconds of the comparison's wall clock (the timed calls, the untimed
#: ones after each resume, the pauses and the pipes between), whatever the model's size or batch.
COMPARE_POLICY = Policy(number=1, warmup_s=0.3, budget_s=8.0, min_samples=10, target_rel_ci=0.02)
#: Seconds to start a pair of processes for a final comparison when no trial of the study measured
#: its own start (all resumed from rows stored without it). Otherwise the study measures it
#: (pair_start_s): the median of its trials' starts (interpreter, imports, workload, output check;
#: what their preparation took apart), doubled where there are fewer than two cores, plus
#: CACHED_START_S.
PAIR_START_S = 6.0
#: Most pairs of processes an unsteady comparison is spread over with the budget's time left.
MAX_PROCESS_PAIRS = 4
#: The least sampling time (wall-clock seconds) a final comparison is cut to where it would end
#: past the study's budget: a quarter of COMPARE_POLICY's, where a model of 150 ms still gets
#: about a dozen pairs of samples.
LATE_BUDGET_S = 2.0
#: Seconds a final comparison's pair adds to a lone trial's start. Zero: the two processes
#: starting side by side cost about what a pair's processes save by running the prepared artifact
#: instead of building the model (docs/benchmarks/history.md gives the check).
CACHED_START_S = 0.0


def against_baselines(best: TrialResult, base: dict[str, TrialResult], setup: Setup, objective: str,
                      policy: Policy, pairs: int, notes: list[str],
                      step: Callable[[str, int, int], None], deadline: float | None = None,
                      cost: FinalCost | None = None, comparisons: Comparisons | None = None,
                      promoted: set[str] | None = None,
                      eligible: Callable[[TrialResult], bool] | None = None,
                      lost_to: dict[str, str] | None = None,
                      retaken: set[str] | None = None) -> tuple[TrialResult, dict[str, Any]]:
    """The best re-measured interleaved against every baseline, fastest baseline first; returns
    the best (perhaps a baseline) and each baseline's comparison, in ``base``'s order.

    A baseline that measured faster than the best, by the medians of the comparison, becomes the
    best (a user never gets a slower configuration than one they could have picked by hand), once
    per baseline at most; the baselines already compared with the one it replaces are compared again
    with it. Where the interval still holds 1, the search's configuration is not measurably faster
    either, and the configuration the user could have picked needs no tuning to reproduce. Two
    baselines that are the same configuration are compared once. Where a comparison over ``pairs``
    pairs of processes and the rest over one each would not fit before ``deadline``
    (``perf_counter`` seconds; ``cost(pairs)`` seconds a comparison), it is spread over one pair
    instead, with a note; ``cost`` counts the comparisons' seconds as they run. ``comparisons`` pools
    a comparison with earlier ones of the same two configurations (:class:`Comparisons`);
    ``promoted`` names the baselines handed back already, and is added to. ``eligible`` says which
    baselines may take the best's place (those computing in a precision the study allows: under
    ``--fp32`` a peer that picks bf16 by default stays a peer).

    A baseline handed back before, then handed on by a comparison with another baseline, takes the
    place back (once: ``retaken`` names those that did) where its comparison with that baseline,
    pooled with the one that handed the place on (the same two configurations: every pair of
    processes of the two), reads it faster by the medians: the pooled figure has all the evidence
    the first one had and more, and the best is never reported slower than a peer by the very
    comparison that decides between the two. ``lost_to`` maps each baseline handed on to the
    configuration key it was handed on to; both are added to.
    """
    comparisons = comparisons if comparisons is not None else Comparisons(setup, objective, policy)
    promoted = promoted if promoted is not None else set()
    lost_to = lost_to if lost_to is not None else {}
    retaken = retaken if retaken is not None else set()
    ok = [n for n, b in base.items() if b.ok]
    queue = sorted(ok, key=lambda n: base[n].score(objective))  # the likeliest to beat the best first
    results: dict[str, dict[str, Any]] = {}
    short: list[str] = []
    while queue:
        name = queue.pop(0)
        step("best against every baseline, interleaved", len(results), len(ok))
        twin = next((n for n in results if base[n].config.key() == base[name].config.key()), None)
        if twin is not None:
            results[name] = results[twin]
            continue
        n_pairs = _pairs_in_time(name, queue, base, pairs, deadline, cost)
        if n_pairs < pairs:
            short.append(name)

        def run(a: RunConfig = best.config, b: RunConfig = base[name].config, n: int = n_pairs) -> dict[str, Any]:
            return comparisons(a, b, n)

        sp = cost.timed(run) if cost is not None else run()
        results[name] = sp
        if sp.get("ratio", math.inf) < 1.0 and eligible is not None and not eligible(base[name]):
            notes.append(f"the baseline {name} ({base[name].precision}) read {1 / sp['ratio']:.2f}x as fast as the best by "
                         f"the medians{pooled_text(sp)}, in a precision the study did not search: it stays a peer")
        elif sp.get("ratio", math.inf) < 1.0 and (name not in promoted or (
                name not in retaken and lost_to.get(name) == best.config.key() and sp.get("earlier_process_pairs"))):
            # median(baseline) / median(best) < 1, a first time; or again, pooled with the
            # comparison that handed the place on from this baseline to the best
            retaking = name in promoted
            if retaking:
                retaken.add(name)
            notes.append(_takes_place_text(name, best, sp, again=retaking))
            if best.config.name in base and base[best.config.name].config.key() == best.config.key():
                lost_to[best.config.name] = base[name].config.key()
            best = base[name]
            promoted.add(name)
            results[name] = itself()
            again = [n for n in results if n != name]  # compared with the configuration it replaces
            for n in again:
                del results[n]
            short = [n for n in short if n not in again]
            queue = again + queue
        elif sp.get("ratio", math.inf) < 1.0:  # handed back before and lost its place since: it stays behind
            notes.append(_stays_behind_text(name, best, sp))
    if short:
        notes.append(f"the budget left too little time to spread every comparison over {pairs} pairs of processes: "
                     f"{', '.join(dict.fromkeys(short))} over one (their intervals leave out how far one "
                     f"process runs from the next)")
    return best, {n: results[n] for n in ok if n in results}


def _pairs_in_time(name: str, queue: Sequence[str], base: dict[str, TrialResult], pairs: int,
                   deadline: float | None, cost: FinalCost | None) -> int:
    """The pairs of processes the comparison with ``name`` is spread over: ``pairs``, or one where
    it and the comparisons queued after it, at one pair each, would not end before ``deadline``;
    so the first comparisons (the fastest baselines, the closest calls) keep their pairs and the
    last give theirs up, rather than the study running past its budget."""
    if deadline is None or cost is None or pairs <= 1:
        return pairs
    after = len({base[n].config.key() for n in queue} - {base[name].config.key()})
    return 1 if deadline - time.perf_counter() < cost(pairs) + after * cost(1) else pairs


def _takes_place_text(name: str, best: TrialResult, sp: dict[str, Any], again: bool) -> str:
    """The note of a baseline that takes the best's place: how sure the comparison is (an
    interval that holds 1 says only that the baseline is not measurably slower) and, ``again``,
    that it took the place back, which a baseline does once at most."""
    how = ("faster than" if sp.get("ci_high", math.inf) < 1.0
           else "as fast as, or faster than,")  # the interval holds 1: not measurably slower
    again_text = (" again (pooled with the comparison that had handed the place on from it; a baseline "
                  "takes its place back once at most)") if again else ""
    return (f"the baseline {name} was {how} {best.config.describe()} in the interleaved comparison "
            f"({1 / sp['ratio']:.2f}x by the medians{pooled_text(sp)}; 95 % CI of best/baseline "
            f"{sp['ci_low']:.2f}-{sp['ci_high']:.2f}): {name} is the best{again_text}")


def _stays_behind_text(name: str, best: TrialResult, sp: dict[str, Any]) -> str:
    """The note of a baseline that read faster than the best after it had held the best's place
    and lost it: it stays behind, as the comparisons of the two went both ways, and the note says
    so rather than leave a faster peer unexplained."""
    return (f"the baseline {name} read {1 / sp['ratio']:.2f}x as fast as the best by the medians"
            f"{pooled_text(sp)} (95 % CI of best/baseline {sp['ci_low']:.2f}-{sp['ci_high']:.2f}) after "
            f"it had held the best's place once and lost it: the comparisons of the two went both ways"
            + (" beyond their intervals (processes that run fast or slow for their whole life)"
               if sp.get("ci_high", math.inf) < 1.0 else ", neither measurably faster")
            + f", and the best stays {best.config.describe()} (a baseline is handed back once at most, "
              "and takes it back once only from the one it was handed on to)")


def steadier(best: TrialResult, base: dict[str, TrialResult], speedup: dict[str, dict[str, Any]],
             comparisons: Comparisons, cost: FinalCost, deadline: float, spread: float,
             step: Callable[[str, int, int], None] | None = None) -> list[str]:
    """Time left in the budget after the final comparisons goes to those whose pairs of processes
    disagreed by more than ``spread`` (the host's speed changed while they ran): one more pair at a
    time, pooled with the earlier ones (:class:`Comparisons`), up to MAX_PROCESS_PAIRS, while one
    fits before ``deadline``. Only where the best was faster with its whole interval (a baseline
    the best is as fast as decides nothing more by a pair). ``speedup`` is updated in place (a
    twin baseline with it); returns a note per comparison extended: a study whose search ends
    early would otherwise report a headline pooled from two pairs that disagree."""
    notes = []
    by_key: dict[str, str] = {}  # one comparison per configuration: twin baselines share it
    for n, c in speedup.items():
        if (n in base and c.get("ci_low", math.nan) > 1.0 and unsteady_ratios(c, spread)
                and base[n].config.key() != best.config.key()):
            by_key.setdefault(base[n].config.key(), n)
    names = list(by_key.values())
    for i, name in enumerate(names):
        c = speedup[name]
        before = (c["ratio"], c["ci_low"], c["ci_high"], len(c["process_pair_ratios"]))
        added = 0
        while (unsteady_ratios(c, spread) and len(c.get("process_pair_ratios") or ()) < MAX_PROCESS_PAIRS
               and deadline - time.perf_counter() >= cost(1)):
            if step:
                step("steadying unsteady comparisons with the budget left, interleaved", i, len(names))
            again = cost.timed(lambda n=name: comparisons(best.config, base[n].config, 1))
            if "error" in again or not math.isfinite(again.get("ratio", math.nan)):
                break
            c, added = again, added + 1
        if not added:
            continue
        for twin in [n for n in speedup if n in base and base[n].config.key() == base[name].config.key()]:
            speedup[twin] = c
        state = "steady now" if not unsteady_ratios(c, spread) else "still unsteady"
        notes.append(f"the budget left time for {added} more pair(s) of processes in the comparison with {name}, "
                     f"unsteady over {before[3]}: {before[0]:.2f}x ({before[1]:.2f}-{before[2]:.2f}) became "
                     f"{c['ratio']:.2f}x ({c['ci_low']:.2f}-{c['ci_high']:.2f}) over {len(c['process_pair_ratios'])}, "
                     f"{state}")
    return notes


def guideline_wins(c: dict[str, Any], was_best: bool) -> bool:
    """Whether the guideline takes the best's place after the comparison ``c`` (median(guideline)
    / median(best)): faster with its whole CI, as in its first comparison with the best; or, where
    a baseline handed back by the medians had taken the place from it, faster by the medians (the
    guideline lost its place by the same rule that now gives it back; otherwise the result would
    report the guideline as faster than the best). Once per study: the caller keeps count."""
    ratio = c.get("ratio", math.inf)
    return c.get("ci_high", math.inf) < 1.0 or (was_best and ratio < 1.0)


def itself() -> dict[str, Any]:
    """The comparison of a configuration with itself (none is run)."""
    return {"ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0, "pairs": 0}


def pooled_text(c: dict[str, Any]) -> str:
    """', over N pairs of processes, K from an earlier comparison of the two' for a pooled
    comparison (:class:`Comparisons`); '' for one that was not."""
    k = int(c.get("earlier_process_pairs") or 0)
    if not k:
        return ""
    return (f", over {k + int(c.get('process_pairs') or 0)} pairs of processes, {k} from an earlier comparison "
            "of the two")


class FinalCost:
    """Seconds the final comparisons take: :func:`comparison_s` at the measured start of a pair,
    scaled by how long this study's comparisons so far took against it (the parent's own work
    between samples, a chosen configuration slower to load than the trials' median)."""

    def __init__(self, start_s: float, policy: Policy) -> None:
        self.start_s = start_s
        self.policy = policy
        self.took = 0.0
        self.modelled = 0.0

    def __call__(self, pairs: int) -> float:
        scale = self.took / self.modelled if self.modelled > 0 else 1.0
        return comparison_s(pairs, self.start_s, self.policy) * scale

    def timed(self, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``run()``, an interleaved comparison, with its seconds counted."""
        t0 = time.perf_counter()
        c = run()
        if c.get("process_pairs"):
            self.took += time.perf_counter() - t0
            self.modelled += comparison_s(int(c["process_pairs"]), self.start_s, self.policy)
        return c


def pair_start_s(trials: Sequence[TrialResult], cores: int) -> float:
    """Seconds to start a pair of processes for a final comparison, from the study's own trials
    (the median of their starts apart from preparation, plus CACHED_START_S); PAIR_START_S when
    none measured its start. A throughput configuration with several instances starts more
    processes at once than this counts; FinalCost's scaling takes that up in the final phase."""
    xs = [t.start_s for t in trials if math.isfinite(t.start_s)]
    if not xs:
        return PAIR_START_S
    # the two processes start at once: with fewer cores than processes they take turns
    return stats.median(xs) * max(1.0, 2.0 / max(1, cores)) + CACHED_START_S


def comparison_s(pairs: int, start_s: float, policy: Policy) -> float:
    """Seconds an interleaved comparison takes spread over ``pairs`` fresh pairs of processes
    starting in ``start_s``: each pair's start and warm-up, then the budget (both on the wall clock).
    A comparison that stops early (its CI tight) takes less; docs/benchmarks/history.md gives
    the model's check against measured comparisons."""
    return pairs * (start_s + policy.warmup_s) + policy.budget_s


def interleaved(a: RunConfig, b: RunConfig, setup: Setup, objective: str = "latency",
                 policy: Policy = COMPARE_POLICY, pairs: int | None = None) -> dict[str, Any]:
    """median(b) / median(a) from A B B A ... samples of two live sets of subprocesses (the one not
    being timed is paused), with the 95 % CI: time per call for latency, per item for throughput.
    The policy's warm-up and budget are spent on the wall clock: the samples' clock leaves out the
    pauses, resumes and pipes around each call and counts a batch's sample per item, so a budget
    metered by it runs several times over on a small model or a large batch.

    The budget is split over ``pairs`` fresh pairs of processes and their samples pooled: one
    process can run a few percent to 25 % slower than the next for its whole life (where its
    memory landed), which more samples from the same process cannot average out. The interval
    resamples the pairs of processes as well as the samples (``stats.grouped_ratio_ci``): the
    samples' own interval, taken as if every sample were independent, covers the ratio other
    processes find less often (``benchmarks/compare_coverage.py`` measures both; BENCHMARKS.md).
    ``process_pair_ratios`` gives each pair's own ratio, ``pooled_ci`` the samples' interval.
    """
    if a.key() == b.key():
        return itself()
    pairs = COMPARE_PROCESS_PAIRS if pairs is None else pairs
    each = replace(policy, budget_s=policy.budget_s / pairs, max_samples=max(policy.min_samples, policy.max_samples // pairs))
    groups_a: list[list[float]] = []
    groups_b: list[list[float]] = []
    try:
        for _ in range(pairs):
            # Both sides start and prepare side by side, then are timed in turn.
            with setup.group(a, wait=False) as ga, setup.group(b, wait=False) as gb:
                ga.ready()
                gb.ready()
                clock = VirtualClock(warmup=RESUME_WARMUP_CALLS)
                per_a = ga.items_per_call if objective == "throughput" else 1
                per_b = gb.items_per_call if objective == "throughput" else 1
                c = compare(clock.timed(gb, idle=(ga,), per=per_b), clock.timed(ga, idle=(gb,), per=per_a),
                            label_a=b.name, label_b=a.name or "best", policy=each, clock=clock, elapsed=time.perf_counter)
            n = min(len(c.a.samples), len(c.b.samples))
            groups_a.append(list(c.a.samples[:n]))
            groups_b.append(list(c.b.samples[:n]))
    except TrialFailed as exc:
        return {"ratio": math.nan, "ci_low": math.nan, "ci_high": math.nan, "error": str(exc)}
    out = summary(groups_a, groups_b, objective)
    out["process_pairs"] = pairs
    out["groups"] = {a.key(): groups_b, b.key(): groups_a}  # each side's samples, by process pair
    return out


def summary(groups_a: list[list[float]], groups_b: list[list[float]], objective: str) -> dict[str, Any]:
    """median(a) / median(b) over samples that came in groups (one per pair of processes), with
    the grouped 95 % CI; ``a`` is the baseline's side, ``b`` the best's."""
    unit = "item" if objective == "throughput" else "latency"
    xa = [x for g in groups_a for x in g]
    xb = [x for g in groups_b for x in g]
    pooled = stats.comparison_ci(xa, xb)
    lo, hi = stats.grouped_ratio_ci(groups_a, groups_b, pooled=pooled)
    return {"ratio": stats.median(xa) / stats.median(xb), "ci_low": lo, "ci_high": hi, "pairs": len(xa),
            f"baseline_{unit}_s": stats.median(xa), f"best_{unit}_s": stats.median(xb),
            "process_pair_ratios": [stats.median(ga) / stats.median(gb) for ga, gb in zip(groups_a, groups_b, strict=True) if ga],
            "pooled_ci": list(pooled)}


class Comparisons:
    """The interleaved comparisons of one study's last phase. Two configurations compared again pool
    their pairs of processes with the earlier comparisons': one process can run up to a quarter
    slower than the next for its whole life, and a comparison over one or two pairs can land on the
    slow side of it: reported apart, two comparisons of the same configurations can each exclude the
    other's ratio, and a best handed on by one is contradicted by the next. The pooled figure counts
    every pair of processes once and states how many came from earlier comparisons
    (``earlier_process_pairs``); ``process_pairs`` counts those run this time, ``pairs_run`` all
    this object ran."""

    def __init__(self, setup: Setup, objective: str, policy: Policy, *, deadline: float | None = None,
                 cost: FinalCost | None = None) -> None:
        self.setup = setup
        self.objective = objective
        self.policy = policy
        #: ``perf_counter`` seconds by which the study's budget ends, and what a comparison costs
        #: (:class:`FinalCost`): a comparison that would run past the end samples for less
        #: (:meth:`policy_for`), down to LATE_BUDGET_S
        self.deadline = deadline
        self.cost = cost
        #: the sampling budgets (seconds) of the comparisons cut short so
        self.shortened: list[float] = []
        self.pairs_run = 0
        #: per unordered pair of configuration keys, each side's sample groups so far
        self.seen: dict[frozenset[str], dict[str, list[list[float]]]] = {}

    def policy_for(self, pairs: int) -> Policy:
        """The policy of a comparison over ``pairs`` pairs of processes starting now: the study's,
        or, where it would end past the deadline, the same with its sampling budget cut by the
        overrun (not below LATE_BUDGET_S; its interval comes out wider, and it is counted in
        ``shortened``): a best handed on twice brings comparisons the reserve did not count."""
        if self.deadline is None or self.cost is None:
            return self.policy
        over = self.cost(pairs) - (self.deadline - time.perf_counter())
        if over <= 0:
            return self.policy
        budget = max(min(LATE_BUDGET_S, self.policy.budget_s), self.policy.budget_s - over)
        if budget >= self.policy.budget_s:
            return self.policy
        self.shortened.append(budget)
        return replace(self.policy, budget_s=budget)

    def shortened_note(self) -> str:
        """What :meth:`policy_for` cut, in one line ('' where nothing was)."""
        if not self.shortened:
            return ""
        lo, hi = min(self.shortened), max(self.shortened)
        span = f"{lo:.1f} s" if round(lo, 1) == round(hi, 1) else f"{lo:.1f}-{hi:.1f} s"
        return (f"the budget would have ended during {len(self.shortened)} final comparison(s): they sampled for "
                f"{span} instead of {self.policy.budget_s:.0f} s (their intervals are the wider for it)")

    def __call__(self, best: RunConfig, other: RunConfig, pairs: int) -> dict[str, Any]:
        """median(other) / median(best) over this comparison's pairs of processes and every
        earlier one's between the same two configurations."""
        policy = self.policy_for(pairs) if best.key() != other.key() else self.policy
        c = interleaved(best, other, self.setup, self.objective, policy, pairs=pairs)
        self.pairs_run += int(c.get("process_pairs") or 0)
        groups = c.pop("groups", None)
        if not groups:  # a configuration against itself, a failed comparison
            return c
        key = frozenset((best.key(), other.key()))
        earlier = self.seen.get(key)
        if earlier is None:
            self.seen[key] = {k: list(g) for k, g in groups.items()}
            return c
        before = len(earlier[best.key()])
        for k, g in groups.items():
            earlier[k] += g
        pooled = summary(earlier[other.key()], earlier[best.key()], self.objective)
        return {**pooled, "process_pairs": c.get("process_pairs", 0), "earlier_process_pairs": before,
                "this_comparison": {k: c[k] for k in ("ratio", "ci_low", "ci_high", "pairs") if k in c}}

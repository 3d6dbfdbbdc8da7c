"""The phases of a tuning study after its search (:class:`rooftune.tuning.study.Study` runs them
in this order, see its module's docstring): the best confirmed against the runners-up, the
guideline and every baseline compared with it interleaved, the comparisons whose pairs of
processes disagreed measured again, the fp32 answer beside a reduced-precision best, and the notes
read from all the trials; and the budget's share those comparisons are given before the search.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from rooftune.runconfig import RunConfig
from rooftune.tuning.compare import (
    Comparisons,
    FinalCost,
    against_baselines,
    comparison_s,
    guideline_wins,
    itself,
    pair_start_s,
    pooled_text,
    steadier,
)
from rooftune.tuning.result import (
    UNSTEADY_PAIR_SPREAD,
    NoVerifiedTrial,
    TrialResult,
    failure_groups,
    top1_only_note,
    winograd_note,
)
from rooftune.tuning.skips import data_notes, nothing_quantized_notes

#: Runners-up re-measured interleaved against the best before it is reported.
RUNNERS_UP = 2


class FinalPhases:
    """The final phases of :class:`rooftune.tuning.study.Study`, which this class is a part of: its
    methods read and set the study's shared state (the trials, the best, the comparisons, the
    notes, where the time went)."""

    def _reserve(self, seeds: bool) -> None:
        """The budget's share kept for the final comparisons (``search_until``, ``seeds_until``):
        what they cost on this machine, measured from the fixed trials' process starts; with no
        ``seeds`` and no trial to search, no runner-up is compared."""
        limit = self.trials if self.trials is not None else 10_000
        start_s = pair_start_s(self.results, self.platform.usable_cores)
        self.compared = len({b.config.key() for b in self.base.values() if b.ok})  # twins are compared once
        runners = RUNNERS_UP if limit > 0 or seeds else 0
        # the guideline is compared once (one pair of processes), like a runner-up
        reserve = (self.compared * comparison_s(self.compare_pairs, start_s, self.compare_policy)
                   + (runners + self.guide.ok) * comparison_s(1, start_s, self.compare_policy))
        self.search_until = self.budget_s - reserve
        self.phase_s["reserved"] = reserve
        self.phase_s["pair_start"] = start_s
        # the precision asked for comes before the search and before what the final phase can give
        # up (the runners-up, the second pairs of processes): the seeds may run until the least it
        # needs, one pair each
        self.seeds_until = (self.budget_s
                            - (self.compared + self.guide.ok) * comparison_s(1, start_s, self.compare_policy))

    def confirm_best(self) -> None:
        """The fastest verified trial, then (after a search) the runners-up re-measured interleaved
        against it: one trial's median can be off on a shared machine, and one that is faster with
        its whole CI takes the best's place."""
        self.cost = FinalCost(pair_start_s(self.results, self.platform.usable_cores), self.compare_policy)
        self.comparisons = Comparisons(self.setup, self.objective, self.compare_policy,
                                       deadline=self.started + self.budget_s, cost=self.cost)
        # a peer computing in a precision the study does not search (OpenVINO as installed picks
        # bf16 under --fp32) is compared as a peer, never the answer
        self.verified = [r for r in self.results if r.ok and r.precision in self.precisions]
        if not self.verified:
            raise NoVerifiedTrial(failure_groups(self.results), self.precisions)
        self.best = min(self.verified, key=lambda r: r.score(self.objective))
        if self.guidelines_only:
            return
        ranked = sorted(self.verified, key=lambda r: r.score(self.objective))
        # (the guideline and the baselines are compared with the best in the final comparisons in any case)
        fixed_keys = {r.config.key() for r in (self.guide, *self.base.values())}
        runners_up = [r for r in ranked[1:] if r.config.key() not in fixed_keys][:RUNNERS_UP]
        for i, other in enumerate(runners_up):
            # what the comparisons after these need at the least (one pair of processes each): a
            # runner-up, which may take the best's place, goes before a slow baseline's second pair
            if self.started + self.budget_s - time.perf_counter() < (self.compared + self.guide.ok + 1) * self.cost(1):
                self.notes.append(f"no time left in the budget to re-measure {len(runners_up) - i} runner(s)-up "
                                  "against the best, interleaved")
                break
            self.step("confirming the best against the runners-up, interleaved", i, len(runners_up))

            def again(b: RunConfig = self.best.config, o: RunConfig = other.config) -> dict[str, Any]:
                return self.comparisons(b, o, 1)

            c = self.cost.timed(again)
            if c.get("ci_high", math.inf) < 1.0:  # median(other) / median(best), all of it below 1
                self.notes.append(f"re-measured interleaved, {other.config.describe()} was {1 / c['ratio']:.2f}x faster "
                                  f"than {self.best.config.describe()} (trial medians said otherwise): it is the best")
                self.best = other

    def final_comparisons(self) -> None:
        """The guideline, then every baseline, against the best, interleaved: the reported figures.
        A baseline faster by the medians takes the best's place (once each); the guideline is then
        measured against the new best, and takes the place back by the rule of ``guideline_wins``."""
        best, guide = self.best, self.guide
        if guide.ok:
            # the guideline's distance from the best is a reported figure: interleaved, like the
            # speedups (two trial medians taken minutes apart are not comparable on a shared machine)
            self.step("the guideline against the best, interleaved", 0, 1)
            self.guide_vs_best = self.cost.timed(lambda: self.comparisons(best.config, guide.config, 1))
            if self.guide_vs_best.get("ci_high", math.inf) < 1.0:  # median(guideline) / median(best), all below 1
                self.notes.append(f"re-measured interleaved, the guideline was {1 / self.guide_vs_best['ratio']:.2f}x "
                                  f"faster than {best.config.describe()} (trial medians said otherwise): it is the best")
                best = guide
                self.guide_vs_best = itself()
            elif "error" in self.guide_vs_best:
                self.notes.append(f"the guideline could not be compared with the best: {self.guide_vs_best['error']}")
        promoted: set[str] = set()
        lost_to: dict[str, str] = {}
        taken_back: set[str] = set()
        retaken = False
        while True:
            compared_with = best.config.key()
            best, self.speedup = against_baselines(
                best, self.base, self.setup, self.objective, self.compare_policy, self.compare_pairs, self.notes,
                self.step, deadline=self.started + self.budget_s, cost=self.cost, comparisons=self.comparisons,
                promoted=promoted, eligible=lambda t: t.precision in self.precisions, lost_to=lost_to,
                retaken=taken_back)
            if self.guide_vs_best is None or best.config.key() == compared_with:
                break
            # a baseline took the best's place: the guideline is measured against it (pooled with
            # the comparison that handed it back where the guideline was the best then)
            self.step("the guideline against the new best, interleaved", 0, 1)
            self.guide_vs_best = g = self.comparisons(best.config, guide.config, 1)
            was_best = compared_with == guide.config.key()
            if retaken or not guideline_wins(g, was_best):
                break
            self.notes.append(f"the guideline, measured against {best.config.name or best.config.describe()}, read "
                              f"{1 / g['ratio']:.2f}x faster by the medians{pooled_text(g)} "
                              f"(95 % CI of guideline/best {g['ci_low']:.2f}-{g['ci_high']:.2f}): "
                              f"it is the best{' again' if was_best else ''}")
            best, self.guide_vs_best, retaken = guide, itself(), True
        self.best = best

    def steady(self) -> None:
        """The budget left spent on the comparisons whose pairs of processes disagreed."""
        self.notes += steadier(self.best, self.base, self.speedup, self.comparisons, self.cost,
                               self.started + self.budget_s, UNSTEADY_PAIR_SPREAD, self.step)

    def fp32_answer(self) -> None:
        """Where the best computes in a reduced precision: the fp32 answer beside it
        (:func:`_fp32_answer`)."""
        self.fp32_best, self.fp32_vs_peer = _fp32_answer(
            self.best, self.verified, self.base, self.speedup, self.comparisons, self.compare_pairs, self.objective,
            self.step, self.notes)

    def finish(self) -> None:
        """The final phase's time, and the notes read from the whole study's trials."""
        self.phase_s["final"] = time.perf_counter() - self.started - self.phase_s["fixed"] - self.phase_s["search"]
        self.phase_s["pairs"] = self.comparisons.pairs_run
        if shortened := self.comparisons.shortened_note():
            self.notes.append(shortened)
        if rewritten := winograd_note(self.best):
            self.notes.append(rewritten)
        if top1_only := top1_only_note(self.results, self.validated):
            self.notes.append(top1_only)
        self.notes += nothing_quantized_notes(self.results)
        self.notes += data_notes(self.best, self.split is not None, self.train is not None)

    def final_phases(self) -> None:
        """Every phase after the search, in order, on this machine: what one node of a cluster
        runs too, once the study is read back from the store."""
        self.confirm_best()
        self.final_comparisons()
        self.steady()
        self.fp32_answer()
        self.finish()
        self.save_best()


def _fp32_answer(best: TrialResult, verified: Sequence[TrialResult], base: dict[str, TrialResult],
                 speedup: dict[str, dict[str, Any]], comparisons: Any, pairs: int, objective: str,
                 step: Callable[[str, int, int], None],
                 notes: list[str]) -> tuple[TrialResult | None, dict[str, Any] | None]:
    """Where the best computes in a reduced precision: the fastest verified fp32 configuration
    (by its trial) and its interleaved comparison with the fp32 peer that ran fastest against the
    best (the smallest ratio), over ``pairs`` pairs of processes: the answer for a user who must
    keep fp32, beside the overall one; the peer itself where it reads faster. (None, None) where
    the best is fp32 or nothing compares."""
    if best.precision == "fp32":
        return None, None
    fp32 = [r for r in verified if r.precision == "fp32"]
    peers = [(c["ratio"], n) for n, c in speedup.items()
             if base[n].ok and base[n].precision == "fp32" and math.isfinite(c.get("ratio", math.nan))]
    if not fp32 or not peers:
        return None, None
    ours = min(fp32, key=lambda r: r.trial_score(objective))
    peer = min(peers)[1]
    step("the fp32 best against the fastest fp32 peer, interleaved", 0, 1)
    c = comparisons(ours.config, base[peer].config, pairs)
    if "error" in c:
        notes.append(f"the fp32 best could not be compared with {peer}: {c['error']}")
        return ours, None
    if c.get("pairs") and c["ratio"] < 1.0:
        # the peer read faster by the medians: the fp32 answer is the peer itself, as a baseline
        # that reads faster takes the best's place, so it is never slower than a user's own pick
        notes.append(f"the fastest fp32 trial, {ours.describe()}, read {1 / c['ratio']:.2f}x slower than {peer} "
                     f"interleaved (95 % CI of {peer}/it {c['ci_low']:.2f}-{c['ci_high']:.2f}): the fp32 best is {peer}")
        return base[peer], {**itself(), "peer": peer}
    return ours, {**c, "peer": peer}

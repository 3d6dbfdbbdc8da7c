"""What a tuning study gives back: one evaluated configuration (:class:`TrialResult`), the whole
study (:class:`TuneResult`) with the figures, ratios and warnings a reader takes from it, the key a
study is stored and resumed under, a trial written to a file (:func:`save_config`), and a study
that verified no configuration (:class:`NoVerifiedTrial`, its trials' errors grouped)."""

from __future__ import annotations

import hashlib
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rooftune.fileio import json_text, parse_json
from rooftune.runconfig import RunConfig
from rooftune.tuning.trial import TrialFailed

#: A final comparison whose pairs of processes' own ratios differ by more than this factor is
#: named as unsteady in the result: a chosen line in the gap between the spread of steady
#: comparisons (a few percent) and that of comparisons during which the host's speed changed
#: (BENCHMARKS.md, tuning run 38).
UNSTEADY_PAIR_SPREAD = 1.10
#: A trial median this many times off (either way) the same configuration's median in its
#: interleaved comparison is named in the result (``drifted``): on a quiet host the two agree
#: within a process's lot (a few percent to ~25 %); further apart, the host's load changed.
DRIFT = 1.5
#: The peers that quantize with the user's data (rooftune.tuning.guidelines.data_baselines): a
#: user's own int8 answer, compared apart from the peers as shipped.
QUANTIZING_PEERS = ("onnxruntime-int8-default", "nncf-accuracy-control")


@dataclass(frozen=True)
class TrialResult:
    """One evaluated configuration: its figures, or why it failed."""

    config: RunConfig
    ok: bool
    error: str = ""
    latency_s: float = math.nan
    p90_s: float = math.nan
    p99_s: float = math.nan
    throughput: float = math.nan
    verify: dict[str, Any] = field(default_factory=dict)
    prepare_s: float = math.nan
    artifact: str | None = None
    measurement: dict[str, Any] | None = None
    #: Seconds its process took to start apart from preparing the configuration (nan: not known).
    start_s: float = math.nan
    #: For ``conv=winograd``: (layers rewritten, eligible layers) in its artifact, read while the
    #: artifact exists (None: not such a configuration, or no record).
    rewritten: tuple[int, int] | None = None
    #: The precision the runtime computed in, where the configuration left it to the runtime
    #: (``precision="default"``: OpenVINO as installed picks bf16 on a CPU with native bf16); ""
    #: where it is the configuration's own.
    ran_precision: str = ""
    #: Where ``latency_s`` and ``throughput`` come from: ``trial`` (the trial's own median, taken
    #: in its own minute) or ``interleaved`` (its median in the final comparisons with the best,
    #: see :meth:`TuneResult.reported`); the trial's figures are then kept in ``trial_*``.
    figures_from: str = "trial"
    trial_latency_s: float = math.nan
    trial_throughput: float = math.nan

    @property
    def precision(self) -> str:
        """The precision the configuration computed in (``ran_precision`` where the runtime chose)."""
        return self.ran_precision or self.config.precision

    def score(self, objective: str) -> float:
        """Lower is better: latency, or inverse throughput."""
        if not self.ok:
            return math.inf
        return self.latency_s if objective == "latency" else 1.0 / self.throughput

    def trial_score(self, objective: str) -> float:
        """:meth:`score` from the trial's own median, whatever the reported figures are."""
        if self.figures_from == "trial":
            return self.score(objective)
        if not self.ok:
            return math.inf
        return self.trial_latency_s if objective == "latency" else 1.0 / self.trial_throughput

    def figures(self) -> dict[str, Any]:
        out = {"latency_s": self.latency_s, "p90_s": self.p90_s, "p99_s": self.p99_s,
               "throughput": self.throughput, "figures_from": self.figures_from}
        if self.figures_from != "trial":
            out.update(trial_latency_s=self.trial_latency_s, trial_throughput=self.trial_throughput)
        return out

    def describe(self) -> str:
        """The configuration, with how many layers ``conv=winograd`` rewrote in the artifact that
        ran (it keeps a layer direct where Winograd measured slower, possibly every layer)."""
        if self.rewritten is None:
            return self.config.describe()
        return self.config.describe({"conv": f" ({self.rewritten[0]} of {self.rewritten[1]} layers)"})

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "ok": self.ok, "error": self.error, **self.figures(),
                "precision": self.precision, "verify": self.verify, "prepare_s": self.prepare_s, "start_s": self.start_s, "artifact": self.artifact,
                "rewritten": None if self.rewritten is None else list(self.rewritten)}

    @classmethod
    def from_stored(cls, row: dict[str, Any]) -> TrialResult:
        r = row["result"]

        def num(key: str) -> float:
            v = r.get(key)
            return math.nan if v is None else float(v)

        return cls(config=RunConfig(**row["config"]), ok=row["status"] == "ok", error=r.get("error", ""),
                   latency_s=num("latency_s"), p90_s=num("p90_s"), p99_s=num("p99_s"), throughput=num("throughput"),
                   verify=r.get("verify", {}), prepare_s=num("prepare_s"), start_s=num("start_s"),
                   artifact=r.get("artifact"), rewritten=tuple(r["rewritten"]) if r.get("rewritten") else None,
                   ran_precision=r.get("precision", "") if r.get("precision") != row["config"].get("precision") else "")


@dataclass(frozen=True)
class TuneResult:
    model: str
    objective: str
    batch: int
    best: TrialResult
    guideline: TrialResult
    guideline_reasons: tuple[str, ...]
    baselines: dict[str, TrialResult]
    speedup: dict[str, dict[str, float]]
    trials: tuple[TrialResult, ...]
    notes: tuple[str, ...]
    duration_s: float
    resumed: int = 0
    #: The workload as a trial's process loads it: model, inputs, options.
    workload: dict[str, Any] = field(default_factory=dict)
    #: median(guideline) / median(best) from an interleaved comparison, with its 95 % CI; None
    #: when it was not measured (the guideline failed, or the comparison could not run).
    guideline_vs_best: dict[str, Any] | None = None
    #: Where the study's time went: seconds of the set-up, guideline and baselines (``fixed``), the search
    #: (``search``, int8 seeds included) and the final interleaved comparisons (``final``), the
    #: seconds kept for the latter before the search (``reserved``) and the pairs of processes
    #: the reported comparisons started (``pairs``), and the seconds a pair's start was expected to
    #: take, measured from the trials (``pair_start``); how many configurations measured before the
    #: search its sampler was told as finished trials (``told``).
    phase_s: dict[str, float] = field(default_factory=dict)
    #: The batch sizes the search could choose from (the throughput objective searches several).
    batches: tuple[int, ...] = ()
    #: Where the best computes in a reduced precision: the fastest verified fp32 configuration,
    #: and its interleaved comparison with the fastest fp32 peer (by its comparison with the best),
    #: so that the fp32 answer stands beside the overall one. None where the best is fp32.
    fp32_best: TrialResult | None = None
    fp32_vs_peer: dict[str, Any] | None = None
    #: A study on a cluster (rooftune.tuning.cluster): its platform, the nodes (and those of other
    #: platforms not used), the searched trials per node and per minute, which node ran each
    #: trial, and the node of the final comparisons. None on one machine.
    fleet: dict[str, Any] | None = None
    #: With the user's data and int8: each quantizable layer's sensitivity beside its roofline
    #: position and the mixed set the int8 seeds kept at higher precision
    #: (:meth:`rooftune.analysis.sensitivity.Sensitivity.to_dict`); None otherwise.
    sensitivity: dict[str, Any] | None = None
    #: A serving scenario's phase (rooftune.tuning.serving): every setup served, the best, the peers' ratios.
    serving: dict[str, Any] | None = None

    def batch_text(self) -> str:
        """``batch 1``, or, where the search chose the batch, the batches it chose from and the
        best's: ``batch searched over 1, 8, 32 (the best: 8)``."""
        if len(self.batches) < 2:
            return f"batch {self.batch}"
        return f"batch searched over {', '.join(map(str, self.batches))} (the best: {self.best.config.batch})"

    def time_line(self) -> str:
        """Where the study's time went, in one line (empty for a study without phases)."""
        p = self.phase_s
        if "final" not in p:
            return ""
        kept = f"; {p['reserved']:.0f} s were kept for them" if "reserved" in p else ""
        if "pair_start" in p:
            kept += f", at {p['pair_start']:.1f} s to start a pair"
        told = f" (its sampler told the {p['told']:.0f} measured before it)" if p.get("told") else ""
        return (f"time: set-up, guideline and baselines {p['fixed']:.0f} s, search {p['search']:.0f} s{told}, final "
                f"comparisons {p['final']:.0f} s ({p['pairs']:.0f} pairs of processes{kept}); "
                f"{self.duration_s:.0f} s in all")

    def guideline_gap(self) -> tuple[float, float, float, bool]:
        """How many times the best's time the guideline takes: (ratio, ci_low, ci_high,
        interleaved). From the interleaved comparison when there is one, else from the two
        trials' medians (no CI: nan); nan when the guideline failed."""
        c = self.guideline_vs_best
        if c and math.isfinite(c.get("ratio", math.nan)):
            return c["ratio"], c["ci_low"], c["ci_high"], True
        if not (self.guideline.ok and self.best.ok):
            return math.nan, math.nan, math.nan, False
        return (self.guideline.trial_score(self.objective) / self.best.trial_score(self.objective),
                math.nan, math.nan, False)

    def guideline_text(self) -> str | None:
        """What the guideline is beside the best, as the table's line and the report give it:
        '1.20x the best's latency (95 % CI 1.18-1.22, interleaved)'; 'the best itself'; a
        guideline faster by the medians but not with its whole CI (so not the best) said to be as
        fast as the best within its CI. None when the guideline failed."""
        gap, lo, hi, interleaved = self.guideline_gap()
        if gap != gap:
            return None
        if interleaved and (self.guideline_vs_best or {}).get("pairs") == 0:
            return "the best itself"
        what = "latency" if self.objective == "latency" else "time per sample"
        how = f" (95 % CI {lo:.2f}-{hi:.2f}, interleaved)" if interleaved else " (trial medians)"
        text = f"{gap:.2f}x the best's {what}{how}"
        if interleaved and gap < 1.0 <= hi:
            text += ", as fast as the best within its CI (it takes the best's place only with its whole CI below 1)"
        return text

    def comparison(self, name: str) -> dict[str, Any] | None:
        """The interleaved comparison of ``name`` (a baseline, or ``guideline``) with the best."""
        return self.guideline_vs_best if name == "guideline" else self.speedup.get(name)

    def interleaved(self, name: str) -> tuple[float, float] | None:
        """(``name``'s, the best's) median seconds per call (latency) or per item (throughput) in
        the interleaved comparison of ``name`` (a baseline, or ``guideline``) with the best; None
        where there was none (a failed or promoted configuration). For ``best``, its side of
        every comparison (their median), twice."""
        if name == "best":
            b = self.best_interleaved_s()
            return (b, b) if math.isfinite(b) else None
        c = self.comparison(name) or {}
        unit = "item" if self.objective == "throughput" else "latency"
        a, b = c.get(f"baseline_{unit}_s"), c.get(f"best_{unit}_s")
        if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
            return None
        return float(a), float(b)

    def reversed_by_interleaving(self) -> list[str]:
        """The guideline and baselines whose trial read faster than the best's, where the
        interleaved comparison found the best faster with its whole 95 % CI: each trial is one
        fresh process measured at its own moment, and a process can run several percent slower or
        faster than the next for its whole life; the interleaved figures are the reported ones."""
        out = []
        for name, tr in [("guideline", self.guideline), *self.baselines.items()]:
            c = self.comparison(name)
            if (tr.ok and self.best.ok and c and c.get("ci_low", math.nan) > 1.0
                    and tr.trial_score(self.objective) < self.best.trial_score(self.objective)
                    and tr.config.key() != self.best.config.key()):
                out.append(name)
        return out

    def reversal_line(self) -> str:
        """One line for the table's reader where :meth:`reversed_by_interleaving` names any
        configuration (empty otherwise)."""
        names = self.reversed_by_interleaving()
        if not names:
            return ""
        return (f"{', '.join(names)}: the trial read faster than the best's, but interleaved with it the best "
                f"was faster with its whole 95 % CI. A trial is one fresh process at its own moment, and a "
                f"process can run some percent faster or slower than the next for its whole life: the "
                f"interleaved figures (fresh pairs of processes, timed in turn) are the ones reported.")

    def unsteady(self) -> dict[str, list[float]]:
        """The guideline and baselines whose interleaved comparison with the best came out
        differently in its pairs of processes: each pair's own ratio, where the largest is more
        than :data:`UNSTEADY_PAIR_SPREAD` times the smallest. The reported ratio pools every pair
        and its interval resamples them; where the pairs disagree this much, the host's speed (or
        a process's lot in it) changed during the comparison, and a re-measurement may land
        anywhere in that interval."""
        out: dict[str, list[float]] = {}
        for name in ("guideline", *self.baselines):
            ratios = unsteady_ratios(self.comparison(name), UNSTEADY_PAIR_SPREAD)
            if ratios:
                out[name] = ratios
        return out

    def unsteady_line(self) -> str:
        """One line for the table's reader where :meth:`unsteady` names any comparison (empty
        otherwise)."""
        found = self.unsteady()
        if not found:
            return ""
        each = "; ".join(f"{name}: {', '.join(f'{x:.2f}' for x in ratios)}" for name, ratios in found.items())
        return (f"unsteady comparisons, each pair of processes' own ratio ({each}): the pairs disagree by more "
                f"than {UNSTEADY_PAIR_SPREAD - 1:.0%}, so the host's speed changed while they ran; the figure "
                f"reported pools them, and a re-measurement may land anywhere in its interval.")

    def drifted(self) -> dict[str, float]:
        """The configurations whose trial median is more than :data:`DRIFT` times off their own
        median in the interleaved comparison with the best (either way), with that factor: the
        machine's load changed between the trial and the comparison, so the table's trial times
        are not comparable with each other, while each ratio, its two sides timed in turn, still
        is."""
        out: dict[str, float] = {}
        for name, tr in [("guideline", self.guideline), *self.baselines.items()]:
            pair = self.interleaved(name)
            if not (tr.ok and pair):
                continue
            factor = tr.trial_score(self.objective) / pair[0]  # seconds per call (latency) or per item, both sides
            if math.isfinite(factor) and factor > 0 and max(factor, 1 / factor) > DRIFT:
                out[name] = factor
        # the best against its own side of every comparison (their median): a best that won its
        # place in the comparisons after a slow trial would otherwise show that trial's time
        if self.best.ok:
            factor = self.best.trial_score(self.objective) / self.best_interleaved_s()
            if math.isfinite(factor) and factor > 0 and max(factor, 1 / factor) > DRIFT:
                out = {"best": factor, **out}
        return out

    def best_interleaved_s(self) -> float:
        """The best's median seconds per call (latency) or per item (throughput) over its side of
        every interleaved comparison (the median of those medians); nan where there was none."""
        sides = [pair[1] for name in ("guideline", *self.baselines) if (pair := self.interleaved(name))]
        return float(statistics.median(sides)) if sides else math.nan

    def drift_line(self) -> str:
        """One line for the table's reader where :meth:`drifted` names any configuration."""
        found = self.drifted()
        if not found:
            return ""
        each = ", ".join(f"{name} {x:.2g}x" for name, x in found.items())
        return (f"trial times off their interleaved medians ({each}): the machine's load changed between the "
                f"trials and the comparisons, so compare the configurations by the interleaved ratios, not by the "
                f"trial columns.")

    def headlines(self) -> dict[str, dict[str, Any] | None]:
        """The two answers a tuning result states: the best against the fastest peer as shipped
        (any precision its vendor runs by default), and the fastest fp32 configuration against the
        fastest fp32 peer; with the user's data and int8, a third: the best against the fastest peer
        that quantizes with that data (:data:`QUANTIZING_PEERS`). Each: the peer's name and precision, ratio = peer's time / ours with its
        95 % CI (the peer as fast as ours: 1.0 for a peer that is the best itself), and what ``of``
        ours it is. The fastest peer is the one with the smallest ratio; None where no peer was
        compared."""
        def fastest(table: dict[str, dict[str, Any]], names: list[str]) -> tuple[str, dict[str, Any]] | None:
            found = [(n, table[n]) for n in names if math.isfinite((table.get(n) or {}).get("ratio", math.nan))]
            return min(found, key=lambda x: x[1]["ratio"]) if found else None

        def line(name: str, c: dict[str, Any], of: TrialResult) -> dict[str, Any]:
            return {"peer": name, "peer_precision": self.baselines[name].precision, "ratio": c["ratio"],
                    "ci_low": c.get("ci_low", math.nan), "ci_high": c.get("ci_high", math.nan),
                    "of": of.describe(), "precision": of.precision}

        ok = [n for n, b in self.baselines.items() if b.ok]
        shipped = fastest(self.speedup, [n for n in ok if n not in QUANTIZING_PEERS])
        quantizing = fastest(self.speedup, [n for n in ok if n in QUANTIZING_PEERS])
        fp32_peers = [n for n in ok if self.baselines[n].precision == "fp32"]
        if self.fp32_best is None:
            fp32 = fastest(self.speedup, fp32_peers)
            fp32_line = line(*fp32, self.best) if fp32 else None
        else:
            c = self.fp32_vs_peer or {}
            fp32_line = (line(c["peer"], c, self.fp32_best)
                         if math.isfinite(c.get("ratio", math.nan)) and c.get("peer") in self.baselines else None)
        return {"best_peer_as_shipped": line(*shipped, self.best) if shipped else None,
                "best_fp32_peer": fp32_line,
                **({"best_quantizing_peer": line(*quantizing, self.best)} if quantizing else {})}

    def headline_lines(self) -> list[str]:
        """The two headlines in words, for the table's reader and the report."""
        out = []
        labels = {"best_peer_as_shipped": "over the best peer as shipped",
                  "best_fp32_peer": "fp32 over the best fp32 peer",
                  "best_quantizing_peer": "over the best peer quantizing with your data"}
        for key, h in self.headlines().items():
            if h is None:
                continue
            ci = f"95 % CI {h['ci_low']:.2f}-{h['ci_high']:.2f}" if math.isfinite(h["ci_low"]) else "no CI"
            out.append(f"{labels[key]}: {h['ratio']:.2f}x ({ci}) against {h['peer']} ({h['peer_precision']}), "
                       f"with {h['of']}")
        return out

    def with_interleaved_figures(self) -> TuneResult:
        """This result with the reported figures of the best, the guideline and every baseline
        taken from the interleaved comparisons, each trial's own kept as ``trial_*``: a trial is
        one process timed in its own minute (a slow stretch of a shared host slows all of it), while the
        ratios beside the figures come from both sides timed in turn. The best reads its median
        over its side of every comparison; a configuration compared with it reads the best's
        figure times the ratio measured between them, so that the table's times divide into its
        ratios. A configuration that was not compared (failed, or the best itself) keeps its
        trial's figures. ``p90_s``/``p99_s`` stay the trial's."""
        best_s = self.best_interleaved_s()
        if not (self.best.ok and math.isfinite(best_s) and best_s > 0):
            return self

        def at(tr: TrialResult, seconds: float) -> TrialResult:
            if not (tr.ok and math.isfinite(seconds) and seconds > 0) or tr.figures_from != "trial":
                return tr
            factor = seconds / tr.score(self.objective)  # seconds per call, or per item
            # the objective's own figure is ``seconds`` itself (x * (s / x) can be off by a unit in
            # the last place), the other one scaled alike
            latency = seconds if self.objective == "latency" else tr.latency_s * factor
            throughput = 1.0 / seconds if self.objective != "latency" else tr.throughput / factor
            return replace(tr, latency_s=latency, throughput=throughput,
                           figures_from="interleaved", trial_latency_s=tr.latency_s, trial_throughput=tr.throughput)

        def compared(name: str, tr: TrialResult) -> TrialResult:
            c = self.comparison(name) or {}
            if tr.config.key() == self.best.config.key():
                return at(tr, best_s)
            return at(tr, best_s * c.get("ratio", math.nan)) if c.get("pairs") else tr

        # the fp32 best reads its peer's figure divided by the ratio measured between them, so that
        # its row and its peer's divide into that ratio too (the peer itself: the peer's figure)
        fp32_best = self.fp32_best
        c = self.fp32_vs_peer or {}
        peer_ratio = (self.speedup.get(c.get("peer", "")) or {}).get("ratio", math.nan)
        if fp32_best is not None and math.isfinite(peer_ratio) and math.isfinite(c.get("ratio", math.nan)):
            fp32_best = at(fp32_best, best_s * peer_ratio / c["ratio"])
        return replace(self, best=at(self.best, best_s), guideline=compared("guideline", self.guideline),
                       baselines={n: compared(n, b) for n, b in self.baselines.items()}, fp32_best=fp32_best)

    def _gap_dict(self) -> dict[str, Any]:
        ratio, lo, hi, interleaved = self.guideline_gap()
        if not math.isfinite(ratio):
            return {"vs_best": None}
        return {"vs_best": ratio, "vs_best_ci_low": lo if interleaved else None,
                "vs_best_ci_high": hi if interleaved else None, "vs_best_interleaved": interleaved}

    def to_dict(self) -> dict[str, Any]:
        failed = [t for t in self.trials if not t.ok]
        return {
            "model": self.model, "objective": self.objective, "batch": self.batch, "batches": list(self.batches),
            "best": {"name": self.best.config.name, "description": self.best.describe(), **self.best.to_dict(),
                     "interleaved_median_s": self.best_interleaved_s()},
            "guideline": {"reasons": list(self.guideline_reasons), "description": self.guideline.describe(),
                          **self.guideline.to_dict(),
                          **self._gap_dict()},
            "baselines": {k: v.to_dict() for k, v in self.baselines.items()},
            "speedup": self.speedup,
            "trials": {"count": len(self.trials), "failed": len(failed), "resumed": self.resumed,
                       "failures": [{"config": t.config.describe(), "error": t.error} for t in failed],
                       "all": [t.to_dict() for t in self.trials]},
            "notes": list(self.notes), "duration_s": self.duration_s, "phase_s": self.phase_s,
            "unsteady": self.unsteady(), "drifted": self.drifted(),
            "headlines": self.headlines(),
            "fp32": None if self.fp32_best is None else {
                "best": {"description": self.fp32_best.describe(), **self.fp32_best.to_dict()},
                "vs_peer": self.fp32_vs_peer},
            **({"fleet": self.fleet} if self.fleet is not None else {}),
            **({"sensitivity": self.sensitivity} if self.sensitivity is not None else {}),
            **({"serving": self.serving} if self.serving is not None else {}),
        }


def study_key(model: str, objective: str, batch: int, platform_id: str, space: dict[str, Any]) -> str:
    """The key a study's trials are stored under: the same model, objective, batch, platform and
    search space resume the same study."""
    text = json_text({"model": model, "objective": objective, "batch": batch, "platform": platform_id, "space": space},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


#: Error messages a study's failure names in its one line (every group is in ``failures``).
ERRORS_NAMED = 3


def failure_groups(trials: Iterable[TrialResult]) -> tuple[tuple[int, str], ...]:
    """The failed trials' errors, each message once with how many trials gave it: the most
    frequent first, the first seen first among equals."""
    counts = Counter(t.error or "failed, no error given" for t in trials if not t.ok)
    return tuple((n, error) for error, n in counts.most_common())


def failures_text(groups: Sequence[tuple[int, str]], named: int = ERRORS_NAMED) -> str:
    """``44 trials: WorkloadError: ...; 1 trial: ...``, the first ``named`` groups, then how many
    more errors in how many trials."""
    parts = [f"{n} trial{'s' if n != 1 else ''}: {error}" for n, error in groups[:named]]
    rest = groups[named:]
    if rest:
        more = sum(n for n, _ in rest)
        parts.append(f"and {len(rest)} other error{'s' if len(rest) != 1 else ''} in {more} trial{'s' if more != 1 else ''}")
    return "; ".join(parts)


class NoVerifiedTrial(TrialFailed):
    """No configuration of a study ran and verified in the precisions it searched. ``failures``:
    its trials' errors grouped by message with their counts (:func:`failure_groups`), which the
    message names too, so that the one line a command prints says why."""

    def __init__(self, failures: Sequence[tuple[int, str]], precisions: Sequence[str] = ()) -> None:
        self.failures = tuple((int(n), str(error)) for n, error in failures)
        self.precisions = tuple(precisions)
        if self.failures:
            why = f": {failures_text(self.failures)}"
        else:  # every trial ran, in a precision the study does not search (a peer picking its own)
            why = f" in {', '.join(self.precisions) or 'the precisions searched'}"
        super().__init__(f"no configuration ran and verified{why}")

    def __reduce__(self) -> tuple[Any, ...]:  # raised on a cluster's node, read back here
        return type(self), (self.failures, self.precisions)


def unsteady_ratios(c: dict[str, Any] | None, spread: float) -> list[float] | None:
    """A comparison's pairs of processes' own ratios where the largest is more than ``spread``
    times the smallest (None otherwise, or with fewer than two pairs)."""
    ratios = [float(x) for x in (c or {}).get("process_pair_ratios") or () if math.isfinite(x) and x > 0]
    return ratios if len(ratios) >= 2 and max(ratios) > spread * min(ratios) else None


def winograd_record(trial: TrialResult) -> dict[str, Any] | None:
    """For a configuration with ``conv=winograd``: what was measured beside its artifact (its
    eligible ``layers``, each with ``chosen`` and ``speedup``, and the whole ``network`` with and
    without the layers chosen), None where there is no such record."""
    if trial.config.option("conv") != "winograd" or not trial.artifact:
        return None
    path = Path(trial.artifact).with_suffix(".json")
    try:
        record = parse_json(path.read_bytes())
    except (OSError, ValueError):  # (parse_json's one error, for a file nested deep too)
        return None
    return record if isinstance(record, dict) and isinstance(record.get("layers", []), list) else None


def winograd_layers(trial: TrialResult) -> list[dict[str, Any]] | None:
    """For a configuration with ``conv=winograd``: its eligible layers as measured beside its
    artifact (each with ``chosen`` and ``speedup``), None where there is no such record."""
    record = winograd_record(trial)
    return None if record is None else record.get("layers", [])


def winograd_note(trial: TrialResult) -> str:
    """For a configuration with ``conv=winograd``: which layers its artifact rewrote (from what was
    measured per layer beside it), else ''."""
    record = winograd_record(trial)
    if record is None:
        return ""
    layers = record.get("layers", [])
    network = record.get("network") or {}
    chosen = [x for x in layers if x.get("chosen")]
    whole = (f"{network['speedup']:.2f}x ({network['ci'][0]:.2f}-{network['ci'][1]:.2f})"
             if network.get("speedup") is not None and network.get("ci") else "")
    if not chosen and network.get("kept") is False:
        return (f"conv=winograd: {network.get('layers')} of the {len(layers)} eligible 3x3 layers measured faster by "
                f"Winograd alone, but the network with them ran {whole} as fast as without: none kept, the model "
                "runs its direct convolutions")
    if not chosen:
        return (f"conv=winograd: none of the {len(layers)} eligible 3x3 layers measured faster by Winograd on this "
                "machine; the model runs its direct convolutions")
    speedups = [x["speedup"] for x in chosen if x.get("speedup") is not None]
    span = f" (each {min(speedups):.2f}-{max(speedups):.2f}x as fast between 1x1 neighbours, weights cold)" if speedups else ""
    net = f"; the network {whole} as fast as without them" if whole else ""
    return f"conv=winograd: Winograd F(4x4,3x3) on {len(chosen)} of the {len(layers)} eligible 3x3 layers{span}{net}"


def top1_only_note(trials: Sequence[TrialResult], validated: bool) -> str:
    """Where the built-in int8 guard refused trials on top-1 agreement alone (their mean cosine
    passed), a line saying so: top-1 is the argmax over the output's last dimension, the answer of
    a classifier but not of every output (an LSTM's hidden states, features); ``--validate``
    takes the check that matters. Empty when a validation function was given or none was refused
    so."""
    from rooftune.tuning.verify import INT8_MIN_COSINE, INT8_MIN_TOP1

    if validated:
        return ""
    refused = [t for t in trials if not t.ok and t.config.precision == "int8" and t.verify
               and t.verify.get("cosine", 0.0) >= INT8_MIN_COSINE and t.verify.get("top1", 1.0) < INT8_MIN_TOP1]
    if not refused:
        return ""
    runtimes = ", ".join(dict.fromkeys(t.config.runtime for t in refused))
    t = max(refused, key=lambda t: t.verify["cosine"])
    return (f"{len(refused)} int8 trial(s) ({runtimes}) were refused on top-1 agreement alone (e.g. "
            f"{t.verify['top1']:.1%} < {INT8_MIN_TOP1:.0%}, mean cosine {t.verify['cosine']:.4f}): top-1 is the "
            f"argmax over the output's last dimension; where that is not the model's answer (hidden states, "
            f"features), --validate module:function with the check that matters may accept them")



def save_config(trial: TrialResult, path: Path, workload: dict[str, Any] | None = None,
                calibration_size: int | None = None, validate: str | None = None,
                data_spec: dict[str, Any] | None = None) -> Path:
    """A trial's configuration as JSON, with the workload it was measured on (what
    ``python -m rooftune.tuning.replay`` runs) and its prepared artifact copied beside it; an
    int8 configuration also records the size of its (seeded) calibration set, or the user's data
    it was calibrated on (``data_spec``: :meth:`rooftune.workload.data.DataSpec.as_dict`), so that
    a replay quantizes the model exactly as the trial did."""
    from rooftune.fileio import copy_atomic, write_atomic
    from rooftune.runtimes.base import weights_of

    path.parent.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {"config": trial.config.to_dict(), "figures": trial.figures(), "verify": trial.verify}
    if workload is not None:
        data["workload"] = workload
    if trial.config.precision == "int8" and calibration_size is not None:
        data["calibration"] = calibration_size
    if trial.config.precision == "int8" and data_spec is not None:
        # quantized on the user's data: a runtime without an artifact (PyTorch's) quantizes again
        # on the same calibration part when the file is loaded
        data["data"] = data_spec
    if validate:  # the check its trials passed in place of the built-in guard (rooftune.load_tuned applies it)
        data["validate"] = validate
    if trial.artifact and Path(trial.artifact).exists():
        src = Path(trial.artifact)
        dst = path.with_name(path.stem + "_" + src.name)
        copy_atomic(src, dst)
        weights = weights_of(src)
        if weights is not None and weights.exists():
            copy_atomic(weights, dst.with_suffix(".bin"))
        if src.with_suffix(".json").exists():  # what the Winograd rewrite measured per layer
            copy_atomic(src.with_suffix(".json"), dst.with_suffix(".json"))
        data["artifact"] = str(dst)
    write_atomic(path, json_text(data, indent=2))  # last: a configuration never names a missing artifact
    return path

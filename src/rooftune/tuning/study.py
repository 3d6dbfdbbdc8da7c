"""`rooftune tune`: guideline and baselines first, then an Optuna search within a budget, then
the best re-measured interleaved against every baseline.

    reference = fp32 eager output of the workload (saved for the trials)
    evaluate(guideline), evaluate(each baseline)            # each in a fresh subprocess
    evaluate(guideline in each reduced precision allowed)   # int8 / bf16 seeds
    while budget and trials remain: config = TPE.ask(); evaluate(config); TPE.tell(...)
    best = fastest verified trial, confirmed against the runners-up interleaved
    compare(best, guideline) interleaved -> how far the instant configuration is from the best
    for each baseline, fastest first: compare(best, baseline) interleaved -> ratio, CI
        (a baseline faster by the medians becomes the best, once; the others are compared again)
    two configurations compared twice: both comparisons' pairs of processes pooled (Comparisons)

evaluate(config) = start a worker with the config's environment; prepare; compare its output with
the reference (a wrong output is a failed trial, never a best); measure with the harness; store.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from rooftune.bench import Measurement, Policy, stats
from rooftune.bench.canary import Steal, steal_warning
from rooftune.errors import InvalidArgument, as_names, is_int, is_real
from rooftune.platform.processes import owned_tempdir
from rooftune.runtimes.base import weights_of
from rooftune.tuning.compare import (
    COMPARE_POLICY,
    COMPARE_PROCESS_PAIRS,
    Comparisons,
    FinalCost,
    against_baselines,
    comparison_s,
    guideline_wins,
    itself,
    pair_start_s,
    pooled_text,
    steadier,
    unsteady_ratios,
)
from rooftune.tuning.config import ALLOCATORS, RunConfig, allocator_library
from rooftune.tuning.guidelines import (
    baselines,
    guideline,
    precision_seeds,
    runtime_seeds,
    source_seeds,
    winograd_share,
)
from rooftune.tuning.trial import PREPARE_TIMEOUT_S, Group, TrialFailed

OBJECTIVES = ("latency", "throughput")
#: A final comparison whose pairs of processes' own ratios differ by more than this factor is
#: named as unsteady in the result. A chosen line, set in the gap of a measured spread: of the
#: 33 comparisons over two pairs in tuning run 38 (Zen 5 VM, BENCHMARKS.md), 27 had their pairs
#: within 1.08x of each other (25 within 1.031x) and the other six 1.13-1.45x apart; the main
#: job's vanilla comparison once read 1.48 and 1.79.
UNSTEADY_PAIR_SPREAD = 1.10
#: A trial median this many times off (either way) the same configuration's median in its
#: interleaved comparison is named in the result (``drifted``): on a quiet host the two agree
#: within a few percent to ~25 % (a process's lot), on a busy one they were 2-100x apart.
DRIFT = 1.5
#: Default budget of a whole study (the issue's suite allows 5 minutes per model).
DEFAULT_BUDGET_S = 240.0
#: Timing of one trial: latency samples are single inferences, so p90/p99 are per inference.
TRIAL_POLICY = Policy(number=1, warmup_s=0.3, budget_s=2.0, min_samples=10, target_rel_ci=0.02)
#: Seed of the TPE sampler: the same study on the same machine asks the same questions.
SEED = 0
#: Finished trials (told ones included) before TPE samples from its model rather than at random.
STARTUP_TRIALS = 3
#: Runners-up re-measured interleaved against the best before it is reported.
RUNNERS_UP = 2
#: A failed trial is told to the sampler as this many times the slowest verified one.
FAILED_PENALTY = 10.0
#: Proposals in a row of configurations already measured after which the search stops.
MAX_REPEATS = 25

Progress = Callable[[str, int, int], None]


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
        machine's load changed between the trial and the comparison (on a busy 2-core VM trials
        read 2-100x the comparisons' medians), so the table's trial times are not comparable with
        each other, while each ratio, its two sides timed in turn, still is."""
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

    def peer_precision(self, name: str) -> str:
        """The precision the baseline ``name`` computed in."""
        return self.baselines[name].precision

    def headlines(self) -> dict[str, dict[str, Any] | None]:
        """The two answers a tuning result states: the best against the fastest peer as shipped
        (any precision its vendor runs by default), and the fastest fp32 configuration against the
        fastest fp32 peer. Each: the peer's name and precision, ratio = peer's time / ours with its
        95 % CI (the peer as fast as ours: 1.0 for a peer that is the best itself), and what ``of``
        ours it is. The fastest peer is the one with the smallest ratio; None where no peer was
        compared."""
        def fastest(table: dict[str, dict[str, Any]], names: list[str]) -> tuple[str, dict[str, Any]] | None:
            found = [(n, table[n]) for n in names if math.isfinite((table.get(n) or {}).get("ratio", math.nan))]
            return min(found, key=lambda x: x[1]["ratio"]) if found else None

        def line(name: str, c: dict[str, Any], of: TrialResult) -> dict[str, Any]:
            return {"peer": name, "peer_precision": self.peer_precision(name), "ratio": c["ratio"],
                    "ci_low": c.get("ci_low", math.nan), "ci_high": c.get("ci_high", math.nan),
                    "of": of.describe(), "precision": of.precision}

        ok = [n for n, b in self.baselines.items() if b.ok]
        shipped = fastest(self.speedup, ok)
        fp32_peers = [n for n in ok if self.peer_precision(n) == "fp32"]
        if self.fp32_best is None:
            fp32 = fastest(self.speedup, fp32_peers)
            fp32_line = line(*fp32, self.best) if fp32 else None
        else:
            c = self.fp32_vs_peer or {}
            fp32_line = (line(c["peer"], c, self.fp32_best)
                         if math.isfinite(c.get("ratio", math.nan)) and c.get("peer") in self.baselines else None)
        return {"best_peer_as_shipped": line(*shipped, self.best) if shipped else None,
                "best_fp32_peer": fp32_line}

    def headline_lines(self) -> list[str]:
        """The two headlines in words, for the table's reader and the report."""
        out = []
        labels = {"best_peer_as_shipped": "over the best peer as shipped",
                  "best_fp32_peer": "fp32 over the best fp32 peer"}
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
        one process timed in its own minute (a slow stretch of a shared host reads 2x), while the
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
            return replace(tr, latency_s=tr.latency_s * factor, throughput=tr.throughput / factor,
                           figures_from="interleaved", trial_latency_s=tr.latency_s, trial_throughput=tr.throughput)

        def compared(name: str, tr: TrialResult) -> TrialResult:
            c = self.comparison(name) or {}
            if tr.config.key() == self.best.config.key():
                return at(tr, best_s)
            return at(tr, best_s * c.get("ratio", math.nan)) if c.get("pairs") else tr

        fp32_best = self.fp32_best
        c = self.fp32_vs_peer or {}
        unit = "item" if self.objective == "throughput" else "latency"
        if fp32_best is not None and c.get(f"best_{unit}_s"):
            fp32_best = at(fp32_best, float(c[f"best_{unit}_s"]))
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
        }


def study_key(model: str, objective: str, batch: int, platform_id: str, space: dict[str, Any]) -> str:
    text = json.dumps({"model": model, "objective": objective, "batch": batch, "platform": platform_id, "space": space},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class Setup:
    """What every trial of a study shares: the workload, its inputs, the fp32 eager reference output
    and, for int8, the calibration set with its reference outputs (files per batch size, made on
    demand). The inputs' file lets a process that runs a prepared artifact skip building the model."""

    workload: dict[str, Any]
    workdir: Path
    int8: bool = False
    calibration_size: int = 0
    validate: str | None = None
    #: How many output tensors the model returns (known once a reference is made).
    outputs: int = 0
    _files: dict[int, tuple[Path, Path | None]] = field(default_factory=dict)

    def files(self, batch: int) -> tuple[Path, Path | None]:
        if batch not in self._files:
            from rooftune.runtimes import output_tensors
            from rooftune.runtimes.quantize import calibration_inputs
            from rooftune.workload import load_workload

            w = self.workload
            wl = load_workload(w["model"], batch=batch, inputs=w.get("inputs"), options=w.get("options"), check=False)
            reference = self.workdir / f"reference-b{batch}.pt"
            torch.save(tuple(wl.inputs), self.workdir / f"inputs-b{batch}.pt")
            with torch.no_grad():
                ref = output_tensors(wl.module(*wl.inputs))
            torch.save(ref, reference)
            self.outputs = len(ref)
            calibration = None
            if self.int8:
                xs = calibration_inputs(wl.inputs, self.calibration_size)
                with torch.no_grad():
                    outs = [output_tensors(wl.module(*x)) for x in xs]
                calibration = self.workdir / f"calibration-b{batch}.pt"
                torch.save({"inputs": xs, "outputs": outs}, calibration)
            self._files[batch] = (reference, calibration)
        return self._files[batch]

    def group(self, config: RunConfig, prepare_timeout_s: float = PREPARE_TIMEOUT_S, wait: bool = True) -> Group:
        reference, calibration = self.files(config.batch)
        return Group(config, self.workload, reference, self.workdir, prepare_timeout_s, calibration, self.validate,
                     wait=wait, inputs=self.workdir / f"inputs-b{config.batch}.pt")


def _evaluate(config: RunConfig, setup: Setup, policy: Policy = TRIAL_POLICY,
              prepare_timeout_s: float = PREPARE_TIMEOUT_S) -> TrialResult:
    try:
        with setup.group(config, prepare_timeout_s) as g:
            info = g.info
            verify = info["verify"]
            if not verify["ok"]:
                return TrialResult(config, False, error=f"wrong output: {verify['why']}", verify=verify,
                                   prepare_s=info["prepare_s"], start_s=info.get("start_s", math.nan))
            md = g.measure(_policy_dict(policy), label=f"trial.{config.runtime}")
            items = g.items_per_call
    except TrialFailed as exc:
        return TrialResult(config, False, error=str(exc))
    m = Measurement.from_dict(md)
    xs = list(m.samples)
    r = TrialResult(
        config, True, latency_s=m.median, p90_s=stats.quantile(xs, 0.9), p99_s=stats.quantile(xs, 0.99),
        throughput=items / m.median, verify=verify, prepare_s=info["prepare_s"],
        start_s=info.get("start_s", math.nan), artifact=info.get("artifact"), measurement=md,
        ran_precision=info["precision"] if info.get("precision", config.precision) != config.precision else "",
    )
    layers = winograd_layers(r)  # the artifact's folder goes with the study
    return r if layers is None else replace(r, rewritten=(sum(1 for x in layers if x.get("chosen")), len(layers)))


#: How a trial whose process a signal ended reads (rooftune.tuning.trial).
CRASHED = "the trial process crashed (exit -"
#: glibc's malloc aborting on a pointer it did not allocate: what a preloaded allocator and a
#: library bound to glibc's own malloc (OpenVINO's plugins here) do to each other.
HEAP_ABORTS = ("free(): ", "double free", "munmap_chunk", "malloc(): ", "realloc(): ", "corrupted ")
#: A segmentation fault or bus error that printed nothing.
SILENT_FAULTS = (f"{CRASHED}11):", f"{CRASHED}7):")


def _crashed_under_preload(trial: TrialResult, config: RunConfig) -> bool:
    """Whether ``trial``'s process was aborted by glibc's heap checks running ``config``'s runtime
    under the same preloaded allocator, or ended by SIGSEGV or SIGBUS there with nothing on its
    stderr (a process that had logged a line before the fault is left to the other rules). Such a
    crash comes from the pair, not from the other settings: OpenVINO under jemalloc or tcmalloc
    crashed in all 82 of its trials in four suites of seven studies on a Zen 4 VM ("free(): invalid
    pointer", "munmap_chunk(): invalid pointer", "double free or corruption"), about one trial in
    ten of those searches, while every other runtime ran under both; across the stores of later
    sessions on that VM, the 25 trial processes that a signal ended were all OpenVINO's under a
    preloaded allocator: 22 heap aborts, two silent SIGSEGVs and one silent SIGBUS. Those aborts
    came from oneTBB loading hwloc with RTLD_DEEPBIND, which a configuration's environment now turns
    off (``TBB_ENABLE_SANITIZERS``, :meth:`RunConfig.environment`); the rule stays for a library
    that binds otherwise. The study runs such a pair once. Other crashes (a signal with a message of its own, the out-of-memory killer's
    SIGKILL) are the configuration's own."""
    error = trial.error or ""
    same_pair = (config.allocator != "glibc" and trial.config.allocator == config.allocator
                 and trial.config.runtime == config.runtime)
    if trial.ok or not same_pair or not error.startswith(CRASHED):
        return False
    return any(sig in error for sig in HEAP_ABORTS) or error.rstrip() in SILENT_FAULTS


NOT_RUN = "not run: "

#: How OpenVINO's PyTorch frontend refuses a model it has no conversion rule for some op of.
CONVERSION_FAILED = "OpConversionFailure: "
#: How a trial whose quantizer left the whole model in fp32 fails (rooftune.runtimes.quantize).
NOTHING_QUANTIZED = "quantized no op of this model"


def _frontend_refused(trial: TrialResult, config: RunConfig) -> bool:
    """Whether ``trial`` found that OpenVINO's PyTorch frontend cannot convert the model that
    ``config`` would convert the same way. The ops it has no rule for are the model's, whatever the
    threads, hint, allocator or precision (int8 quantizes the converted model), so the study
    converts such a model from PyTorch once; from the ONNX export it may still run."""
    def from_pytorch(c: RunConfig) -> bool:
        return c.runtime == "openvino" and c.option("source") == "pytorch"

    return (not trial.ok and from_pytorch(trial.config) and from_pytorch(config)
            and (trial.error or "").startswith(CONVERSION_FAILED))


def _nothing_quantized(trial: TrialResult, config: RunConfig) -> bool:
    """Whether ``trial`` found that ``config``'s runtime quantizes no op of the model (no static
    quantizer has GRUs): another int8 configuration of that runtime, from the same source graph,
    would fail the same way, whatever its threads or allocator."""
    def int8_of(c: RunConfig) -> tuple[str, str] | None:
        return (c.runtime, c.option("source")) if c.precision == "int8" else None

    return (not trial.ok and int8_of(trial.config) is not None and int8_of(trial.config) == int8_of(config)
            and NOTHING_QUANTIZED in (trial.error or ""))


def _policy_dict(policy: Policy) -> dict[str, Any]:
    return {k: getattr(policy, k) for k in ("number", "warmup_s", "budget_s", "min_samples", "target_rel_ci")}


#: Batch sizes the throughput objective searches when the user fixes none.
THROUGHPUT_BATCHES = (1, 2, 4, 8, 16, 32)


def search_space(platform: Any, available: dict[str, Any], allow: Sequence[str], *, objective: str = "latency",
                 batch: int | None = None, winograd: bool = True) -> dict[str, Any]:
    """The dimensions the search may set on this machine (what is not installed is left out);
    ``winograd`` False: the model has no convolution Winograd computes, and the runtimes'
    ``conv`` option would change nothing."""
    cores = platform.usable_cores
    precisions = {}
    for n, rt in available.items():
        ok = [p for p in allow if rt.unsupported(RunConfig(runtime=n, precision=p)) is None]
        if ok:
            precisions[n] = ok
    throughput = objective == "throughput"
    allocators = [a for a in ALLOCATORS if a == "glibc" or allocator_library(a)]
    omp_lib = ((platform.openmp or {}).get("library") or "")
    intel = omp_lib.startswith(("libiomp", "libomp"))
    return {
        "runtime": sorted(precisions),
        "precisions": precisions,
        "batch": [batch] if batch else list(THROUGHPUT_BATCHES) if throughput else [1],
        "instances": [1, cores] if throughput else [1, 1],
        "intra_threads": [1, cores],
        "inter_threads": [1, cores],
        "memory_format": ["contiguous", "channels_last"],
        "allocator": allocators,
        "bind": ["none", "close", "spread"],
        # "default": nothing set, the OpenMP runtime's own spin-then-sleep (what a baseline runs)
        "wait": ["default", "passive", "active"] if not intel else ["default", "blocktime0", "blocktime1", "blocktime200"],
        # each runtime's own knobs, less the values it cannot run here (OpenVINO from ONNX without onnx)
        "runtime_options": {n: {k: [x for x in v if _runs(rt, n, {k: x})] for k, v in rt.options.items()
                                if winograd or k != "conv"}
                            for n, rt in available.items()},
    }


def _runs(rt: Any, name: str, options: dict[str, Any]) -> bool:
    return rt.unsupported(RunConfig(runtime=name, runtime_options=options)) is None


def _suggest(trial: Any, space: dict[str, Any]) -> RunConfig:
    """A configuration from the space, asking only what matters for the chosen runtime (the OpenMP
    environment and the layout for runtimes on the OpenMP pool, inter-op threads where a runtime
    uses them), so that TPE does not spend trials on settings that change nothing."""
    from rooftune.runtimes import get_runtime

    runtime = trial.suggest_categorical("runtime", space["runtime"])
    rt = get_runtime(runtime)
    options = {}
    for key, values in space["runtime_options"].get(runtime, {}).items():
        options[key] = trial.suggest_categorical(f"{runtime}.{key}", values)
    batch = trial.suggest_categorical("batch", space["batch"])
    instances = trial.suggest_int("instances", *space["instances"])
    lo, hi = space["intra_threads"]
    # instances x threads stays within the usable cores
    intra = trial.suggest_int(f"intra_threads.{instances}", lo, max(lo, hi // instances)) if instances > 1 else \
        trial.suggest_int("intra_threads", lo, hi)
    allocator = trial.suggest_categorical("allocator", space["allocator"])
    allowed = space["precisions"][runtime]
    precision = trial.suggest_categorical(f"{runtime}.precision", allowed) if len(allowed) > 1 else allowed[0]
    cfg = RunConfig(runtime=runtime, intra_threads=intra, batch=batch, instances=instances, precision=precision,
                    allocator=allocator, runtime_options=options, name=f"trial {trial.number}")
    if rt.uses_inter_threads(cfg):
        cfg = replace(cfg, inter_threads=trial.suggest_int(f"{runtime}.inter_threads", *space["inter_threads"]))
    if rt.uses_openmp:
        layout = trial.suggest_categorical("memory_format", space["memory_format"])
        bind = trial.suggest_categorical("bind", space["bind"])
        wait = trial.suggest_categorical("wait", space["wait"])
        omp: dict[str, str] = {}
        if bind != "none":
            omp.update({"OMP_PROC_BIND": bind, "OMP_PLACES": "cores"})
        if wait in ("passive", "active"):
            omp["OMP_WAIT_POLICY"] = wait.upper()
        elif wait != "default":
            omp["KMP_BLOCKTIME"] = wait.removeprefix("blocktime")
        cfg = replace(cfg, memory_format=layout, omp=omp)
    return rt.normalize(cfg)


class _Measured:
    """Stands in for an Optuna trial and answers ``_suggest``'s questions with a measured
    configuration's own settings, noting each parameter's distribution, so that the configuration
    can be told to the study as a finished trial (``known_trial``)."""

    number = -1

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.params: dict[str, Any] = {}
        self.distributions: dict[str, Any] = {}

    def _value(self, name: str) -> Any:
        c = self.config
        head, _, tail = name.partition(".")
        if name == "runtime":
            return c.runtime
        if head in ("batch", "instances", "allocator", "memory_format"):
            return getattr(c, head)
        if head == "intra_threads":
            return c.intra_threads
        if tail == "precision":
            return c.precision
        if tail == "inter_threads":
            return c.inter_threads
        if name == "bind":
            return c.omp.get("OMP_PROC_BIND", "none")
        if name == "wait":
            if "OMP_WAIT_POLICY" in c.omp:
                return c.omp["OMP_WAIT_POLICY"].lower()
            return f"blocktime{c.omp['KMP_BLOCKTIME']}" if "KMP_BLOCKTIME" in c.omp else "default"
        return c.option(tail)  # as set, else what the runtime runs without it

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        import optuna

        value = self._value(name)
        if value not in choices:
            raise LookupError(name)
        self.params[name] = value
        self.distributions[name] = optuna.distributions.CategoricalDistribution(list(choices))
        return value

    def suggest_int(self, name: str, low: int, high: int) -> int:
        import optuna

        value = self._value(name)
        if not low <= value <= high:
            raise LookupError(name)
        self.params[name] = value
        self.distributions[name] = optuna.distributions.IntDistribution(low, high)
        return int(value)


def known_trial(config: RunConfig, space: dict[str, Any], value: float) -> Any:
    """A finished Optuna trial for a configuration measured outside the search (the guideline, a
    baseline, a seed), or None where the search space cannot express it (threads or settings left
    to the runtime's defaults, a value the space does not hold): the sampler starts from what was
    measured instead of from the same seeded random draws on every model. Only a configuration
    that ``_suggest`` gives back as the same run (``run_key``) is told."""
    import optuna

    if config.vendor_defaults or not config.set_threads:
        return None
    m = _Measured(config)
    try:
        again = _suggest(m, space)
    except (LookupError, KeyError):
        return None
    if run_key(again) != run_key(config):
        return None
    return optuna.trial.create_trial(params=m.params, distributions=m.distributions, value=value)


#: The order in which ``neighbours`` changes a configuration's settings: the allocator first (the
#: searched bests of tuning runs 35-38 that beat their seed differed from it in the allocator
#: more often than in anything else), the runtime's own options next, the threads last.
NEIGHBOUR_ORDER = ("allocator", "option", "memory_format", "bind", "wait", "inter_threads", "intra_threads")


def neighbours(trial: Any) -> list[dict[str, Any]]:
    """The parameters of ``trial`` (a finished trial of the study) with one setting changed to each
    of its other values, in ``NEIGHBOUR_ORDER``: a local search around the fastest configuration
    measured before the search, which a budget of a few trials reaches sooner than TPE's draws.
    The runtime, batch and instances stay; a setting that only some values ask for (inter-op
    threads under ONNX Runtime's parallel mode) is left to the sampler."""
    def rank(name: str) -> int:
        head, _, tail = name.partition(".")
        kind = ("inter_threads" if tail == "inter_threads" else "intra_threads" if head == "intra_threads"
                else "option" if tail and tail != "precision" else head)
        return NEIGHBOUR_ORDER.index(kind) if kind in NEIGHBOUR_ORDER else len(NEIGHBOUR_ORDER)

    out = []
    for name in sorted(trial.params, key=rank):
        if rank(name) == len(NEIGHBOUR_ORDER):
            continue
        dist = trial.distributions[name]
        values = dist.choices if hasattr(dist, "choices") else range(dist.low, dist.high + 1)
        out += [{**trial.params, name: v} for v in values if v != trial.params[name]]
    return out


def run_key(config: RunConfig) -> str:
    """The identity of what ``config`` runs: its key with each runtime option it leaves out set to
    what the runtime runs without it, so that the guideline's ``hint=LATENCY, streams=1`` and a
    searched ``hint=LATENCY, streams=1, pinning=False`` are one configuration (measured once)."""
    from rooftune.runtimes import get_runtime

    if config.vendor_defaults:
        return config.key()
    rt = get_runtime(config.runtime)
    options = {**{k: v for k, v in rt.absent.items() if k in rt.options}, **config.runtime_options}
    return rt.normalize(replace(config, runtime_options=options)).key()


def tune(
    model: str | Any,
    *,
    example_inputs: Sequence[Any] | None = None,
    example_kwargs: dict[str, Any] | None = None,
    objective: str = "latency",
    budget_s: float = DEFAULT_BUDGET_S,
    trials: int | None = None,
    batch: int | None = None,
    inputs: Sequence[tuple[int, ...]] | None = None,
    options: dict[str, Any] | None = None,
    guidelines_only: bool = False,
    precisions: Sequence[str] | None = None,
    runtimes: Sequence[str] | None = None,
    db: str | None = None,
    store: Any = None,
    save: str | Path | None = None,
    progress: Progress | None = None,
    trial_policy: Policy = TRIAL_POLICY,
    compare_policy: Policy = COMPARE_POLICY,
    validate: str | Callable[..., Any] | None = None,
    calibration_size: int | None = None,
    compare_pairs: int = COMPARE_PROCESS_PAIRS,
) -> TuneResult:
    """Tune ``model``'s runtime configuration on this machine (see the module docstring).

    ``model`` is a name as ``rooftune analyze`` takes it, or an ``nn.Module`` with its
    ``example_inputs`` (and ``example_kwargs``), which every trial's process must load: it is
    exported by torch.export to a .pt2 file named by its content, beside ``save`` where given,
    else in rooftune's data folder (where the default store lives), and the study, its result and
    a saved configuration name that file. The same module tuned again resumes.

    ``precisions`` None searches what :func:`default_precisions` gives: fp32 and the reduced
    precisions a peer computes in by default on this machine (bf16 where the CPU has it natively
    and OpenVINO is installed), each under the accuracy guard; ``("fp32",)`` keeps to fp32.
    ``precisions`` may add ``bf16`` (where the ISA has it) and ``int8`` (post-training static
    quantization by each runtime's quantizer, calibrated on ``calibration_size`` inputs drawn like
    the workload's; a trial passes the guard - mean cosine >= 0.99, top-1 agreement >= 99 % on the
    calibration inputs - or ``validate``, an importable ``module:function(outputs, references)``
    returning a bool or (bool, why), called in the trial's process).

    Each comparison of the best against a baseline is spread over ``compare_pairs`` fresh pairs
    of processes, or one where the budget is short (the time kept for the final comparisons comes
    from the trials' measured process starts; see :class:`FinalCost`). Every trial is stored as
    it finishes; calling again with the same model, objective and search space resumes: stored
    configurations are not run again.
    """
    import optuna

    from rooftune.platform import current_platform
    from rooftune.runtimes import chosen_runtimes, get_runtime
    from rooftune.store import Store
    from rooftune.workload import capture, load_workload
    from rooftune.workload.models import check_shapes

    started = time.perf_counter()
    steal = Steal()
    step = progress or (lambda *_: None)
    if objective not in OBJECTIVES:
        raise InvalidArgument("objective", objective, f"allowed {', '.join(OBJECTIVES)}")
    if not (is_real(budget_s) and math.isfinite(budget_s) and budget_s > 0):
        raise InvalidArgument("budget", budget_s, "allowed a positive number of seconds")
    if not is_int(compare_pairs) or compare_pairs < 1:
        raise InvalidArgument("compare pairs", compare_pairs, "allowed an integer >= 1")
    if trials is not None and (not is_int(trials) or trials < 0):
        raise InvalidArgument("trials", trials, "allowed an integer >= 0")
    if guidelines_only and trials:
        raise InvalidArgument("trials", trials, "allowed only without guidelines-only (no search runs)")
    if precisions is not None:
        precisions = as_names(precisions, "precisions") or ()
        if not precisions:
            raise InvalidArgument("precisions", precisions, "allowed at least one of fp32, bf16, int8")
    runtimes = as_names(runtimes, "runtimes")
    if runtimes is not None and not runtimes:
        raise InvalidArgument("runtimes", runtimes, "allowed at least one runtime, or None for every installed one")
    for name, policy in (("trial_policy", trial_policy), ("compare_policy", compare_policy)):
        if not isinstance(policy, Policy):
            raise InvalidArgument(name, policy, "allowed a rooftune.bench.Policy")
    if save is not None:
        from rooftune.paths import output_file

        output_file(save, "save", parents=True)  # before anything is measured, not after the whole budget
    platform = current_platform()
    available, notes_by_rt = chosen_runtimes(runtimes)
    if precisions is None:
        precisions = default_precisions(platform, available)
    calibration_size = check_precisions(precisions, calibration_size, platform)
    validate_spec = _validation_spec(validate)
    from rooftune.workload.models import check_batch

    check_batch(batch)
    trials = None if trials is None else int(trials)
    batch = None if batch is None else int(batch)
    compare_pairs = int(compare_pairs)
    inputs = check_shapes(inputs)  # as Python integers: the trials' processes read them from JSON
    if not isinstance(model, str):
        from rooftune.store import modules_dir
        from rooftune.workload.models import export_module_file, module_takes_no_shapes

        module_takes_no_shapes(inputs, options)

        folder = Path(save).resolve().parent if save is not None else modules_dir()
        model = str(export_module_file(model, example_inputs, example_kwargs, folder))
    elif example_inputs is not None or example_kwargs is not None:
        raise InvalidArgument("example_inputs", type(example_inputs if example_inputs is not None else example_kwargs).__name__,
                              "allowed only with an nn.Module (a model name comes with its own inputs: --input)")
    wl = load_workload(model, batch=batch, inputs=inputs, options=options)
    if batch is None and wl.batch != 1:
        # the model's own example inputs set the batch (a callable's, a .pt2's): every
        # configuration runs it, not only the baselines (a .pt2 exported at batch 2 runs no other)
        batch = wl.batch
    workload = {"model": model, "inputs": [list(s) for s in inputs] if inputs else None, "options": options or {}}
    notes = [f"{k}: {v}" for k, v in notes_by_rt.items()]
    if "openvino" in available:
        notes.append("openvino-default runs OpenVINO as installed (it picks its own precision, verified by that "
                     "precision's guard); openvino-latency keeps its defaults except the precision, pinned to f32")
    if not allocator_library("jemalloc") and not allocator_library("tcmalloc"):
        notes.append("no jemalloc or tcmalloc installed (apt-get install libjemalloc2 libtcmalloc-minimal4): allocator not tuned")

    step("capture and reference output", 0, 1)
    graph = capture(wl)
    if graph.capture != "torch.export":
        notes.append(f"{graph.capture_note.split(';', 1)[0]}: the graph runtimes (TorchScript, ONNX Runtime, OpenVINO, "
                     "ncnn) run the model as traced on its example input, which fixes any data-dependent branch to the "
                     "one that input takes, and every configuration was verified on that input alone: check the best "
                     "on inputs of your own (rooftune.load_tuned(best.json) against the model), or restrict the study "
                     "to --runtime eager,compile")
    # marked with this process, and those of dead studies removed (a study killed outright)
    workdir = owned_tempdir("rooftune-tune-")
    try:  # until the study's own try below removes it
        setup = Setup(workload, workdir, int8="int8" in precisions, calibration_size=calibration_size,
                      validate=validate_spec)
        setup.files(wl.batch)
        if "int8" in precisions:
            without = sorted(rn for rn, rt in available.items() if rt.unsupported(RunConfig(runtime=rn, precision="int8")))
            for rn in without:
                notes.append(f"int8 not on {rn}: {get_runtime(rn).unsupported(RunConfig(runtime=rn, precision='int8'))}")

        space = search_space(platform, available, precisions, objective=objective, batch=batch,
                             winograd=winograd_share(graph) > 0)
        if not space["runtime"]:
            raise InvalidArgument("precision", ",".join(precisions), "no installed runtime runs it")
        key = study_key(model, objective, wl.batch, platform.id,
                        {**space, "inputs": workload["inputs"], "options": workload["options"],
                         "calibration": calibration_size if setup.int8 else 0, "validate": validate_spec,
                         # a study of a model of several outputs checks every one of them since this
                         # count entered the key: trials stored before, which checked the first
                         # alone, are not resumed as checked
                         **({"outputs": setup.outputs} if setup.outputs > 1 else {})})
        own_store = store is None
        store = store if store is not None else Store(db)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    results: list[TrialResult] = []
    done: dict[str, TrialResult] = {}
    resumed = 0
    try:
        for row in store.trials(key):
            stored = TrialResult.from_stored(row)
            done[run_key(stored.config)] = stored
            resumed += 1

        def evaluate(cfg: RunConfig, prepare_timeout_s: float = PREPARE_TIMEOUT_S) -> TrialResult:
            cfg = get_runtime(cfg.runtime).normalize(cfg)
            k, rk = cfg.key(), run_key(cfg)
            if rk in done:  # measured before, perhaps under another name (two baselines can coincide)
                r = done[rk]
                return r if r.config.name == cfg.name else replace(r, config=replace(r.config, name=cfg.name))
            # a configuration an earlier trial showed will fail the same way: not run (and not
            # stored: nothing was measured); a failed trial of the study's, which --trials does not count
            for rule, what in ((_crashed_under_preload, f"{cfg.runtime} under the preloaded {cfg.allocator} crashed"),
                               (_frontend_refused, "OpenVINO's PyTorch frontend could not convert the model"),
                               (_nothing_quantized, f"{cfg.runtime}'s int8 quantizer quantized no op of the model")):
                refused = next((x for x in done.values() if rule(x, cfg)), None)
                if refused is not None:
                    r = TrialResult(cfg, False, error=f"{NOT_RUN}{what} in {refused.config.name or 'an earlier trial'} "
                                                      f"({refused.error})")
                    done[rk] = r
                    return r
            r = _evaluate(cfg, setup, trial_policy, prepare_timeout_s)
            store.save_trial(platform, study_key=key, config_key=k, status="ok" if r.ok else "failed",
                             config=cfg.to_dict(), result=r.to_dict())
            done[rk] = r
            return r

        guide_cfg, reasons = guideline(platform, graph, available, objective=objective, batch=batch)
        fixed = [guide_cfg, *(replace(b, batch=wl.batch) for b in baselines(platform, available))]
        from_onnx: list[str] = []
        why_onnx = ""
        for i, cfg in enumerate(fixed):
            step(f"guideline and baselines: {cfg.name}", i, len(fixed))
            r = evaluate(cfg)
            refused = next((x for x in done.values() if _frontend_refused(x, cfg)), None)
            onnx = replace(cfg, runtime_options={**cfg.runtime_options, "source": "onnx"})
            if not r.ok and refused is not None and available["openvino"].unsupported(onnx) is None:
                # what an OpenVINO user does next: the same settings on the model's ONNX export
                from_onnx.append(cfg.name)
                why_onnx = refused.error.removeprefix(CONVERSION_FAILED)
                r = evaluate(onnx)
            twin = next((x.config.name for x in results if x.config.key() == r.config.key()), None)
            if twin:
                notes.append(f"{cfg.name} is the same configuration as {twin} on this machine")
            results.append(r)
        if from_onnx:
            names = from_onnx[0] if len(from_onnx) == 1 else f"{', '.join(from_onnx[:-1])} and {from_onnx[-1]}"
            notes.append(f"{names} read{'s' if len(from_onnx) == 1 else ''} the ONNX export: "
                         f"OpenVINO's PyTorch frontend could not convert the model ({why_onnx})")
        guide, base = results[0], {r.config.name: r for r in results[1:]}
        phase_s: dict[str, float] = {"fixed": time.perf_counter() - started}

        if not guidelines_only:
            # TPE from the third finished trial on: the ones told below (the guideline, baselines and
            # seeds) are the start, not ten of the same seeded random draws on every model
            sampler = optuna.samplers.TPESampler(seed=SEED, n_startup_trials=STARTUP_TRIALS)
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            study = optuna.create_study(direction="minimize", sampler=sampler)
            limit = trials if trials is not None else 10_000
            # The interleaved comparisons at the end are part of the budget: kept from the search by
            # what they cost on this machine, measured from the fixed trials' process starts.
            seeds = precision_seeds(guide_cfg, available, precisions)
            # the runtime that ran fastest in fp32 here goes first: where the budget leaves time for
            # one seed (a large model's quantization takes a minute on two cores), it is that one
            fastest: dict[str, float] = {}
            for r in results:
                fastest[r.config.runtime] = min(fastest.get(r.config.runtime, math.inf), r.score(objective))
            seeds.sort(key=lambda c: fastest.get(c.runtime, math.inf))
            seeds += source_seeds(guide_cfg, available, objective)
            seeds += runtime_seeds(platform, graph, available, guide_cfg, objective=objective, batch=batch)
            start_s = pair_start_s(results, platform.usable_cores)
            compared = len({b.config.key() for b in base.values() if b.ok})  # twins are compared once
            runners = RUNNERS_UP if limit > 0 or seeds else 0
            # the guideline is compared once (one pair of processes), like a runner-up
            reserve = (compared * comparison_s(compare_pairs, start_s, compare_policy)
                       + (runners + guide.ok) * comparison_s(1, start_s, compare_policy))
            search_until = budget_s - reserve
            phase_s["reserved"] = reserve
            phase_s["pair_start"] = start_s
            # The guideline in each reduced precision allowed, then on OpenVINO from the ONNX export
            # (fp32), first. The precision asked for comes
            # before the search and before what the final phase can give up (the runners-up, the
            # second pairs of processes): the seeds may run until the least it needs, one pair each.
            seeds_until = budget_s - (compared + guide.ok) * comparison_s(1, start_s, compare_policy)
            for i, cfg in enumerate(seeds):
                left = seeds_until - (time.perf_counter() - started)
                if left <= 0:
                    notes.append(f"no time left in the budget for {', '.join(c.name for c in seeds[i:])}")
                    break
                step(f"guideline seeds: {cfg.name}", i, len(seeds))
                results.append(evaluate(cfg, prepare_timeout_s=max(30.0, min(PREPARE_TIMEOUT_S, left))))
            # what was measured before the search is told to the sampler first (each as scored below)
            told: list[Any] = []
            ok_scores = [x.score(objective) for x in results if x.ok]
            for r in results:
                t0 = known_trial(r.config, space, r.score(objective) if r.ok else FAILED_PENALTY * max(ok_scores, default=1.0))
                if t0 is not None:
                    study.add_trial(t0)
                    told.append(t0)
            phase_s["told"] = len(told)
            # then the fastest of them one setting at a time (neighbours), before TPE's own draws
            if told:
                for params in neighbours(min(told, key=lambda t: t.value)):
                    study.enqueue_trial(params, skip_if_exists=True)
            n = repeats = 0
            seen = {run_key(r.config) for r in results}
            while n < limit and time.perf_counter() - started < search_until:
                step("search", min(int(time.perf_counter() - started), int(budget_s)), int(budget_s))
                t = study.ask()
                cfg = replace(_suggest(t, space), name=f"trial {t.number - len(told)}")  # the told ones come first
                # A searched trial may not take the final comparisons' share of the budget to prepare
                # (torch.compile of a large model takes minutes on two cores).
                left = search_until - (time.perf_counter() - started)
                r = evaluate(cfg, prepare_timeout_s=max(30.0, min(PREPARE_TIMEOUT_S, left)))
                fresh = run_key(cfg) not in seen
                if fresh:
                    seen.add(run_key(cfg))
                    results.append(r)
                    n += not (r.error or "").startswith(NOT_RUN)  # --trials counts what ran
                    repeats = 0
                else:
                    repeats += 1
                    if repeats >= MAX_REPEATS:  # TPE keeps proposing measured configurations: the space is exhausted
                        notes.append(f"search stopped after {MAX_REPEATS} proposals in a row that were already measured")
                        break
                # A failed configuration is told as a bad value (not Optuna's FAIL, which TPE ignores),
                # so the sampler learns to avoid its region: OpenVINO under a preloaded allocator
                # aborted on every trial (before TBB_ENABLE_SANITIZERS), and was proposed again and again.
                ok_scores = [x.score(objective) for x in results if x.ok]
                score = r.score(objective) if r.ok else FAILED_PENALTY * max(ok_scores, default=1.0)
                study.tell(t, score)
        else:
            # No search; but the guideline's threads and layout in each reduced precision the
            # caller allowed are guideline configurations too, measured and checked like the rest
            # (with --bf16 on an AVX512-BF16 VM the fp32 guideline ran 1.5-2.0x OpenVINO's bf16).
            seeds = precision_seeds(guide_cfg, available, precisions)
            if not guide.ok and guide_cfg.runtime == "ncnn":  # its converter refused the model
                seeds += runtime_seeds(platform, graph, available, guide_cfg, objective=objective, batch=batch)
            for i, cfg in enumerate(seeds):
                step(f"guideline seeds: {cfg.name}", i, len(seeds))
                results.append(evaluate(cfg))
        phase_s["search"] = time.perf_counter() - started - phase_s["fixed"]
        cost = FinalCost(pair_start_s(results, platform.usable_cores), compare_policy)
        comparisons = Comparisons(setup, objective, compare_policy, deadline=started + budget_s, cost=cost)
        # a peer computing in a precision the study does not search (OpenVINO as installed picks
        # bf16 under --fp32) is compared as a peer, never the answer
        verified = [r for r in results if r.ok and r.precision in precisions]
        if not verified:
            raise TrialFailed("no configuration ran and verified; see the failures in the trials")
        best = min(verified, key=lambda r: r.score(objective))
        # One trial's median can be off on a shared machine: the runners-up are re-measured
        # interleaved against the best, and one that is faster with its whole CI takes its place.
        ranked = sorted(verified, key=lambda r: r.score(objective))
        if not guidelines_only:
            # (the guideline and the baselines are compared with the best below in any case)
            fixed_keys = {r.config.key() for r in (guide, *base.values())}
            runners_up = [r for r in ranked[1:] if r.config.key() not in fixed_keys][:RUNNERS_UP]
            for i, other in enumerate(runners_up):
                # what the comparisons after these need at the least (one pair of processes each): a
                # runner-up, which may take the best's place, goes before a slow baseline's second pair
                if started + budget_s - time.perf_counter() < (compared + guide.ok + 1) * cost(1):
                    notes.append(f"no time left in the budget to re-measure {len(runners_up) - i} runner(s)-up "
                                 "against the best, interleaved")
                    break
                step("confirming the best against the runners-up, interleaved", i, len(runners_up))
                def again(b: RunConfig = best.config, o: RunConfig = other.config) -> dict[str, Any]:
                    return comparisons(b, o, 1)

                c = cost.timed(again)
                if c.get("ci_high", math.inf) < 1.0:  # median(other) / median(best), all of it below 1
                    notes.append(f"re-measured interleaved, {other.config.describe()} was {1 / c['ratio']:.2f}x faster "
                                 f"than {best.config.describe()} (trial medians said otherwise): it is the best")
                    best = other

        guide_vs_best = None
        if guide.ok:
            # The guideline's distance from the best is a reported figure: interleaved, like the
            # speedups (two trial medians taken minutes apart differ by 30 % on a shared machine).
            step("the guideline against the best, interleaved", 0, 1)
            guide_vs_best = cost.timed(lambda: comparisons(best.config, guide.config, 1))
            if guide_vs_best.get("ci_high", math.inf) < 1.0:  # median(guideline) / median(best), all below 1
                notes.append(f"re-measured interleaved, the guideline was {1 / guide_vs_best['ratio']:.2f}x faster than "
                             f"{best.config.describe()} (trial medians said otherwise): it is the best")
                best = guide
                guide_vs_best = itself()
            elif "error" in guide_vs_best:
                notes.append(f"the guideline could not be compared with the best: {guide_vs_best['error']}")
        promoted: set[str] = set()
        retaken = False
        while True:
            compared_with = best.config.key()
            best, speedup = against_baselines(best, base, setup, objective, compare_policy, compare_pairs, notes,
                                               step, deadline=started + budget_s, cost=cost, comparisons=comparisons,
                                               promoted=promoted, eligible=lambda t: t.precision in precisions)
            if guide_vs_best is None or best.config.key() == compared_with:
                break
            # a baseline took the best's place: the guideline is measured against it (pooled with
            # the comparison that handed it back where the guideline was the best then)
            step("the guideline against the new best, interleaved", 0, 1)
            guide_vs_best = comparisons(best.config, guide.config, 1)
            was_best = compared_with == guide.config.key()
            if retaken or not guideline_wins(guide_vs_best, was_best):
                break
            notes.append(f"the guideline, measured against {best.config.name or best.config.describe()}, read "
                         f"{1 / guide_vs_best['ratio']:.2f}x faster by the medians{pooled_text(guide_vs_best)} "
                         f"(95 % CI of guideline/best {guide_vs_best['ci_low']:.2f}-{guide_vs_best['ci_high']:.2f}): "
                         f"it is the best{' again' if was_best else ''}")
            best, guide_vs_best, retaken = guide, itself(), True
        notes += steadier(best, base, speedup, comparisons, cost, started + budget_s, UNSTEADY_PAIR_SPREAD, step)
        fp32_best, fp32_vs_peer = _fp32_answer(best, verified, base, speedup, comparisons, compare_pairs, objective,
                                               step, notes)
        phase_s["final"] = time.perf_counter() - started - phase_s["fixed"] - phase_s["search"]
        phase_s["pairs"] = comparisons.pairs_run
        if shortened := comparisons.shortened_note():
            notes.append(shortened)
        rewritten = winograd_note(best)
        if rewritten:
            notes.append(rewritten)
        top1_only = top1_only_note(results, validate is not None)
        if top1_only:
            notes.append(top1_only)
        # each runtime's quantizer that left the model in fp32, once
        notes += dict.fromkeys(f"int8 not on {t.config.runtime}: {t.error.split('int8: ', 1)[-1]}" for t in results
                               if NOTHING_QUANTIZED in (t.error or "") and not t.error.startswith(NOT_RUN))
        if save:
            if (not best.artifact or not Path(best.artifact).exists()) and \
                    get_runtime(best.config.runtime).artifact_file(best.config, workdir) is not None:
                # the best came from the store, its artifact with the earlier study's folder:
                # prepared (and verified) again, so that the saved configuration runs what was measured
                step("preparing the best's artifact again", 0, 1)
                prepared = _evaluate(best.config, setup, trial_policy)
                if prepared.ok and prepared.artifact:
                    best = replace(best, artifact=prepared.artifact)
                    notes.append("the best was measured in an earlier study (from the store): its artifact "
                                 "was prepared again for --save")
                else:
                    notes.append(f"the best's artifact could not be prepared again for --save: {prepared.error or 'not verified'}")
            # best.json gives the figures the result reports (the interleaved ones where compared)
            reported = TuneResult(model=model, objective=objective, batch=wl.batch, best=best, guideline=guide,
                                  guideline_reasons=(), baselines=base, speedup=speedup, trials=(), notes=(),
                                  duration_s=0.0, guideline_vs_best=guide_vs_best).with_interleaved_figures()
            save_config(reported.best, Path(save), workload, calibration_size=calibration_size, validate=validate_spec)
    finally:
        if own_store:
            store.close()
        shutil.rmtree(workdir, ignore_errors=True)
    # the prepared artifacts went with the study's folder: the best's is the copy beside `save`,
    # the others' paths are dropped rather than left pointing at nothing
    saved_artifact = json.loads(Path(save).read_text()).get("artifact") if save else None

    def kept(t: TrialResult) -> TrialResult:
        if save and t.config.key() == best.config.key():
            return replace(t, artifact=saved_artifact)
        return t if not t.artifact or Path(t.artifact).exists() else replace(t, artifact=None)

    best, guide = kept(best), kept(guide)
    base = {k: kept(v) for k, v in base.items()}
    results = [kept(t) for t in results]
    fp32_best = kept(fp32_best) if fp32_best is not None else None
    stolen = steal_warning(steal.share(), "the study")
    if stolen:
        notes.append(stolen + "; the interleaved ratios hold better than the times")
    took = time.perf_counter() - started
    if budget_s is not None and took > 1.1 * budget_s + 5:
        # the guideline, the baselines and one comparison each are measured whatever the budget
        notes.append(f"the study took {took:.0f} s against a budget of {budget_s:.0f} s: the guideline, the baselines "
                     f"and their comparisons with the best alone took {phase_s.get('fixed', 0) + phase_s.get('final', 0):.0f} s "
                     f"on this model; a budget below that buys no search")
    return TuneResult(model=model, objective=objective, batch=wl.batch, best=best, guideline=guide,
                      guideline_reasons=tuple(reasons), baselines=base, speedup=speedup, trials=tuple(results),
                      notes=tuple(notes), duration_s=time.perf_counter() - started, resumed=resumed,
                      workload=workload, guideline_vs_best=guide_vs_best, phase_s=phase_s,
                      batches=tuple(space["batch"]), fp32_best=fp32_best,
                      fp32_vs_peer=fp32_vs_peer).with_interleaved_figures()


def _fp32_answer(best: TrialResult, verified: Sequence[TrialResult], base: dict[str, TrialResult],
                 speedup: dict[str, dict[str, Any]], comparisons: Comparisons, pairs: int, objective: str,
                 step: Progress, notes: list[str]) -> tuple[TrialResult | None, dict[str, Any] | None]:
    """Where the best computes in a reduced precision: the fastest verified fp32 configuration
    (by its trial) and its interleaved comparison with the fp32 peer that ran fastest against the
    best (the smallest ratio), over ``pairs`` pairs of processes: the answer for a user who must
    keep fp32, beside the overall one. (None, None) where the best is fp32 or nothing compares."""
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


def winograd_record(trial: TrialResult) -> dict[str, Any] | None:
    """For a configuration with ``conv=winograd``: what was measured beside its artifact (its
    eligible ``layers``, each with ``chosen`` and ``speedup``, and the whole ``network`` with and
    without the layers chosen), None where there is no such record."""
    if trial.config.option("conv") != "winograd" or not trial.artifact:
        return None
    path = Path(trial.artifact).with_suffix(".json")
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
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


def native_bf16(platform: Any) -> bool:
    """Whether the CPU computes bf16 natively (AVX512-BF16 or AMX-BF16, as the ISA in effect says)."""
    return bool(set(platform.effective_isa) & {"avx512_bf16", "amx_bf16"})


#: Runtimes whose as-installed default computes in bf16 on a CPU with native bf16: OpenVINO's CPU
#: plugin sets INFERENCE_PRECISION_HINT to bf16 there (its documentation, "Inference Precision").
PICK_BF16_BY_DEFAULT = ("openvino",)


def default_precisions(platform: Any, available: dict[str, Any]) -> tuple[str, ...]:
    """What a study searches when the caller names no precision: fp32, and bf16 where the CPU has
    it natively and a peer installed here computes in it by default, so that the answer is never
    slower than what the user would have got from that peer as shipped. int8 is never a default:
    it needs a calibration set."""
    if native_bf16(platform) and any(n in available for n in PICK_BF16_BY_DEFAULT):
        return ("fp32", "bf16")
    return ("fp32",)


def precisions_for(*, fp32: bool = False, bf16: bool = False, int8: bool = False,
                   runtimes: Sequence[str] | None = None) -> tuple[str, ...] | None:
    """The ``precisions`` a study searches from the command line's switches: ``fp32`` alone keeps
    to fp32 (refused beside ``bf16`` or ``int8``); ``bf16`` and ``int8`` add to the default
    (:func:`default_precisions`); None where no switch is set (the default)."""
    if fp32 and (bf16 or int8):
        raise InvalidArgument("--fp32", "with " + " and ".join(f for f, on in (("--bf16", bf16), ("--int8", int8)) if on),
                              "allowed alone: it keeps the search to fp32, which --bf16 and --int8 widen")
    if fp32:
        return ("fp32",)
    if not (bf16 or int8):
        return None
    from rooftune.platform import current_platform
    from rooftune.runtimes import chosen_runtimes

    base = default_precisions(current_platform(), chosen_runtimes(runtimes)[0])
    return tuple(dict.fromkeys((*base, *(("bf16",) if bf16 else ()), *(("int8",) if int8 else ()))))


def check_precisions(precisions: Sequence[str], calibration_size: int | None, platform: Any) -> int:
    """Refuse an unknown precision, bf16 on a CPU without native bf16, and an impossible
    calibration size; returns the calibration size to use."""
    from rooftune.runtimes.quantize import check_calibration_size

    for p in precisions:
        if p not in ("fp32", "bf16", "int8"):
            raise InvalidArgument("precision", p, "allowed fp32, bf16, int8")
    if "bf16" in precisions and not native_bf16(platform):
        raise InvalidArgument("precision", "bf16", "this CPU has no native bf16 (avx512_bf16 or amx_bf16)")
    if calibration_size is not None and "int8" not in precisions:
        raise InvalidArgument("--calibration", calibration_size, "allowed only with --int8 (the int8 calibration set)")
    return check_calibration_size(calibration_size)


def _validation_spec(validate: str | Callable[..., Any] | None) -> str | None:
    """``module:function`` for the trial processes, from a string or an importable function."""
    if validate is None:
        return None
    if callable(validate):
        mod, name = getattr(validate, "__module__", ""), getattr(validate, "__qualname__", "")
        if not mod or mod == "__main__" or "<" in name:
            raise InvalidArgument("validate", repr(validate), "allowed a function importable by name (module:function)")
        return f"{mod}:{name}"
    mod, sep, name = str(validate).partition(":")
    if not sep or not mod or not name:
        raise InvalidArgument("--validate", validate, "allowed module:function")
    from rooftune.platform.processes import import_user_module

    # the current directory is importable, as for a module:callable model (and in the trials)
    try:
        module = import_user_module(mod)
    except Exception as exc:  # an import runs the user's code: any failure is theirs
        why = f"No module named {exc.name!r}" if isinstance(exc, ModuleNotFoundError) else f"{type(exc).__name__}: {exc}"
        raise InvalidArgument("--validate", validate, f"cannot import {mod!r} ({why.splitlines()[0][:200]})") from None
    fn = getattr(module, name, None)
    if fn is None:
        raise InvalidArgument("--validate", validate, f"module {mod!r} has no function {name!r}")
    if not callable(fn):
        raise InvalidArgument("--validate", validate, "not a function")
    return str(validate)


def save_config(trial: TrialResult, path: Path, workload: dict[str, Any] | None = None,
                calibration_size: int | None = None, validate: str | None = None) -> Path:
    """A trial's configuration as JSON, with the workload it was measured on (what
    ``python -m rooftune.tuning.replay`` runs) and its prepared artifact copied beside it; an
    int8 configuration also records the size of its (seeded) calibration set, so that a replay
    quantizes the model exactly as the trial did."""
    from rooftune.fileio import copy_atomic, write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {"config": trial.config.to_dict(), "figures": trial.figures(), "verify": trial.verify}
    if workload is not None:
        data["workload"] = workload
    if trial.config.precision == "int8" and calibration_size is not None:
        data["calibration"] = calibration_size
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
    write_atomic(path, json.dumps(data, indent=2))  # last: a configuration never names a missing artifact
    return path

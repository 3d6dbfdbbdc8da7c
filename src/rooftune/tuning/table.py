"""A tuning result as the rows a reader sees first: one table for the command line and the report,
so that both give the same figures (the interleaved ones where a configuration was compared with
the best, see :meth:`TuneResult.with_interleaved_figures`) beside the same ratios."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rooftune.units import fmt_time, interleaved_text, speedup_text

if TYPE_CHECKING:
    from rooftune.tuning.study import TrialResult, TuneResult

TUNE_COLUMNS = ("name", "configuration", "precision", "p50", "samples/s", "trial p50", "trial p90",
                "interleaved: it / best", "best is")


def _time(t: float) -> str:
    return fmt_time(t) if math.isfinite(t) else "-"


def _trial_p50(tr: TrialResult) -> str:
    return _time(tr.trial_latency_s if tr.figures_from != "trial" else tr.latency_s)


def metric_text(tr: TrialResult) -> str:
    """A configuration's metric on the user's data with its 95 % interval (``-`` where it was not
    judged on data)."""
    acc = tr.verify.get("accuracy") if tr.ok else None
    if not acc:
        return "-"
    lo, hi = acc["interval"]
    return f"{acc['value']:.1f} [{lo:.1f}, {hi:.1f}]"


def tune_columns(r: TuneResult) -> tuple[str, ...]:
    """The table's columns: with the user's data, the metric of each configuration beside its precision."""
    acc = next((t.verify["accuracy"] for t in r.trials if t.ok and "accuracy" in t.verify), None)
    if acc is None:
        return TUNE_COLUMNS
    return (*TUNE_COLUMNS[:3], f"{acc['metric']} (95% CI)", *TUNE_COLUMNS[3:])


def tune_rows(r: TuneResult, error_width: int = 60) -> list[list[str]]:
    """One row per reported configuration: the best, the guideline, each baseline, and the fp32
    best where the best is in a reduced precision. ``p50`` and ``samples/s`` are the reported
    figures, ``trial p50``/``trial p90`` the trial's own (its process, its minute); with the user's
    data, each one's metric there (:func:`tune_columns`)."""
    rows = _rows(r, error_width)
    if len(tune_columns(r)) == len(TUNE_COLUMNS):
        return rows
    named = [r.best, r.guideline, *r.baselines.values(), *([r.fp32_best] if r.fp32_best is not None else [])]
    return [[*row[:3], metric_text(tr), *row[3:]] for row, tr in zip(rows, named, strict=True)]


def _rows(r: TuneResult, error_width: int) -> list[list[str]]:
    rows = [("best", r.best), ("guideline", r.guideline), *r.baselines.items()]
    out = []
    for name, tr in rows:
        if not tr.ok:
            out.append([name, tr.config.describe(), tr.precision, "failed", "", "", "", "", tr.error[:error_width]])
            continue
        out.append([name, tr.describe(), tr.precision, _time(tr.latency_s), f"{tr.throughput:.1f}", _trial_p50(tr),
                    _time(tr.p90_s), interleaved_text(r.interleaved(name), r.objective),
                    speedup_text(r.comparison(name))])
    if r.fp32_best is not None:
        tr, c = r.fp32_best, r.fp32_vs_peer or {}
        if not c.get("peer"):
            peer = "-"
        elif c.get("pairs") == 0:  # the fastest fp32 configuration is that peer
            peer = f"it is {c['peer']}"
        else:
            peer = f"{c['peer']} is {speedup_text(c)}"
        out.append(["fp32 best", tr.describe(), tr.precision, _time(tr.latency_s), f"{tr.throughput:.1f}",
                    _trial_p50(tr), _time(tr.p90_s), "-", peer])
    return out


def guard_lines(r: TuneResult) -> list[str]:
    """The accuracy figures of every reported configuration that computed in a reduced precision
    (the best's, and a peer's whose default precision changed its output): what it was checked by."""
    out = []
    for name, tr in [("best", r.best), ("guideline", r.guideline), *r.baselines.items()]:
        v = tr.verify
        if not tr.ok or tr.precision == "fp32" or "cosine" not in v:
            continue
        if "accuracy" in v:  # judged on the user's data: that figure is the one that decided
            from rooftune.workload.metrics import describe

            out.append(f"{name} runs {tr.precision}, on your data: {describe(v['accuracy'])}")
            continue
        out.append(f"{name} runs {tr.precision}: mean cosine {v['cosine']:.4f}, top-1 agreement {v['top1']:.1%}, "
                   f"max error {v.get('max_rel', math.nan):.3g} of the output's scale over {v.get('inputs', 1)} "
                   f"input(s) ({v.get('rule', '')})")
    return out

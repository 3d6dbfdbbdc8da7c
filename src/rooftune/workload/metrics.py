"""A configuration's metric on the evaluation part of the user's data, and its drop against the
fp32 model's, each with a bootstrap 95 % interval.

    accuracy    top-1 against the labels, in percent
    agreement   top-1 agreement with the fp32 model's own outputs, in percent (fp32 scores 100)
    MODULE:CALLABLE(outputs, labels) -> float, in the caller's own units

The drop's interval is paired: every bootstrap resample draws the same samples for the
configuration and for fp32, so the interval is of the difference, not of two independent figures.
A configuration meets the budget when its measured drop is at most ``max_drop``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from rooftune.errors import InvalidArgument
from rooftune.workload.data import BOOTSTRAP_RESAMPLES, METRICS, call_user, user_callable


def metric_name(metric: str | None, has_labels: bool) -> str:
    """The metric a study evaluates: the one named, else accuracy with labels and agreement without;
    accuracy without labels is refused."""
    name = metric or ("accuracy" if has_labels else "agreement")
    if name == "accuracy" and not has_labels:
        raise InvalidArgument("--metric", name, "needs labels (class subfolders, a .npz 'labels' array, or "
                              "(inputs, labels) batches); allowed agreement or MODULE:CALLABLE without them")
    return name


def check_labels(reference: Any, labels: Any | None, metric: str, source: str) -> None:
    """Refuse labels outside the model's output range (top-1 can never reach them), and a first
    output a top-1 metric cannot read (no class axis)."""
    if metric not in METRICS:
        return
    if reference.dim() != 2:
        raise InvalidArgument("--metric", metric, f"reads top-1 of a first output shaped (N, classes); this model's is "
                              f"shaped {tuple(reference.shape)} (give MODULE:CALLABLE instead)")
    if labels is not None and metric == "accuracy":
        lo, hi = int(labels.min()), int(labels.max())
        if lo < 0 or hi >= reference.shape[1]:
            raise InvalidArgument("--data", source, f"labels span {lo}..{hi}; the model's output has "
                                  f"{reference.shape[1]} classes (labels 0..{reference.shape[1] - 1})")


def _interval(values: np.ndarray) -> list[float]:
    lo, hi = np.percentile(values, [2.5, 97.5])
    return [float(lo), float(hi)]


def evaluate(outputs: Any, reference: Any, labels: Any | None, metric: str, max_drop: float,
             seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES) -> dict[str, Any]:
    """``outputs`` (the configuration's first output, one row per evaluation sample) against
    ``reference`` (the fp32 model's on the same samples): the metric of each with its interval,
    the drop with its paired interval, and whether the drop is within ``max_drop``."""
    n = int(reference.shape[0])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    if metric in METRICS:
        top = outputs.float().argmax(-1).numpy()
        ref_top = reference.float().argmax(-1).numpy()
        truth = labels.numpy() if metric == "accuracy" else ref_top
        got = (top == truth).astype(np.float64) * 100.0
        base = (ref_top == truth).astype(np.float64) * 100.0
        value, fp32 = float(got.mean()), float(base.mean())
        boot, boot_ref = got[idx].mean(1), base[idx].mean(1)
        unit = "%"
    else:
        fn = user_callable(metric, "--metric")
        value, fp32 = _score(fn, metric, outputs, labels), _score(fn, metric, reference, labels)
        boot = np.array([_score(fn, metric, outputs[i], None if labels is None else labels[i]) for i in idx])
        boot_ref = np.array([_score(fn, metric, reference[i], None if labels is None else labels[i]) for i in idx])
        unit = ""
    drop = fp32 - value
    ok = bool(math.isfinite(drop) and drop <= max_drop + 1e-9)
    return {"metric": metric, "value": value, "interval": _interval(boot), "fp32": fp32,
            "fp32_interval": _interval(boot_ref), "drop": drop, "drop_interval": _interval(boot_ref - boot),
            "max_drop": float(max_drop), "samples": n, "seed": seed, "resamples": resamples, "unit": unit, "ok": ok,
            "rule": f"{metric} on {n} evaluation samples within {max_drop:g}{unit and ' points'} of fp32's"}


def score(outputs: Any, reference: Any, labels: Any | None, metric: str) -> float:
    """The metric's value alone (no interval): what a quantizer's own accuracy control asks of a
    validation function, on whichever samples it draws."""
    if metric in METRICS:
        truth = labels if metric == "accuracy" else reference.float().argmax(-1)
        return float((outputs.float().argmax(-1) == truth).double().mean() * 100.0)
    return _score(user_callable(metric, "--metric"), metric, outputs, labels)


def _score(fn: Callable[..., Any], name: str, outputs: Any, labels: Any) -> float:
    v = call_user(fn, "--metric", outputs, labels)
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise InvalidArgument("--metric", name, f"returned {type(v).__name__}; allowed a number") from None
    if not math.isfinite(x):
        raise InvalidArgument("--metric", name, f"returned {x}; allowed a finite number")
    return x


def describe(acc: dict[str, Any]) -> str:
    """One line: the metric with its interval, and the drop against fp32 with its interval."""
    u = acc.get("unit", "")
    lo, hi = acc["interval"]
    dlo, dhi = acc["drop_interval"]
    return (f"{acc['metric']} {acc['value']:.2f}{u} [{lo:.2f}, {hi:.2f}], drop {acc['drop']:+.2f} "
            f"[{dlo:+.2f}, {dhi:+.2f}] against fp32's {acc['fp32']:.2f}{u} (budget {acc['max_drop']:g}, "
            f"{acc['samples']} samples)")

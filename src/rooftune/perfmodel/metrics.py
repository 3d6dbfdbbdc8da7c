"""How close predicted times are to measured ones: per (spec, primitive) pair and per spec (does
the predicted fastest primitive run fastest?). Rows are specs, columns primitives, NaN where a time
is unknown."""

from __future__ import annotations

import math

import numpy as np


def relative_errors(pred: np.ndarray, true: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mask of the pairs both measured and predicted, and their (predicted - measured) / measured."""
    known = ~np.isnan(true) & ~np.isnan(pred)
    return known, (pred[known] - true[known]) / true[known]


def pair_errors(rel: np.ndarray) -> dict[str, float]:
    """``pairs``, ``mape`` and ``within_10pct`` of the relative errors ``rel`` (not empty)."""
    return {"pairs": int(len(rel)), "mape": float(np.mean(np.abs(rel))), "within_10pct": float(np.mean(np.abs(rel) <= 0.10))}


def regression_metrics(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    """Over the (spec, primitive) pairs measured: MAPE, RMSPE, share within +-10 %; per spec:
    Spearman rank correlation of the primitives, top-1 accuracy, regret of the predicted argmin
    (its measured time over the best measured time), and top-1 within 5 % of the best."""
    from scipy.stats import spearmanr

    known, rel = relative_errors(pred, true)
    rhos, top1, near, regrets = [], [], [], []
    for i in range(len(true)):
        k = known[i]
        if k.sum() < 1:
            continue
        t, p = true[i, k], pred[i, k]
        if k.sum() >= 3 and np.ptp(t) > 0:
            rho = spearmanr(p, t).statistic
            if not math.isnan(rho):
                rhos.append(rho)
        chosen, best = int(np.argmin(p)), int(np.argmin(t))
        top1.append(chosen == best)
        regrets.append(t[chosen] / t[best])
        near.append(t[chosen] <= 1.05 * t[best])
    if not len(rel):
        return {"pairs": 0}
    return {
        **pair_errors(rel), "specs": len(regrets), "rmspe": float(np.sqrt(np.mean(rel ** 2))),
        "spearman": float(np.mean(rhos)) if rhos else math.nan,
        "top1": float(np.mean(top1)), "top1_within_5pct": float(np.mean(near)),
        "regret_mean": float(np.mean(regrets)) - 1.0, "regret_worst": float(np.max(regrets)) - 1.0,
    }

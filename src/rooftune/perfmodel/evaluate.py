"""Evaluation split by network: the layers of a held-out network never appear in training (a spec
two networks share goes to the test side). Every network is held out in turn (leave one network
out) and the predictions of all folds are pooled."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rooftune.perfmodel.classifiers import BASELINES, MethodClassifier
from rooftune.perfmodel.data import STEADY, ProfileData
from rooftune.perfmodel.metrics import pair_errors, regression_metrics, relative_errors
from rooftune.perfmodel.regressors import PerfModel


def by_primitive(pred: np.ndarray, true: np.ndarray, primitives: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per primitive column, over its measured pairs: ``pairs``, ``within_10pct``, ``mape`` and
    ``bias``, the median of predicted over measured time (below 1: predicted too fast). Where the
    pooled share is missed, and which way: a selector trusts a primitive predicted too fast."""
    out = {}
    for j, name in enumerate(primitives):
        _, rel = relative_errors(pred[:, j], true[:, j])
        if len(rel):
            out[name] = {**pair_errors(rel), "bias": float(np.median(1.0 + rel))}
    return out


def by_primitive_line(per: dict[str, dict[str, float]]) -> str:
    """:func:`by_primitive`'s figures on one line: ``name share xbias, ...``."""
    return "per primitive (within +-10 %, median predicted/measured): " + ", ".join(
        f"{p} {b['within_10pct']:.0%} x{b['bias']:.2f}" for p, b in per.items())


def steady_share(pred: np.ndarray, true: np.ndarray, spread: np.ndarray) -> dict[str, Any]:
    """The share within +-10 % over the steady test rows only (see :data:`STEADY`): the model's
    error apart from test rows the data cannot pin down to 10 % (it still learned from every row).
    Empty without pass spreads."""
    steady = ~np.isnan(true) & ~np.isnan(pred) & (spread <= STEADY)
    if not steady.any():
        return {}
    rel = (pred[steady] - true[steady]) / true[steady]
    return {"steady_pairs": int(steady.sum()), "within_10pct_steady": float(np.mean(np.abs(rel) <= 0.10))}


def _regret_of_choice(data: ProfileData, names: Sequence[str]) -> dict[str, float]:
    """Regret of naming a primitive per spec; a name with no time on the spec (unsupported there)
    falls back to the framework's default path, as a selector would."""
    col = {p: j for j, p in enumerate(data.primitives)}
    regrets, hits, fallbacks = [], [], 0
    for i, name in enumerate(names):
        t = data.times[i]
        if np.all(np.isnan(t)):
            continue
        best = np.nanmin(t)
        j = col.get(name)
        if j is None or np.isnan(t[j]):
            fallbacks += 1
            j = col.get("pytorch-default")
            if j is None or np.isnan(t[j]):
                continue
        regrets.append(t[j] / best)
        hits.append(t[j] == best)
    if not regrets:
        return {"specs": 0}
    return {"specs": len(regrets), "accuracy": float(np.mean(hits)), "regret_mean": float(np.mean(regrets)) - 1,
            "regret_worst": float(np.max(regrets)) - 1, "fallbacks": fallbacks}


def folds(data: ProfileData, held_out: Sequence[str] | None = None) -> list[tuple[str, ProfileData, ProfileData]]:
    nets = list(held_out or data.networks)
    out = []
    for net in nets:
        train, test = data.split_by_network([net])
        if len(train) and len(test):
            out.append((net, train, test))
    return out


def predict_for(model: Any, data: ProfileData) -> np.ndarray:
    """``model``'s predicted seconds for ``data``'s specs, in ``data``'s primitive columns (NaN
    where the model knows no such primitive): what :func:`regression_metrics` compares with
    ``data.times``."""
    cols = [model.primitives_.index(p) if p in model.primitives_ else None for p in data.primitives]
    pred = model.predict(data.specs)
    return np.column_stack([pred[:, c] if c is not None else np.full(len(data), np.nan) for c in cols])


#: The regressors `evaluate` compares: an estimator, or ``estimator/target`` (see PerfModel).
REGRESSORS = ("gbr", "rf", "mlp", "mlp/roofline")


def make_regressor(name: str) -> PerfModel:
    """``gbr``, ``mlp/roofline``...: a PerfModel with that estimator (and target)."""
    estimator, _, target = name.partition("/")
    return PerfModel(estimator, target=target or "time")


def evaluate(data: ProfileData, estimators: Sequence[str] = REGRESSORS, held_out: Sequence[str] | None = None,
             classifiers: Sequence[str] = ("tree", "nb"), make: Callable[[str], PerfModel] | None = None,
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Leave-one-network-out figures for each regressor and classifier, beside the baselines."""
    say = progress or (lambda _m: None)
    make = make or make_regressor
    fs = folds(data, held_out)
    if not fs:
        return {"networks": [], "regressors": {}, "classifiers": {}, "baselines": {}}
    caches = None
    if data.fingerprint:
        from rooftune.perfmodel.features import cache_sizes

        caches = cache_sizes(data.fingerprint)
    held_out_rows = _concat([f[2] for f in fs])  # each fold's test rows, pooled
    result: dict[str, Any] = {"networks": [f[0] for f in fs], "specs": len(data), "primitives": data.primitives,
                              "platform_id": data.platform_id, "threads": data.threads,
                              # over the held-out rows the regressors are scored on, not the whole
                              # store: sampled specs are never held out
                              "repeatability": held_out_rows.repeatability(),
                              # the times as brought to the quiet machine (perfmodel.data)
                              "probe_scaling": data.probe_scaling(),
                              "regressors": {}, "classifiers": {}, "baselines": {}}
    for est in estimators:
        preds, trues, spreads, per_net, fit_s = [], [], [], {}, 0.0
        for net, train, test in fs:
            say(f"{est}: holding out {net}")
            t0 = time.perf_counter()
            m = make(est).fit(train.specs, train.times, train.primitives, caches=caches, threads=data.threads)
            fit_s += time.perf_counter() - t0
            pred = predict_for(m, test)
            preds.append(pred)
            trues.append(test.times)
            spreads.append(test.spread if test.spread is not None else np.full(test.times.shape, np.nan))
            per_net[net] = regression_metrics(pred, test.times)
        pooled: dict[str, Any] = regression_metrics(np.vstack(preds), np.vstack(trues))
        pooled.update(steady_share(np.vstack(preds), np.vstack(trues), np.vstack(spreads)))
        pooled["fit_s"] = fit_s / len(fs)
        pooled["by_network"] = per_net
        pooled["by_primitive"] = by_primitive(np.vstack(preds), np.vstack(trues), data.primitives)
        result["regressors"][est] = pooled
    for kind in classifiers:
        chosen_all: list[str] = []
        for net, train, test in fs:
            say(f"{kind} classifier: holding out {net}")
            idx, _ = train.best()
            keep = idx >= 0
            labels = [train.primitives[j] for j in idx[keep]]
            clf = MethodClassifier(kind).fit([s for s, k in zip(train.specs, keep, strict=True) if k], labels,
                                             threads=data.threads)
            chosen_all.extend(clf.predict(test.specs))
        result["classifiers"][kind] = _regret_of_choice(held_out_rows, chosen_all)
    for name, rule in BASELINES.items():
        result["baselines"][name] = _regret_of_choice(held_out_rows, [rule(s) for s in held_out_rows.specs])
    return result


def _concat(parts: Sequence[ProfileData]) -> ProfileData:
    first = parts[0]
    spreads = [p.spread for p in parts if p.spread is not None]
    spread = np.vstack(spreads) if len(spreads) == len(parts) else None  # None where any part has none
    return ProfileData(first.platform_id, first.threads, [s for p in parts for s in p.specs], first.primitives,
                       np.vstack([p.times for p in parts]), [s for p in parts for s in p.sources], first.transforms,
                       first.fingerprint, spread)

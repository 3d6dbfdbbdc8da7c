"""Transfer learning: a model trained on platform A adapted to platform B from k profiled samples
(after Mulder, Radu, Dubach 2020).

* ``finetune``: the MLP's trunk frozen; each head first moved by the median of its error on B's
  samples (the new platform's overall speed for that primitive), then retrained on them with its
  weights held near the base's (L2-SP) rather than near zero, so that a primitive with few
  samples keeps what A's model knew of its shape;
* ``residual``: boosting on the base model's error: a small gradient-boosting model of
  log(t_B) - base_log(spec, primitive) from the spec's features, the primitive and the base prediction;
* ``shift``: the base model with each primitive's median error on B's samples removed and
  nothing retrained (the first step of ``finetune``); a member of ensembles, not offered alone;
* ``ensemble``: every base model at hand (each trained on another platform) fine-tuned on the
  same samples and shifted, their log times averaged with weights stacked on the samples
  (:func:`stack_weights`; :class:`TransferEnsemble`): the bases err differently
  on the new platform, and the mean of their errors is smaller than the nearest base's alone;
  a base near the new platform can be better shifted than retrained on a few dozen samples;
  what the mean still gets wrong on the samples then corrects the specs nearest them
  (:class:`LocalCorrection`);
* compared with ``scratch`` (the same regressor trained on the k samples alone) and ``base``
  (A's model unchanged).

Samples are chosen at random or by clustering (:func:`choose_samples`: the spec nearest the centre
of each of k k-means clusters in the standardized feature space, so a few dozen stand for the
whole range in proportion to how many specs lie where).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning, NotFittedError

from rooftune.errors import InvalidArgument
from rooftune.perfmodel.data import ProfileData
from rooftune.perfmodel.features import SCHEMA_FEATURES, featurize
from rooftune.perfmodel.regressors import PerfModel, as_features
from rooftune.primitives.spec import ConvSpec

METHODS = ("finetune", "ensemble", "residual", "scratch", "base")
#: What `rooftune transfer` may fit and save ("base" is the base model unchanged: a point of
#: comparison in the learning curve, not an adaptation).
ADAPT_METHODS = ("residual", "finetune", "ensemble", "scratch")
#: How an ensemble adapts each base: every base once per kind, weighed by :func:`stack_weights`.
ENSEMBLE_KINDS = ("finetune", "shift")
#: What one :class:`TransferModel` can be.
MODEL_METHODS = ("finetune", "shift", "residual", "scratch", "base")
SAMPLERS = ("cluster", "random")
DEFAULT_KS = (10, 25, 50, 100, 200)


def _sampler_space(specs: Sequence[ConvSpec]) -> np.ndarray:
    """Schema 1's features (sizes and shapes), standardized: the space samples are chosen and
    weighed in."""
    F = featurize(list(specs))[:, :len(SCHEMA_FEATURES[1])]
    return (F - F.mean(axis=0)) / (F.std(axis=0) + 1e-9)


def choose_samples(specs: Sequence[ConvSpec], k: int, sampler: str = "cluster", seed: int = 0) -> list[int]:
    """Indices of ``k`` specs to profile on the new platform. ``cluster``: k-means (seeded) splits
    the specs into ``k`` clusters in the standardized space of schema 1's features (sizes and
    shapes: the block-fill columns, bounded and many-valued, would split on odd channel counts
    instead; BENCHMARKS.md, perfmodel Run 7) and the spec nearest each cluster's centre is taken,
    so the samples are typical specs spread over the range: it transfers better than ``random``
    at every k tried, and better than a farthest-point (k-center) choice, which takes the
    outliers (BENCHMARKS.md, perfmodel Run 22)."""
    if sampler not in SAMPLERS:
        raise InvalidArgument("sampler", sampler, f"allowed {', '.join(SAMPLERS)}")
    n = len(specs)
    k = min(k, n)
    rng = np.random.default_rng(seed)
    if sampler == "random" or k == 0 or k == n:
        return sorted(rng.choice(n, size=k, replace=False).tolist())
    from sklearn.cluster import KMeans

    F = _sampler_space(specs)
    with warnings.catch_warnings():  # specs alike in every feature: fewer distinct clusters, topped up below
        warnings.simplefilter("ignore", ConvergenceWarning)
        km = KMeans(n_clusters=k, n_init=4, random_state=seed).fit(F)
    chosen: set[int] = set()
    for c in range(k):
        members = np.flatnonzero(km.labels_ == c)
        if len(members):
            chosen.add(int(members[np.argmin(np.linalg.norm(F[members] - km.cluster_centers_[c], axis=1))]))
    rest = np.setdiff1d(np.arange(n), sorted(chosen))
    chosen.update(rng.choice(rest, size=k - len(chosen), replace=False).tolist())
    return sorted(chosen)


def sample_weights(specs: Sequence[ConvSpec], idx: Sequence[int]) -> np.ndarray:
    """How many of ``specs`` each chosen one (``idx``) stands for: the specs nearer to it than to
    any other chosen one in the sampler's space, over their mean (so the weights average 1). A
    sample in a crowded part of the range weighs more in the fit than one that stands alone."""
    F = _sampler_space(specs)
    C = F[list(idx)]
    nearest = np.argmin(((F[:, None, :] - C[None, :, :]) ** 2).sum(axis=2), axis=1)
    counts = np.bincount(nearest, minlength=len(C)).astype(np.float64)
    return counts / counts.mean()


def _weighted_median(x: np.ndarray, w: np.ndarray) -> float:
    """The median of the known values of ``x``, each counted ``w`` times (even weights: the plain median)."""
    known = ~np.isnan(x)
    x, w = x[known], w[known]
    order = np.argsort(x)
    x, cum = x[order], np.cumsum(w[order])
    i = int(np.searchsorted(cum, cum[-1] / 2))
    if i + 1 < len(x) and np.isclose(cum[i], cum[-1] / 2):  # half the weight on each side: between the two
        return float((x[i] + x[i + 1]) / 2)
    return float(x[i])


def median_shifts(error: np.ndarray, weights: np.ndarray | None = None) -> list[float]:
    """Per column (primitive) of a (samples, primitives) array of log errors, its median (each
    row weighed by ``weights``); a column without samples takes the median of all (0 with none at all)."""
    w = np.ones(len(error)) if weights is None else np.asarray(weights, dtype=np.float64)
    overall = _weighted_median(error.ravel(), np.repeat(w, error.shape[1])) if np.any(~np.isnan(error)) else 0.0
    return [_weighted_median(c, w) if np.any(~np.isnan(c)) else overall for c in error.T]


class TransferModel(BaseEstimator):
    """A base :class:`PerfModel` adapted to a new platform; predicts like a PerfModel."""

    def __init__(self, base: PerfModel | None = None, method: str = "residual", n_estimators: int = 150,
                 random_state: int = 0) -> None:
        self.base = base
        self.method = method
        self.n_estimators = n_estimators
        self.random_state = random_state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # a model saved before ``conversion_`` or ``threads_`` existed has no measured conversions
        # and was fitted without a thread count
        super().__setstate__({"conversion_": None, "threads_": None, **state})

    def fit(self, X: Any, Y: np.ndarray, primitives: Sequence[str], provenance: dict[str, Any] | None = None,
            conversions: Sequence[tuple[ConvSpec, float]] | None = None, threads: int | None = None,
            weights: np.ndarray | None = None) -> TransferModel:
        """``threads``: the thread count the new platform's samples ran at (default: the base's);
        features of specs, the path PyTorch's own convolution takes among them, are computed for it.
        ``weights``: how much each sample counts (:func:`sample_weights`) in the shifts, the
        fine-tuning and the residual boosting (default: alike; ``scratch`` ignores them)."""
        if self.method not in MODEL_METHODS:
            raise InvalidArgument("method", self.method, f"allowed {', '.join(MODEL_METHODS)}",
                                  "an ensemble of bases is fitted by fit_transfer()")
        if self.method != "scratch" and (self.base is None or not hasattr(self.base, "primitives_")):
            raise InvalidArgument("base model", None, "a fitted PerfModel is needed for " + self.method)
        self.primitives_ = list(self.base.primitives_) if self.base is not None else list(primitives)
        for p in primitives:
            if p not in self.primitives_:
                self.primitives_.append(p)
        Y = self._align(np.asarray(Y, dtype=np.float64), primitives)
        self.caches_ = dict(self.base.caches_) if self.base is not None else None
        self.threads_ = threads if threads is not None else getattr(self.base, "threads_", None)
        self.provenance_ = {**(getattr(self.base, "provenance_", {}) or {}), "transfer": dict(provenance or {}),
                            "method": self.method, "samples": int(np.any(~np.isnan(Y), axis=1).sum())}
        F = as_features(X, self.caches_, self.threads_)
        self.conversion_ = getattr(self.base, "conversion_", None) if self.base is not None else None
        if conversions:
            from rooftune.perfmodel.regressors import fit_conversion

            self.conversion_ = fit_conversion(conversions) or self.conversion_
        if self.method == "scratch":
            self.model_ = PerfModel("gbr", n_estimators=200, max_depth=3, random_state=self.random_state)
            self.model_.fit(F, Y, self.primitives_)
        elif self.method == "finetune":
            base = self._fitted_base()
            if base.estimator != "mlp":
                raise InvalidArgument("base model", base.estimator, "fine-tuning needs an mlp base model")
            self.model_ = copy.deepcopy(base)
            Yb = self._align(Y, self.primitives_, base.primitives_)
            Fb = self.model_.features_of(F)  # the base's own schema
            X, lf = self.model_.net_input(Fb), self.model_._log_flops(Fb)
            logY = (np.log(Yb) - self.model_._offset(Fb)[:, None] - self.model_.y_mean_) / self.model_.y_std_
            known = bool(np.any(~np.isnan(logY)))
            for net in self.model_.nets_:  # each net of the base's ensemble, alike
                if known:
                    net.shift_outputs(median_shifts(logY - net.predict(X, lf=lf), weights))
                net.train(X, logY, 400, 3e-3, 0.0, trunk=False, lf=lf, anchor=1e-3, weights=weights)
        elif self.method == "shift":
            self.shifts_ = np.asarray(median_shifts(np.log(Y) - self._base_log(F), weights))
        elif self.method == "residual":
            from sklearn.ensemble import GradientBoostingRegressor

            base_log = self._base_log(F)
            rows, targets = self._residual_rows(F, base_log), (np.log(Y) - base_log).ravel()
            w = np.repeat(np.ones(len(Y)) if weights is None else np.asarray(weights, dtype=np.float64), Y.shape[1])
            known = ~np.isnan(targets)
            self.shift_ = _weighted_median(targets, w) if known.any() else 0.0
            self.residual_ = None
            if known.sum() >= 5:
                self.residual_ = GradientBoostingRegressor(
                    n_estimators=self.n_estimators, max_depth=2, learning_rate=0.1, subsample=0.8, loss="huber",
                    random_state=self.random_state).fit(rows[known], targets[known] - self.shift_,
                                                        sample_weight=w[known])
        return self

    def _fitted_base(self) -> PerfModel:
        """``base``: fit() refuses to go on without one for every method but scratch, which never
        reads it."""
        if self.base is None:
            raise InvalidArgument("base model", None, "a fitted PerfModel is needed for " + self.method)
        return self.base

    def _align(self, Y: np.ndarray, names: Sequence[str], into: Sequence[str] | None = None) -> np.ndarray:
        into = list(into if into is not None else self.primitives_)
        out = np.full((len(Y), len(into)), np.nan)
        for j, p in enumerate(names):
            if p in into:
                out[:, into.index(p)] = Y[:, j]
        return out

    def _base_log(self, F: np.ndarray) -> np.ndarray:
        base = self._fitted_base()
        b = base.predict_log(F)
        return self._align(b, base.primitives_)

    def _residual_rows(self, F: np.ndarray, base_log: np.ndarray) -> np.ndarray:
        n, P = base_log.shape
        onehot = np.eye(P)
        return np.asarray([np.concatenate([F[i], onehot[j], [np.nan_to_num(base_log[i, j])]])
                           for i in range(n) for j in range(P)])

    def predict_log(self, X: Any) -> np.ndarray:
        if not hasattr(self, "primitives_"):
            raise NotFittedError("this TransferModel is not fitted yet: call fit()")
        F = as_features(X, self.caches_, self.threads_)
        if self.method == "scratch":
            return self.model_.predict_log(F)
        if self.method == "finetune":
            return self._align(self.model_.predict_log(F), self._fitted_base().primitives_)
        base_log = self._base_log(F)
        if self.method == "base":
            return base_log
        if self.method == "shift":
            return base_log + self.shifts_
        out = base_log + self.shift_
        if self.residual_ is not None and len(F):
            out = out + self.residual_.predict(self._residual_rows(F, base_log)).reshape(base_log.shape)
        return out

    def predict(self, X: Any) -> np.ndarray:
        return np.exp(self.predict_log(X))

    def predict_conversion(self, specs: Sequence[ConvSpec]) -> np.ndarray:
        from rooftune.perfmodel.regressors import predict_conversion

        return predict_conversion(self.conversion_, specs)

    def extrapolated(self, X: Any) -> np.ndarray:
        base = self.base if self.base is not None else self.model_
        return base.extrapolated(X)


#: How many of the new platform's samples, the nearest, correct a spec's prediction
#: (:class:`LocalCorrection`), and how their count shrinks the correction: n / (n + shrink).
LOCAL_NEIGHBOURS = 4
LOCAL_SHRINK = 2.0


class LocalCorrection:
    """What an adapted model still gets wrong on the new platform's samples (their measured log
    times less its predictions, per primitive), carried to the specs nearest them: a spec's
    prediction moves by the distance-weighted mean of its :data:`LOCAL_NEIGHBOURS` nearest
    samples' errors in the standardized space of schema 1's features, shrunk by how many of them
    timed the primitive. Layers alike in shape err alike on one machine (a cache boundary, a kernel
    the bases did not know the cost of), which no global adaptation of the bases captures."""

    def __init__(self, features: np.ndarray, errors: np.ndarray, primitives: Sequence[str]) -> None:
        F = np.asarray(features, dtype=np.float64)[:, :len(SCHEMA_FEATURES[1])]
        self.mean_, self.scale_ = F.mean(axis=0), F.std(axis=0) + 1e-9
        self.points_ = (F - self.mean_) / self.scale_
        self.errors_ = np.asarray(errors, dtype=np.float64)
        self.primitives_ = list(primitives)

    def __call__(self, features: np.ndarray, names: Sequence[str]) -> np.ndarray:
        """The log correction of each row of ``features`` for each of ``names`` (0 where no near
        sample timed the primitive)."""
        out = np.zeros((len(features), len(names)))
        if not len(features) or not len(self.points_):
            return out
        Z = (np.asarray(features, dtype=np.float64)[:, :len(self.mean_)] - self.mean_) / self.scale_
        d = np.linalg.norm(Z[:, None, :] - self.points_[None, :, :], axis=2)
        near = np.argsort(d, axis=1)[:, :LOCAL_NEIGHBOURS]
        closeness = 1.0 / (1e-3 + np.take_along_axis(d, near, axis=1))
        for j, p in enumerate(names):
            if p not in self.primitives_:
                continue
            e = self.errors_[near, self.primitives_.index(p)]
            known = ~np.isnan(e)
            w = np.where(known, closeness, 0.0)
            n = known.sum(axis=1)
            mean = (np.where(known, e, 0.0) * w).sum(axis=1) / np.maximum(w.sum(axis=1), 1e-300)
            out[:, j] = mean * n / (n + LOCAL_SHRINK)
        return out


class TransferEnsemble(BaseEstimator):
    """Several base models, each adapted to the same samples of the new platform
    (:class:`TransferModel`, ``finetune`` and ``shift``), predicting the weighted mean of their log times
    (``weights``, one per member; None: equal); a primitive that only some members know takes
    the weighted mean of theirs (their plain mean where those weights are all 0). The first member is the base nearest
    the new platform: its training range flags extrapolated specs, and its conversion costs are
    used: the ones measured on the new platform when its samples timed three or more layout
    conversions (the same in every member), else the nearest base's. ``local``: a
    :class:`LocalCorrection` of the mean's errors on the samples, added to it (None: none)."""

    def __init__(self, members: Sequence[TransferModel] = (), weights: Sequence[float] | None = None,
                 local: LocalCorrection | None = None) -> None:
        if weights is not None and len(weights) != len(members):
            raise InvalidArgument("ensemble weights", len(weights), f"allowed one per member ({len(members)})")
        self.members = members
        self.weights = weights
        self.local = local

    def __setstate__(self, state: dict[str, Any]) -> None:
        # an ensemble saved before weights (or the local correction) existed: the plain weighted mean
        super().__setstate__({"weights": None, "local": None, **state})

    def _first(self) -> TransferModel:
        if not self.members:
            raise NotFittedError("this TransferEnsemble has no members: build it with fit_transfer()")
        return self.members[0]

    @property
    def primitives_(self) -> list[str]:
        out: list[str] = []
        for m in self.members:
            out += [p for p in m.primitives_ if p not in out]
        return out

    @property
    def method(self) -> str:
        return "ensemble"

    @property
    def provenance_(self) -> dict[str, Any]:
        prov = dict(self._first().provenance_)
        keys = ("platforms", "cpu_model", "microarchitecture", "specs", "networks")
        prov.update(method="ensemble",
                    bases=[{"adapted": m.method,
                            **{k: (m._fitted_base().provenance_ or {}).get(k) for k in keys}}
                           for m in self.members],
                    weights=[float(w) for w in self._weights()])
        if self.local is not None:
            prov["local_correction"] = {"samples": len(self.local.points_), "neighbours": LOCAL_NEIGHBOURS,
                                        "shrink": LOCAL_SHRINK}
        return prov

    def predict_log(self, X: Any) -> np.ndarray:
        X = X if isinstance(X, np.ndarray) else list(X)  # specs: each member computes its own features
        names = self.primitives_
        stack = np.full((len(self.members), len(X), len(names)), np.nan)
        for i, m in enumerate(self.members):
            stack[i] = m._align(m.predict_log(X), m.primitives_, names)
        known = ~np.isnan(stack)
        w = np.where(known, self._weights()[:, None, None], 0.0)
        w = np.where(w.sum(axis=0) > 0, w, known.astype(np.float64))  # the members that know it carry no weight
        total = np.where(known, stack, 0.0)
        weight = w.sum(axis=0)
        mean = np.where(weight > 0, (total * w).sum(axis=0) / np.maximum(weight, 1e-300), np.nan)
        if self.local is None:
            return mean
        first = self._first()
        return mean + self.local(as_features(X, first.caches_, first.threads_), names)

    def _weights(self) -> np.ndarray:
        n = len(self.members)
        return np.ones(n) / max(n, 1) if self.weights is None else np.asarray(self.weights, dtype=np.float64)

    def predict(self, X: Any) -> np.ndarray:
        return np.exp(self.predict_log(X))

    def predict_conversion(self, specs: Sequence[ConvSpec]) -> np.ndarray:
        return self._first().predict_conversion(specs)

    def extrapolated(self, X: Any) -> np.ndarray:
        return self._first().extrapolated(X)


def check_base(model: Any, method: str | None = None, what: str = "--base") -> None:
    """Refuse, before anything is profiled, a base that cannot be adapted by ``method``: a base is a
    trained :class:`PerfModel` (what `rooftune train --save` writes; a model `rooftune transfer`
    adapted is not adapted again), and fine-tuning needs an mlp."""
    if not isinstance(model, PerfModel) or not hasattr(model, "primitives_"):
        kind = "an adapted model (the output of rooftune transfer)" if isinstance(model, (TransferModel, TransferEnsemble)) \
            else type(model).__name__
        raise InvalidArgument(what, kind, "allowed a trained performance model (rooftune train --save)",
                              "or leave it out for the shipped base models")
    if method in ("finetune", "ensemble") and model.estimator != "mlp":
        raise InvalidArgument(what, f"a {model.estimator} model", f"{method} fine-tunes an mlp; use --method residual")


def fit_transfer(bases: Sequence[PerfModel | None], method: str, X: Any, Y: np.ndarray, primitives: Sequence[str],
                 random_state: int = 0, provenance: dict[str, Any] | None = None,
                 conversions: Sequence[tuple[ConvSpec, float]] | None = None,
                 threads: int | None = None, weights: np.ndarray | None = None) -> TransferModel | TransferEnsemble:
    """Adapt to the new platform's samples: ``bases[0]`` alone (the nearest) by ``method``, or,
    for ``ensemble``, every base fine-tuned and every base shifted (:data:`ENSEMBLE_KINDS`; the
    nearest base fine-tuned first), averaged with weights stacked on the samples
    (:func:`stack_weights`; each base must be an mlp)."""
    if method not in METHODS:
        raise InvalidArgument("method", method, f"allowed {', '.join(METHODS)}")
    kw: dict[str, Any] = dict(provenance=provenance, conversions=conversions, threads=threads,
                              weights=weights)
    if method != "ensemble":
        return TransferModel(bases[0] if bases else None, method, random_state=random_state).fit(X, Y, primitives, **kw)
    fitted = [b for b in bases if b is not None]
    if not fitted:
        raise InvalidArgument("base model", None, "ensemble needs at least one fitted base model")
    for b in fitted:
        check_base(b, "ensemble", "base model")
    return fit_ensemble(fitted, X, Y, primitives, random_state=random_state, **kw)


def fit_ensemble(bases: Sequence[PerfModel], X: Any, Y: np.ndarray, primitives: Sequence[str], random_state: int = 0,
                 finetuned: Sequence[TransferModel] = (), **kw: Any) -> TransferEnsemble:
    """Every base adapted each of :data:`ENSEMBLE_KINDS` ways, kind by kind, weighed by
    :func:`stack_weights`. ``finetuned``: the first bases already fine-tuned on these samples
    (the learning curve's ``finetune``), reused; ``kw``: :meth:`TransferModel.fit`'s."""
    done = {"finetune": list(finetuned)}
    members: list[TransferModel] = []
    for kind in ENSEMBLE_KINDS:
        have = done.get(kind, [])
        members += have + [TransferModel(b, kind, random_state=random_state).fit(X, Y, primitives, **kw)
                           for b in bases[len(have):]]
    ensemble = TransferEnsemble(members, stack_weights(bases, X, Y, primitives, random_state=random_state,
                                                       threads=kw.get("threads"), weights=kw.get("weights")))
    # what the weighted mean still gets wrong on the samples, for the specs near them
    X = X if isinstance(X, np.ndarray) else list(X)
    first = ensemble._first()
    errors = members[0]._align(np.log(np.asarray(Y, dtype=np.float64)), primitives, ensemble.primitives_) \
        - ensemble.predict_log(X)
    ensemble.local = LocalCorrection(as_features(X, first.caches_, first.threads_), errors, ensemble.primitives_)
    return ensemble


#: Folds of the out-of-fold predictions the ensemble's weights are stacked on.
STACK_FOLDS = 5


def stack_weights(bases: Sequence[PerfModel], X: Any, Y: np.ndarray, primitives: Sequence[str],
                  random_state: int = 0, threads: int | None = None, folds: int = STACK_FOLDS,
                  kinds: Sequence[str] = ENSEMBLE_KINDS, weights: np.ndarray | None = None) -> list[float] | None:
    """Weights of an ensemble's members (each base adapted each of ``kinds`` ways, kind by kind
    as :func:`fit_transfer` orders them), stacked on the samples (Breiman's stacked regression):
    each member fitted on all folds of the samples but one predicts that one, and the non-negative
    least-squares combination of those out-of-fold log times that best matches the measured ones
    gives the weights (summing to 1). A base near the new platform then carries the ensemble
    instead of being averaged with far ones; with no near base the weights stay near equal
    (BENCHMARKS.md, perfmodel Run 17). With the shifted bases among the members, a near base's
    median shift can outweigh its retrained heads (perfmodel Run 18).
    ``weights``: each sample's (:func:`sample_weights`), in the members' fits and in the least squares.
    None (equal weights) for fewer than two members or fewer samples than folds."""
    from scipy.optimize import nnls

    X = X if isinstance(X, np.ndarray) else list(X)
    Y = np.asarray(Y, dtype=np.float64)
    n = len(Y)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    members = [(kind, b) for kind in kinds for b in bases]
    if len(members) < 2 or n < folds:
        return None
    fold = np.random.default_rng(random_state).permutation(n) % folds
    logY = np.log(np.where(Y > 0, Y, np.nan))
    oof = np.full((len(members), *Y.shape), np.nan)
    for f in range(folds):
        fit, held = np.where(fold != f)[0], np.where(fold == f)[0]
        Xf = X[fit] if isinstance(X, np.ndarray) else [X[i] for i in fit]
        Xh = X[held] if isinstance(X, np.ndarray) else [X[i] for i in held]
        for i, (kind, b) in enumerate(members):
            m = TransferModel(b, kind, random_state=random_state).fit(Xf, Y[fit], primitives, threads=threads,
                                                                      weights=None if weights is None else w[fit])
            oof[i][held] = m._align(m.predict_log(Xh), m.primitives_, primitives)
    rows = np.all(~np.isnan(oof), axis=0) & ~np.isnan(logY)
    if not rows.any():
        return None
    root = np.sqrt(np.broadcast_to(w[:, None], Y.shape)[rows])  # least squares weighed by the samples'
    c, _ = nnls(oof[:, rows].T * root[:, None], logY[rows] * root)
    return [float(x) for x in c / c.sum()] if c.sum() > 0 else None


def learning_curve(base: PerfModel, target: ProfileData, ks: Sequence[int] = DEFAULT_KS, sampler: str = "cluster",
                   methods: Sequence[str] = METHODS, seed: int = 0, repeats: int = 1,
                   progress: Callable[[str], None] | None = None,
                   others: Sequence[PerfModel] = (), weigh: bool = True) -> dict[str, Any]:
    """For each k: choose k of the target's specs, adapt (each method), and score the predictions
    on the target's other specs. Figures per method per k (mean over ``repeats`` draws).
    ``others``: further base models for ``ensemble`` (with ``base`` first); without them, or with
    a base that is not an mlp, ``ensemble`` (like ``finetune``) is left out. ``weigh``: each
    sample counts as many specs as it stands for (:func:`sample_weights`). With the passes'
    spreads, each point also gives the share within +-10 % on the steady test rows
    (``within_10pct_steady``), and ``repeatability`` says how far the target's data agrees with
    itself: a curve on rows that repeat poorly measures their noise more than the transfer."""
    from rooftune.perfmodel.evaluate import predict_for, regression_metrics, steady_share

    say = progress or (lambda _m: None)
    bases = [base, *others]
    curve: dict[str, dict[int, dict[str, float]]] = {m: {} for m in methods}
    for k in ks:
        if k >= len(target):
            continue
        runs: dict[str, list[dict[str, float]]] = {m: [] for m in methods}
        for r in range(repeats):
            idx = choose_samples(target.specs, k, sampler, seed + r)
            chosen = set(idx)
            rest = [i for i in range(len(target)) if i not in chosen]
            train, test = target.subset(idx), target.subset(rest)
            w = sample_weights(target.specs, idx) if weigh else None
            tuned: list[TransferModel] = []  # each base fine-tuned once per draw, for finetune and ensemble

            def finetuned(n: int, train: ProfileData = train, r: int = r,
                          tuned: list[TransferModel] = tuned, w: np.ndarray | None = w) -> list[TransferModel]:
                tuned.extend(fit_transfer([b], "finetune", train.specs, train.times, train.primitives,
                                          random_state=seed + r, threads=train.threads, weights=w)
                             for b in bases[len(tuned):n])
                return tuned[:n]

            for m in methods:
                if m in ("finetune", "ensemble") and base.estimator != "mlp":
                    continue
                if m == "ensemble" and (not others or any(getattr(b, "estimator", None) != "mlp" for b in others)):
                    continue
                say(f"k={k} {m}")
                if m == "finetune":
                    tm: Any = finetuned(1)[0]
                elif m == "ensemble":  # as fit_transfer builds it, reusing the fine-tuned bases
                    tm = fit_ensemble(bases, train.specs, train.times, train.primitives, random_state=seed + r,
                                      finetuned=finetuned(len(bases)), threads=train.threads, weights=w)
                else:
                    tm = fit_transfer([None if m == "scratch" else base], m, train.specs, train.times, train.primitives,
                                      random_state=seed + r, threads=train.threads, weights=w)
                pred = predict_for(tm, test)
                metrics = regression_metrics(pred, test.times)
                if test.spread is not None:
                    metrics.update(steady_share(pred, test.times, test.spread))
                runs[m].append(metrics)
        for m, rs in runs.items():
            if rs:
                curve[m][k] = {key: float(np.mean([x[key] for x in rs])) for key in rs[0]
                               if key != "by_network" and all(key in x for x in rs)}
    return {"target": target.platform_id, "specs": len(target), "sampler": sampler, "ks": list(ks),
            "curve": {m: c for m, c in curve.items() if c}, "repeatability": target.repeatability()}


def plot_learning_curve(result: dict[str, Any], path: str, metric: str = "within_10pct") -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for m, c in result["curve"].items():
        ks = sorted(c)
        ax.plot(ks, [c[k][metric] * 100 for k in ks], marker="o", label=m)
    ax.set_xscale("log")
    ax.set_xticks(result["ks"])
    ax.set_xticklabels([str(k) for k in result["ks"]])
    ax.set_xlabel("profiled samples on the target platform (k)")
    ax.set_ylabel("predictions within +-10 % (%)" if metric == "within_10pct" else metric)
    ax.set_title(f"transfer to {result['target']} ({result['sampler']} sampler)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    from rooftune.fileio import save_figure

    save_figure(fig, path)
    return path

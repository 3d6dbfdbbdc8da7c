"""Regressors of log(time) per primitive, following scikit-learn's conventions (``fit`` returns
self, learned attributes end in ``_``, ``predict`` refuses before ``fit``, ``get_params``).

    m = PerfModel("gbr").fit(specs, times, primitives=names)    # times: (n_specs, n_primitives) s, NaN unknown
    m.predict(specs)                                            # (n_specs, n_primitives) seconds

``estimator`` is ``gbr`` (gradient boosting, one per primitive), ``rf`` (random forest, one per
primitive) or ``mlp`` (a PyTorch MLP with a trunk shared by all primitives and one output head per
primitive: what the transfer learning fine-tunes). The mlp is ``n_nets`` such nets (default 5),
trained alike from different initial weights, their log predictions averaged: an ensemble
predicts held-out networks better than any one of its nets and does not depend on a seed
(``benchmarks/perfmodel_eval.py``; BENCHMARKS.md, perfmodel Run 11).

``target`` is what each estimator learns: ``time`` (log seconds) or ``per_flop`` (log seconds per
FLOP of the spec; the prediction adds log FLOPs back). A tree predicts a constant per leaf: learning
log time, a leaf holds specs whose times differ by their sizes, and a held-out network's layers
fall between them; per FLOP, a leaf holds specs of like efficiency, which varies far less. On
this project's noisy profiled data neither target was better over all figures for the trees
(BENCHMARKS.md), so ``time`` is theirs; ``auto`` (the default) is ``time`` for them and
``roofline`` for the mlp.

``roofline`` (the mlp only) gives each primitive's head two outputs, a fixed cost ``o`` (log
seconds: the call, the dispatch, the packing) and a cost per FLOP ``e``, and predicts
``log(exp(o) + FLOPs * exp(e))``: a time-based roofline per primitive whose two parts are learned
from the spec's features. Small convolutions come out at their fixed cost and large ones at their
FLOPs over a learned throughput, so a layer larger or smaller than any seen in training is
predicted from the part that dominates it. The features are clamped to the training range when
predicting (the throughput of a layer larger than any seen is that of the largest seen; its FLOPs
still count in full). It predicts held-out networks better than the mlp of log time, above all
in the worst case, and fine-tunes better to a new platform (``benchmarks/perfmodel_eval.py``;
BENCHMARKS.md, perfmodel Run 10), so it is the mlp's default target.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from rooftune.errors import InvalidArgument, is_int
from rooftune.perfmodel.features import DEFAULT_CACHES, FEATURES, SCHEMA_FEATURES, featurize
from rooftune.primitives.spec import ConvSpec

ESTIMATORS = ("gbr", "rf", "mlp")
TARGETS = ("time", "per_flop", "roofline")


def resolve_target(estimator: str, target: str) -> str:
    """``auto`` is ``roofline`` for the mlp and ``time`` for the trees; any other target is
    checked against :data:`TARGETS` and the estimator."""
    if target == "auto":
        return "roofline" if estimator == "mlp" else "time"
    if target not in TARGETS:
        raise InvalidArgument("target", target, f"allowed auto, {', '.join(TARGETS)}")
    if target == "roofline" and estimator != "mlp":
        raise InvalidArgument("target", target, "allowed with the mlp only (time, per_flop with gbr and rf)")
    return target
_LOG_FLOPS = FEATURES.index("log_flops")


def as_features(X: Any, caches: Mapping[str, int] | None, threads: int | None = None) -> np.ndarray:
    """Feature matrix from a list of ConvSpec (or one) or an array already featurized."""
    if isinstance(X, ConvSpec):
        X = [X]
    if isinstance(X, np.ndarray):
        if X.ndim != 2 or X.shape[1] not in {len(f) for f in SCHEMA_FEATURES.values()}:
            raise InvalidArgument("features", f"an array of shape {X.shape}", "allowed ConvSpecs, or rows of "
                                  f"{' or '.join(str(len(f)) for f in SCHEMA_FEATURES.values())} features "
                                  "(rooftune.perfmodel.features.SCHEMA_FEATURES)")
        return X.astype(np.float64, copy=False)
    if X is None or isinstance(X, (str, bytes)) or not hasattr(X, "__iter__"):
        raise InvalidArgument("specs", X, "allowed a list of ConvSpec, or a feature matrix")
    X = list(X)
    if X and isinstance(X[0], ConvSpec):
        return featurize(X, caches, threads)
    return np.asarray(X, dtype=np.float64).reshape(len(X), -1) if X else np.zeros((0, len(FEATURES)))


class MLP:
    """Shared trunk, one head per primitive, trained on the known entries of log-time (masked MSE).

    With ``roofline`` = (offset of the fixed cost, offset of the cost per FLOP, scale), all in log
    seconds (PerfModel passes the data's least log time, its median log time per FLOP and its
    spread, so that a head's zero output starts near the data), each primitive has two head outputs and the net predicts log seconds as
    ``logaddexp(o, log_flops + e)`` (see the module's docstring); ``lf``, the specs' natural-log
    FLOPs, is then passed to :meth:`train` and :meth:`predict`."""

    def __init__(self, n_features: int, n_outputs: int, hidden: int, seed: int,
                 roofline: tuple[float, float, float] | None = None) -> None:
        import torch

        torch.manual_seed(seed)
        self.roofline = roofline
        self._build(n_features, n_outputs * (2 if roofline else 1), hidden)

    def _build(self, n_features: int, n_outputs: int, hidden: int) -> None:
        import torch

        self.trunk = torch.nn.Sequential(
            torch.nn.Linear(n_features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden), torch.nn.ReLU())
        self.heads = torch.nn.Linear(hidden, n_outputs)

    def forward(self, x: Any, lf: Any = None) -> Any:
        h = self.heads(self.trunk(x))
        if not self.roofline:
            return h
        import torch

        fixed, per_flop, scale = self.roofline
        n = h.shape[1] // 2
        return torch.logaddexp(h[:, :n] * scale + fixed, lf[:, None] + h[:, n:] * scale + per_flop)

    def _lf(self, lf: np.ndarray | None, n: int) -> Any:
        import torch

        if not self.roofline:
            return None
        if lf is None:
            raise ValueError("a roofline MLP needs the specs' log FLOPs")
        return torch.as_tensor(np.asarray(lf, dtype=np.float64).reshape(n), dtype=torch.float32)

    def train(self, X: np.ndarray, Y: np.ndarray, epochs: int, lr: float, weight_decay: float,
              trunk: bool = True, lf: np.ndarray | None = None, anchor: float = 0.0,
              weights: np.ndarray | None = None) -> None:
        """Masked MSE on the known entries of Y, each row weighed by ``weights`` (default 1);
        ``anchor`` > 0 adds ``anchor`` times the squared distance of the trained weights from
        where they started (L2-SP: fine-tuning on a few samples stays near the base model instead
        of near zero)."""
        import torch

        x = torch.as_tensor(X, dtype=torch.float32)
        lfs = self._lf(lf, len(X))
        # the roofline net's outputs are log seconds: its error is weighed in units of their spread
        unit = self.roofline[2] if self.roofline else 1.0
        y = torch.as_tensor(np.nan_to_num(Y), dtype=torch.float32)
        known = ~np.isnan(Y) * (1.0 if weights is None else np.asarray(weights, dtype=np.float64)[:, None])
        mask = torch.as_tensor(known, dtype=torch.float32)
        params = list(self.heads.parameters()) + (list(self.trunk.parameters()) if trunk else [])
        start = [p.detach().clone() for p in params] if anchor > 0 else []
        for p in self.trunk.parameters():
            p.requires_grad_(trunk)
        opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs)
        n = max(float(mask.sum()), 1.0)
        with torch.enable_grad():
            for _ in range(epochs):
                opt.zero_grad()
                loss = ((((self.forward(x, lfs) - y) / unit) ** 2) * mask).sum() / n
                if start:
                    loss = loss + anchor * sum(((p - p0) ** 2).sum() for p, p0 in zip(params, start, strict=True))
                loss.backward()
                opt.step()
                sched.step()
        for p in self.trunk.parameters():
            p.requires_grad_(True)

    def shift_outputs(self, d: np.ndarray | Sequence[float]) -> None:
        """Add ``d`` (one value per primitive, in the units of Y) to every prediction: through the
        heads' biases (for the roofline net, both parts scaled alike)."""
        import torch

        d = np.asarray(d, dtype=np.float64)
        if self.roofline:
            d = np.concatenate([d, d]) / self.roofline[2]
        with torch.no_grad():
            # in place: torch's stubs type Tensor.__iadd__ as giving a Tensor, where it gives the
            # Parameter itself back
            self.heads.bias += torch.as_tensor(d, dtype=torch.float32)  # type: ignore[misc]

    def predict(self, X: np.ndarray, lf: np.ndarray | None = None) -> np.ndarray:
        import torch

        with torch.no_grad():
            return self.forward(torch.as_tensor(X, dtype=torch.float32), self._lf(lf, len(X))).numpy().astype(np.float64)

    # The state is numpy arrays, not torch modules, so a saved model (the shipped base models
    # among them) holds no torch object and loads under any torch release.
    def __getstate__(self) -> dict[str, Any]:
        return {"weights": {f"{part}.{k}": v.detach().cpu().numpy().copy()
                            for part, module in (("trunk", self.trunk), ("heads", self.heads))
                            for k, v in module.state_dict().items()},
                "roofline": self.roofline}

    def __setstate__(self, state: dict[str, Any]) -> None:
        import torch

        self.roofline = state.get("roofline")
        if "weights" not in state:  # pickled before the array format, as modules (convert_pickle reads these)
            self.trunk, self.heads = state["trunk"], state["heads"]
            return
        weights = state["weights"]
        n_features, n_outputs, hidden = _weight_sizes(weights)
        with torch.random.fork_rng(devices=[]):  # the initial weights are overwritten; leave the caller's RNG be
            self._build(n_features, n_outputs, hidden)
        for part, module in (("trunk", self.trunk), ("heads", self.heads)):
            module.load_state_dict({k.split(".", 1)[1]: torch.as_tensor(v) for k, v in weights.items()
                                    if k.startswith(part + ".")})


def _weight_sizes(weights: Any) -> tuple[int, int, int]:
    """The features, outputs and hidden width of an :class:`MLP`'s saved weights, checked to be
    the arrays of its layers: the net is built at these sizes before the weights are copied in,
    so sizes the arrays do not hold would allocate what the file never paid for."""
    if not isinstance(weights, dict) or not all(isinstance(v, np.ndarray) for v in weights.values()):
        raise ValueError("an MLP's weights are not a dict of arrays")
    first, heads = weights.get("trunk.0.weight"), weights.get("heads.weight")
    if first is None or heads is None or first.ndim != 2 or heads.ndim != 2:
        raise ValueError("an MLP's weights have no 2-D trunk.0.weight and heads.weight")
    (hidden, n_features), n_outputs = first.shape, heads.shape[0]
    want = {"trunk.0.weight": (hidden, n_features), "heads.weight": (n_outputs, hidden),
            **{f"trunk.{i}.weight": (hidden, hidden) for i in (2, 4)},
            **{f"trunk.{i}.bias": (hidden,) for i in (0, 2, 4)}, "heads.bias": (n_outputs,)}
    got = {k: v.shape for k, v in weights.items()}
    if got != want or min(hidden, n_features, n_outputs) < 1 or \
            any(v.dtype.kind != "f" for v in weights.values()):
        raise ValueError(f"an MLP's weights are not float arrays of shapes {want}")
    return n_features, n_outputs, hidden


class PerfModel(BaseEstimator):
    """Predicts each primitive's time on a convolution from its features."""

    def __init__(self, estimator: str = "gbr", n_estimators: int = 200, max_depth: int = 4,
                 learning_rate: float = 0.1, hidden: int = 128, epochs: int = 1500, random_state: int = 0,
                 target: str = "auto", n_nets: int = 5) -> None:
        self.estimator = estimator
        self.target = target
        self.n_nets = n_nets
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.hidden = hidden
        self.epochs = epochs
        self.random_state = random_state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # a model saved before ``target`` existed learned log time; one saved before ``n_nets``
        # existed has one net; one saved before ``threads_`` existed was fitted without a thread count
        state = {"target": "time", "n_nets": 1, "threads_": None, **state}
        if "net_" in state:
            state["nets_"] = [state.pop("net_")]
        super().__setstate__(state)

    # ------------------------------------------------------------------ fitting
    def fit(self, X: Any, Y: np.ndarray, primitives: Sequence[str], caches: Mapping[str, int] | None = None,
            provenance: Mapping[str, Any] | None = None,
            conversions: Sequence[tuple[ConvSpec, float]] | None = None, threads: int | None = None) -> PerfModel:
        """``Y[i, j]``: seconds of primitive ``primitives[j]`` on spec i (NaN unknown). ``conversions``:
        measured NCHW <-> NHWC conversions of spec inputs, for :meth:`predict_conversion`.
        ``caches`` and ``threads`` (None: more than one) describe where the times were measured:
        features of specs given later are computed for the same."""
        if self.estimator not in ESTIMATORS:
            raise InvalidArgument("estimator", self.estimator, f"allowed {', '.join(ESTIMATORS)}")
        target = resolve_target(self.estimator, self.target)
        if isinstance(self.n_nets, bool) or not isinstance(self.n_nets, int) or self.n_nets < 1:
            raise InvalidArgument("n_nets", self.n_nets, "allowed an integer >= 1 (the mlp's ensemble size)")
        for name in ("hidden", "epochs"):
            v = getattr(self, name)
            if not is_int(v) or v < 1:
                raise InvalidArgument(name, v, "allowed an integer >= 1")
        if threads is not None and (not is_int(threads) or threads < 1):
            raise InvalidArgument("threads", threads, "allowed an integer >= 1 (the threads the times were "
                                  "measured at), or None for more than one")
        if caches is not None and not (isinstance(caches, Mapping) and all(
                is_int(caches.get(k)) and caches[k] > 0 for k in DEFAULT_CACHES)):
            raise InvalidArgument("caches", caches, f"allowed a mapping of {', '.join(DEFAULT_CACHES)} to sizes in "
                                  "bytes (rooftune.perfmodel.features.cache_sizes(fingerprint))")
        self.caches_ = dict(caches or DEFAULT_CACHES)
        self.threads_ = threads
        F = as_features(X, self.caches_, threads)
        Y = np.asarray(Y, dtype=np.float64)
        if Y.ndim != 2 or Y.shape != (len(F), len(primitives)):
            raise InvalidArgument("times", Y.shape, f"allowed shape ({len(F)}, {len(primitives)}): specs x primitives")
        if len(F) == 0 or not np.any(Y > 0):  # NaN and times <= 0 are no data
            raise InvalidArgument("training data", "empty" if len(F) == 0 or np.all(np.isnan(Y)) else "no time > 0", "needs profiled times; run `rooftune profile` first")
        self.target_ = target
        logY = np.log(np.where(Y > 0, Y, np.nan)) - self._offset(F)[:, None]
        self.primitives_ = list(primitives)
        self.n_features_in_ = F.shape[1]
        self.feature_names_in_ = np.asarray(FEATURES[: F.shape[1]], dtype=object)
        self.x_mean_ = F.mean(axis=0)
        self.x_std_ = F.std(axis=0) + 1e-9
        self.feature_min_ = F.min(axis=0)
        self.feature_max_ = F.max(axis=0)
        self.n_train_ = {p: int(np.sum(~np.isnan(logY[:, j]))) for j, p in enumerate(self.primitives_)}
        self.provenance_ = dict(provenance or {})
        self.conversion_ = fit_conversion(conversions or [])
        if self.estimator == "mlp":
            roofline, lf = None, self._log_flops(F)
            if target == "roofline":
                # outputs in log seconds, initial heads at the data's least time and median cost per FLOP
                roofline = (float(np.nanmin(logY)), float(np.nanmedian(logY - lf[:, None])),
                            float(np.nanstd(logY)) or 1.0)
                self.y_mean_, self.y_std_ = 0.0, 1.0
            else:
                self.y_mean_ = float(np.nanmean(logY))
                self.y_std_ = float(np.nanstd(logY)) or 1.0
            # n_nets nets from different initial weights, their log predictions averaged
            self.nets_ = []
            for i in range(self.n_nets):
                net = MLP(F.shape[1], len(self.primitives_), self.hidden, self.random_state + i, roofline=roofline)
                net.train(self._scale(F), (logY - self.y_mean_) / self.y_std_, self.epochs, 3e-3, 1e-5, lf=lf)
                self.nets_.append(net)
        else:
            self.estimators_ = {}
            for j, p in enumerate(self.primitives_):
                known = ~np.isnan(logY[:, j])
                if known.sum() < 2:
                    continue
                self.estimators_[p] = self._make().fit(F[known], logY[known, j])
        return self

    def _make(self) -> Any:
        if self.estimator == "gbr":
            from sklearn.ensemble import GradientBoostingRegressor

            return GradientBoostingRegressor(n_estimators=self.n_estimators, max_depth=self.max_depth,
                                             learning_rate=self.learning_rate, subsample=0.8, loss="huber",
                                             random_state=self.random_state)
        from sklearn.ensemble import RandomForestRegressor

        return RandomForestRegressor(n_estimators=self.n_estimators, min_samples_leaf=1, max_features=0.6,
                                     random_state=self.random_state, n_jobs=1)

    def _offset(self, F: np.ndarray) -> np.ndarray:
        """What the learned target leaves out of log(seconds), per spec (models saved before
        ``target`` existed learned log time: no offset)."""
        if getattr(self, "target_", "time") == "per_flop" and F.shape[1] > _LOG_FLOPS:
            return self._log_flops(F)
        return np.zeros(len(F))

    @staticmethod
    def _log_flops(F: np.ndarray) -> np.ndarray:
        return F[:, _LOG_FLOPS] * np.log(2.0)

    def _scale(self, F: np.ndarray) -> np.ndarray:
        return (F - self.x_mean_) / self.x_std_

    def net_input(self, F: np.ndarray) -> np.ndarray:
        """The mlp's input for features F: standardized, and for the roofline target clamped to
        the training range first (FLOPs enter the roofline's sum unclamped)."""
        if getattr(self, "target_", "time") == "roofline":
            F = np.clip(F, self.feature_min_, self.feature_max_)
        return self._scale(F)

    def features_of(self, X: Any) -> np.ndarray:
        """X's features as this model reads them: a model fitted on an older feature schema (the
        first columns of today's) gets those columns only."""
        self._check()
        F = as_features(X, self.caches_, self.threads_)
        n = self.n_features_in_
        if F.shape[1] > n and list(getattr(self, "feature_names_in_", [])) == list(FEATURES[:n]):
            F = F[:, :n]
        return F

    def _check(self) -> None:
        if not hasattr(self, "primitives_"):
            raise NotFittedError("this PerfModel is not fitted yet: call fit() or load a saved model")

    # ------------------------------------------------------------------ predicting
    def predict_log(self, X: Any) -> np.ndarray:
        """log(seconds), (n_specs, n_primitives); NaN for a primitive the model has no data for."""
        F = self.features_of(X)
        if F.shape[1] != self.n_features_in_:
            raise InvalidArgument("features", F.shape[1], f"this model takes {self.n_features_in_}")
        if self.estimator == "mlp":
            x, lf = self.net_input(F), self._log_flops(F)
            mean = np.mean([net.predict(x, lf=lf) for net in self.nets_], axis=0)
            return mean * self.y_std_ + self.y_mean_ + self._offset(F)[:, None]
        out = np.full((len(F), len(self.primitives_)), np.nan)
        for j, p in enumerate(self.primitives_):
            if p in self.estimators_ and len(F):
                out[:, j] = self.estimators_[p].predict(F)
        return out + self._offset(F)[:, None]

    def predict(self, X: Any) -> np.ndarray:
        """Seconds per (spec, primitive)."""
        return np.exp(self.predict_log(X))

    def predict_conversion(self, specs: Sequence[ConvSpec]) -> np.ndarray:
        """Seconds to convert each spec's input between NCHW and NHWC."""
        self._check()
        return predict_conversion(getattr(self, "conversion_", None), specs)

    def extrapolated(self, X: Any, margin: float = 0.5) -> np.ndarray:
        """True for a spec outside the training range (any feature beyond min/max by more than
        ``margin`` in its own units; sizes are log2, so 0.5 is a factor of 1.4)."""
        F = self.features_of(X)
        return np.any((F < self.feature_min_ - margin) | (F > self.feature_max_ + margin), axis=1)

    def describe(self) -> dict[str, Any]:
        self._check()
        return {"estimator": self.estimator, "primitives": self.primitives_, "rows": self.n_train_,
                "provenance": self.provenance_, "params": self.get_params()}


def _input_bytes(spec: ConvSpec) -> float:
    return float(spec.N * spec.C * spec.H * spec.W * (1 if spec.dtype == "int8" else 4))


def fit_conversion(samples: Sequence[tuple[ConvSpec, float]]) -> tuple[float, float] | None:
    """log(seconds) = a + b log(bytes) over measured layout conversions (None with fewer than 3)."""
    pts = [(np.log(_input_bytes(s)), np.log(t)) for s, t in samples if t and t > 0]
    if len(pts) < 3:
        return None
    x, y = np.asarray(pts).T
    b, a = np.polyfit(x, y, 1)
    return float(a), float(b)


#: A conversion's rate when none was measured: read and write the tensor at 10 GB/s.
FALLBACK_CONVERSION_RATE = 10e9


def predict_conversion(coef: tuple[float, float] | None, specs: Sequence[ConvSpec]) -> np.ndarray:
    sizes = np.asarray([_input_bytes(s) for s in specs], dtype=np.float64)
    if coef is None:
        return 2 * sizes / FALLBACK_CONVERSION_RATE
    return np.exp(coef[0] + coef[1] * np.log(sizes))

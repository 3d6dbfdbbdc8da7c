"""Classifiers that name the fastest convolution method directly (after Perri et al. 2019): a
decision tree and Gaussian naive Bayes, one per precision; and the two baselines they are judged
against: the framework's own default path, and a fixed rule list in the style of ARM Compute
Library's ``get_convolution_method``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from rooftune.errors import InvalidArgument
from rooftune.perfmodel.features import DEFAULT_CACHES, FEATURES, featurize
from rooftune.primitives.spec import ConvSpec

CLASSIFIERS = ("tree", "nb")
#: Share of the largest feature variance added to every class's variances in naive Bayes.
NB_VAR_SMOOTHING = 1e-2
_INT8 = FEATURES.index("int8")


class MethodClassifier(BaseEstimator):
    """Predicts the fastest primitive of a spec, with one classifier per precision."""

    def __init__(self, kind: str = "tree", max_depth: int | None = 8, random_state: int = 0) -> None:
        self.kind = kind
        self.max_depth = max_depth
        self.random_state = random_state

    def _make(self) -> Any:
        if self.kind == "tree":
            from sklearn.tree import DecisionTreeClassifier

            return DecisionTreeClassifier(max_depth=self.max_depth, min_samples_leaf=2, random_state=self.random_state)
        from sklearn.naive_bayes import GaussianNB

        # A feature constant within a class (kernel size, depthwise, stride among one primitive's
        # wins) has zero variance there: with scikit-learn's default smoothing (1e-9 of the largest
        # variance) one such feature off by a little vetoes the class outright, and a held-out
        # network's layers then get primitives many times slower (BENCHMARKS.md, perfmodel Run 6).
        return GaussianNB(var_smoothing=NB_VAR_SMOOTHING)

    def fit(self, specs: Sequence[ConvSpec], labels: Sequence[str], threads: int | None = None) -> MethodClassifier:
        """``labels``: each spec's fastest primitive, measured at ``threads`` threads (None: more
        than one; the features of specs predicted later are computed for the same)."""
        if self.kind not in CLASSIFIERS:
            raise InvalidArgument("classifier", self.kind, f"allowed {', '.join(CLASSIFIERS)}")
        if len(specs) != len(labels) or not specs:
            raise InvalidArgument("training data", f"{len(specs)} specs / {len(labels)} labels",
                                  "needs one best primitive per spec, at least one spec")
        self.threads_ = threads
        F = featurize(list(specs), DEFAULT_CACHES, threads)
        y = np.asarray(labels, dtype=object)
        self.models_: dict[str, Any] = {}
        self.constant_: dict[str, str] = {}
        for precision, sel in (("fp32", F[:, _INT8] == 0), ("int8", F[:, _INT8] == 1)):
            if not sel.any():
                continue
            classes = set(y[sel])
            if len(classes) == 1:
                self.constant_[precision] = next(iter(classes))
            else:
                self.models_[precision] = self._make().fit(F[sel], y[sel])
        self.classes_ = np.asarray(sorted(set(y)), dtype=object)
        return self

    def predict(self, specs: Sequence[ConvSpec]) -> np.ndarray:
        if not hasattr(self, "classes_"):
            raise NotFittedError("this MethodClassifier is not fitted yet: call fit()")
        specs = list(specs)
        F = featurize(specs, DEFAULT_CACHES, self.threads_)
        out = np.empty(len(specs), dtype=object)
        for precision, sel in (("fp32", F[:, _INT8] == 0), ("int8", F[:, _INT8] == 1)):
            if not sel.any():
                continue
            if precision in self.models_:
                out[sel] = self.models_[precision].predict(F[sel])
            else:
                out[sel] = self.constant_.get(precision, "pytorch-default")
        return out


def framework_default(spec: ConvSpec) -> str:
    """What ``F.conv2d`` does: PyTorch's own dispatch (oneDNN where it applies, else ATen)."""
    return "pytorch-default" if spec.dtype == "fp32" else "int8-x86"


def acl_rules(spec: ConvSpec) -> str:
    """A fixed rule list in the style of ARM Compute Library's ``get_convolution_method``:
    dilation -> GEMM; kernel > 7 -> FFT; few input channels -> GEMM; 3x3 stride 1 -> Winograd;
    else GEMM (1x1 as one GEMM)."""
    if spec.dtype != "fp32":
        return framework_default(spec)
    if spec.groups != 1:
        return "pytorch-default"  # ACL runs depthwise through its own direct kernel
    if spec.dilation != (1, 1):
        return "im2col-gemm"
    if max(spec.R, spec.S) > 7:
        return "fft"
    if spec.C < 16:
        return "im2col-gemm"
    if (spec.R, spec.S) == (3, 3) and spec.stride == (1, 1):
        return "winograd-f4x4"
    if (spec.R, spec.S) == (1, 1):
        return "gemm-1x1-nchw"
    return "im2col-gemm"


BASELINES = {"framework-default": framework_default, "acl-rules": acl_rules}

"""What a loaded model's state must be before it predicts.

skops rebuilds each object of a model file from its stored state and runs no code the file names,
but that state is whatever the file says. scikit-learn follows a tree's node arrays in native code
without bounds checks (``Tree.apply``, gradient boosting's ``predict_stages``): a child, a feature
index or a node count set out of range makes a prediction read and write outside the arrays, and
the process crashes or predicts garbage. That is why skops leaves ``sklearn.tree._tree.Tree`` off
its own trusted list. :func:`check_model` walks a loaded model from its root, by type, through
every estimator the file may hold (:data:`rooftune.perfmodel.persist.TRUSTED_TYPES`), and refuses
state no fitted rooftune estimator has:

- a tree: one node or more, as many as its arrays hold; each split's children later nodes (the
  builders number a node after its parent, so a walk down always ends), every node but the root
  the child of exactly one split, leaves with both children -1 and feature -2; split features
  within the estimator's feature count and finite thresholds; values of shape (nodes, 1, classes)
  and finite; the stored depth that of the nodes;
- the ensembles around the trees: each tree of the feature count its ensemble is given, gradient
  boosting's stages one column wide, as its first prediction (a single constant) is;
- the arrays rooftune's own estimators and naive Bayes compute with: of the shape the feature and
  primitive counts say (a wrong shape would broadcast to garbage), finite where fitting makes them so.

A fault raises :class:`DamagedModel` naming where in the model it is and what is wrong.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rooftune.errors import is_int, is_real
from rooftune.perfmodel.classifiers import CLASSIFIERS, MethodClassifier
from rooftune.perfmodel.features import DEFAULT_CACHES, FEATURES, SCHEMA_FEATURES
from rooftune.perfmodel.regressors import ESTIMATORS, MLP, TARGETS, PerfModel
from rooftune.perfmodel.transfer import MODEL_METHODS, LocalCorrection, TransferEnsemble, TransferModel

#: scikit-learn's marks in a tree's node arrays: a leaf's children, a leaf's feature.
TREE_LEAF = -1
TREE_UNDEFINED = -2
#: The feature counts of the schemas this release reads.
_FEATURE_COUNTS = frozenset(len(f) for f in SCHEMA_FEATURES.values())


class DamagedModel(ValueError):
    """A loaded model holds state no fitted rooftune estimator has; the message says where and what."""


def check_model(model: Any) -> None:
    """Refuse (:class:`DamagedModel`) a loaded model whose state no fitted rooftune estimator has
    (see the module's docstring). Runs no prediction."""
    check = _ROOTS.get(type(model))
    if check is None:
        raise DamagedModel(f"holds a {type(model).__name__} at its root, not one of "
                           f"{', '.join(t.__name__ for t in _ROOTS)}")
    check(model, type(model).__name__)


# ---------------------------------------------------------------------------------------- values
def _fail(where: str, what: str) -> DamagedModel:
    return DamagedModel(f"{where}: {what}")


def _attr(obj: Any, name: str, where: str) -> Any:
    if name not in vars(obj):
        raise _fail(where, f"has no {name}")
    return vars(obj)[name]


def _exact(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if type(value) not in kinds:
        raise _fail(where, f"is a {type(value).__name__}, not a {' or '.join(k.__name__ for k in kinds)}")
    return value


def _int(value: Any, where: str, low: int, high: int | None = None) -> int:
    if not is_int(value) or value < low or (high is not None and value > high):
        raise _fail(where, f"{value!r} is not an integer in {low}..{'' if high is None else high}")
    return int(value)


def _real(value: Any, where: str, positive: bool = False) -> float:
    if not is_real(value) or not math.isfinite(value) or (positive and value <= 0):
        raise _fail(where, f"{value!r} is not a finite{' positive' if positive else ''} number")
    return float(value)


def _choice(value: Any, allowed: tuple[str, ...], where: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise _fail(where, f"{value!r} is not one of {', '.join(allowed)}")
    return value


def _names(value: Any, where: str, unique: bool = True) -> list[str]:
    items = list(value) if isinstance(value, (list, tuple, np.ndarray)) else None
    if items is None or not all(isinstance(v, str) for v in items):
        raise _fail(where, "is not a list of names")
    if unique and len(set(items)) != len(items):
        raise _fail(where, "names one more than once")
    return items


def _array(value: Any, shape: tuple[int, ...], where: str, finite: bool = True,
           positive: bool = False) -> np.ndarray:
    """A float array of ``shape``: finite (NaN allowed where ``finite`` is False, infinities never),
    and > 0 where ``positive``."""
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "fiu":
        raise _fail(where, f"is a {type(value).__name__}, not an array of numbers")
    if value.shape != shape:
        raise _fail(where, f"has shape {value.shape}, not {shape}")
    if np.isinf(value).any() or (finite and np.isnan(value).any()):
        raise _fail(where, f"holds a value that is not finite{'' if finite else ' (NaN aside)'}")
    if positive and not (value > 0).all():
        raise _fail(where, "holds a value <= 0")
    return value


def _reals(value: Any, n: int, where: str) -> None:
    if not isinstance(value, (list, tuple)) or len(value) != n:
        raise _fail(where, f"is not {n} numbers")
    for i, v in enumerate(value):
        _real(v, f"{where}[{i}]")


def _dict(value: Any, where: str) -> dict[Any, Any]:
    if type(value) is not dict:
        raise _fail(where, f"is a {type(value).__name__}, not a dict")
    return value


def _optional_threads(obj: Any, where: str) -> None:
    threads = vars(obj).get("threads_")
    if threads is not None:
        _int(threads, f"{where}.threads_", 1)


def _caches(value: Any, where: str) -> None:
    if not isinstance(value, Mapping):
        raise _fail(where, f"is a {type(value).__name__}, not a mapping of cache sizes")
    for k in DEFAULT_CACHES:
        _int(value.get(k), f"{where}[{k!r}]", 1)


def _conversion(obj: Any, where: str) -> None:
    conversion = vars(obj).get("conversion_")
    if conversion is not None:
        _reals(conversion, 2, f"{where}.conversion_")


# ------------------------------------------------------------------------------ scikit-learn trees
def _tree_nodes(tree: Any, n_features: int, n_classes: int, where: str) -> None:
    """The node and value arrays of a fitted ``sklearn.tree._tree.Tree`` (see the module's docstring)."""
    from sklearn.tree._tree import Tree

    _exact(tree, Tree, where)
    if tree.n_features != n_features:
        raise _fail(where, f"has {tree.n_features} features, its estimator {n_features}")
    classes = [int(c) for c in tree.n_classes]
    if tree.n_outputs != 1 or classes != [n_classes]:
        raise _fail(where, f"has {tree.n_outputs} outputs of {classes} classes, not 1 of {n_classes}")
    count, capacity = tree.node_count, tree.capacity
    if count < 1 or count != capacity:
        raise _fail(where, f"node count {count} is not the {capacity} nodes its arrays hold (at least 1)")
    state = tree.__getstate__()
    nodes, values = state["nodes"], state["values"]
    left, right = nodes["left_child"], nodes["right_child"]
    feature, threshold = nodes["feature"], nodes["threshold"]
    index = np.arange(count)
    leaf = left == TREE_LEAF
    split = ~leaf
    faults = (
        (split & ((left <= index) | (left >= count)), "left child", left, "a later node (up to {last}) or -1 at a leaf"),
        (split & ((right <= index) | (right >= count)), "right child", right,
         "a later node (up to {last}) at a split"),
        (leaf & (right != TREE_LEAF), "right child", right, "-1 at a leaf (its left child is -1)"),
        (split & ((feature < 0) | (feature >= n_features)), "feature", feature,
         f"a feature index in 0..{n_features - 1}"),
        (leaf & (feature != TREE_UNDEFINED), "feature", feature, f"{TREE_UNDEFINED} at a leaf"),
        (split & ~np.isfinite(threshold), "threshold", threshold, "a finite number"),
    )
    for bad, field, column, allowed in faults:
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise _fail(where, f"node {i} {field} {column[i]} is not {allowed.format(last=count - 1)}")
    parents = np.bincount(np.concatenate([left[split], right[split]]), minlength=count)
    orphan = np.flatnonzero(parents != (index > 0))
    if orphan.size:
        i = int(orphan[0])
        raise _fail(where, f"node {i} is the child of {parents[i]} splits, not {int(i > 0)}")
    # Each node's depth, by pointer jumping: a round adds the depth its ancestor has covered and
    # doubles the jump, so a tree of depth d takes log2(d) rounds.
    parent = np.zeros(count, dtype=np.intp)
    parent[left[split]] = index[split]
    parent[right[split]] = index[split]
    depth = (index > 0).astype(np.int64)
    while parent.any():
        depth, parent = depth + depth[parent], parent[parent]
    if int(depth.max()) != tree.max_depth:
        raise _fail(where, f"max depth {tree.max_depth} is not its nodes' {int(depth.max())}")
    _array(values, (count, 1, n_classes), f"{where} values")


def _decision_tree(est: Any, kind: type, n_features: int, where: str) -> None:
    """A fitted DecisionTreeRegressor (``kind``) or DecisionTreeClassifier fed ``n_features`` features."""
    from sklearn.tree import DecisionTreeClassifier

    _exact(est, kind, where)
    if _attr(est, "n_features_in_", where) != n_features:
        raise _fail(where, f"takes {est.n_features_in_!r} features, not the {n_features} it is given")
    _int(_attr(est, "n_outputs_", where), f"{where}.n_outputs_", 1, 1)
    n_classes = 1
    if kind is DecisionTreeClassifier:
        classes = _names(_attr(est, "classes_", where), f"{where}.classes_")
        n_classes = _int(_attr(est, "n_classes_", where), f"{where}.n_classes_", 1)
        if n_classes != len(classes):
            raise _fail(where, f"n_classes_ {n_classes} is not its {len(classes)} classes")
    _tree_nodes(_attr(est, "tree_", where), n_features, n_classes, f"{where}.tree_")


def _ensemble_of(est: Any, cls: type, n_features: int, where: str) -> None:
    """An ensemble of exactly ``cls`` that takes the ``n_features`` it is given."""
    _exact(est, cls, where)
    if _attr(est, "n_features_in_", where) != n_features:
        raise _fail(where, f"takes {est.n_features_in_!r} features, not the {n_features} it is given")


def _forest(est: Any, n_features: int, where: str) -> None:
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.tree import DecisionTreeRegressor

    _ensemble_of(est, RandomForestRegressor, n_features, where)
    _int(_attr(est, "n_outputs_", where), f"{where}.n_outputs_", 1, 1)
    trees = _attr(est, "estimators_", where)
    if type(trees) is not list or not trees:
        raise _fail(f"{where}.estimators_", "is not a list of trees")
    if _attr(est, "n_estimators", where) != len(trees):
        raise _fail(where, f"n_estimators {est.n_estimators!r} is not its {len(trees)} trees")
    # prediction runs on min(n_jobs, trees) threads: rooftune fits with one
    if _attr(est, "n_jobs", where) is not None:
        _int(est.n_jobs, f"{where}.n_jobs", 1, os.cpu_count() or 1)
    for i, tree in enumerate(trees):
        _decision_tree(tree, DecisionTreeRegressor, n_features, f"{where}.estimators_[{i}]")


def _boosting(est: Any, n_features: int, where: str) -> None:
    from sklearn._loss.link import IdentityLink
    from sklearn._loss.loss import HuberLoss
    from sklearn.dummy import DummyRegressor
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.tree import DecisionTreeRegressor

    _ensemble_of(est, GradientBoostingRegressor, n_features, where)
    # predict_stages adds stage k's tree to column k of the first prediction, unchecked: one
    # column, one tree per stage
    _int(_attr(est, "n_trees_per_iteration_", where), f"{where}.n_trees_per_iteration_", 1, 1)
    stages = _attr(est, "estimators_", where)
    if not isinstance(stages, np.ndarray) or stages.dtype != object or stages.ndim != 2 \
            or stages.shape[0] < 1 or stages.shape[1] != 1:
        raise _fail(f"{where}.estimators_", "is not an object array of shape (stages, 1)")
    if _attr(est, "n_estimators_", where) != stages.shape[0]:
        raise _fail(where, f"n_estimators_ {est.n_estimators_!r} is not its {stages.shape[0]} stages")
    _real(_attr(est, "learning_rate", where), f"{where}.learning_rate")
    init = _attr(est, "init_", where)
    if init != "zero":
        _exact(init, DummyRegressor, f"{where}.init_")
        _int(_attr(init, "n_outputs_", f"{where}.init_"), f"{where}.init_.n_outputs_", 1, 1)
        _array(_attr(init, "constant_", f"{where}.init_"), (1, 1), f"{where}.init_.constant_")
    loss = _exact(_attr(est, "_loss", where), HuberLoss, f"{where}._loss")
    _exact(getattr(loss, "link", None), IdentityLink, f"{where}._loss.link")
    for i in range(stages.shape[0]):
        _decision_tree(stages[i, 0], DecisionTreeRegressor, n_features, f"{where}.estimators_[{i}, 0]")


def _naive_bayes(est: Any, n_features: int, where: str) -> None:
    from sklearn.naive_bayes import GaussianNB

    _exact(est, GaussianNB, where)
    if _attr(est, "n_features_in_", where) != n_features:
        raise _fail(where, f"takes {est.n_features_in_!r} features, not the {n_features} it is given")
    k = len(_names(_attr(est, "classes_", where), f"{where}.classes_"))
    if k < 1:
        raise _fail(f"{where}.classes_", "is empty")
    _array(_attr(est, "theta_", where), (k, n_features), f"{where}.theta_")
    _array(_attr(est, "var_", where), (k, n_features), f"{where}.var_", positive=True)
    prior = _array(_attr(est, "class_prior_", where), (k,), f"{where}.class_prior_")
    if (prior < 0).any():
        raise _fail(f"{where}.class_prior_", "holds a value < 0")


# ------------------------------------------------------------------------------ rooftune's models
def _mlp(net: Any, n_features: int, n_outputs: int, where: str) -> None:
    import torch

    _exact(net, MLP, where)
    trunk, heads = _attr(net, "trunk", where), _attr(net, "heads", where)
    if not isinstance(trunk, torch.nn.Sequential) or not isinstance(heads, torch.nn.Linear):
        raise _fail(where, "has no trunk and heads of linear layers")
    first = trunk[0] if len(trunk) else None
    if not isinstance(first, torch.nn.Linear) or first.in_features != n_features:
        raise _fail(where, f"takes {getattr(first, 'in_features', None)} features, not the model's {n_features}")
    if heads.out_features != n_outputs:
        raise _fail(where, f"has {heads.out_features} outputs, not {n_outputs}")
    for name, p in (*trunk.named_parameters(prefix="trunk"), *heads.named_parameters(prefix="heads")):
        if not bool(torch.isfinite(p).all()):
            raise _fail(f"{where}.{name}", "holds a value that is not finite")


def _perfmodel(m: Any, where: str) -> None:
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestRegressor

    _exact(m, PerfModel, where)
    estimator = _choice(_attr(m, "estimator", where), ESTIMATORS, f"{where}.estimator")
    target = _choice(vars(m).get("target_", "time"), TARGETS, f"{where}.target_")
    primitives = _names(_attr(m, "primitives_", where), f"{where}.primitives_")
    n = _attr(m, "n_features_in_", where)
    if not is_int(n) or n not in _FEATURE_COUNTS:
        raise _fail(f"{where}.n_features_in_", f"{n!r} is not a feature count of schema "
                    f"{', '.join(str(len(f)) for f in SCHEMA_FEATURES.values())}")
    names = vars(m).get("feature_names_in_")
    if names is not None and _names(names, f"{where}.feature_names_in_") != list(FEATURES[:n]):
        raise _fail(f"{where}.feature_names_in_", f"are not the first {n} features of this release")
    for name in ("x_mean_", "feature_min_", "feature_max_"):
        _array(_attr(m, name, where), (n,), f"{where}.{name}")
    _array(_attr(m, "x_std_", where), (n,), f"{where}.x_std_", positive=True)
    _caches(_attr(m, "caches_", where), f"{where}.caches_")
    _optional_threads(m, where)
    _conversion(m, where)
    _dict(vars(m).get("provenance_", {}), f"{where}.provenance_")
    if estimator == "mlp":
        _real(_attr(m, "y_mean_", where), f"{where}.y_mean_")
        _real(_attr(m, "y_std_", where), f"{where}.y_std_", positive=True)
        nets = _attr(m, "nets_", where)
        if type(nets) is not list or not nets:
            raise _fail(f"{where}.nets_", "is not a list of nets")
        for i, net in enumerate(nets):
            at = f"{where}.nets_[{i}]"
            roofline = vars(net).get("roofline") if type(net) is MLP else None
            if (roofline is not None) != (target == "roofline"):
                raise _fail(at, f"roofline {roofline!r} does not go with target {target}")
            if roofline is not None:
                _reals(roofline, 3, f"{at}.roofline")
                _real(roofline[2], f"{at}.roofline[2]", positive=True)
            _mlp(net, n, len(primitives) * (2 if roofline is not None else 1), at)
        return
    kind = GradientBoostingRegressor if estimator == "gbr" else RandomForestRegressor
    check = _boosting if estimator == "gbr" else _forest
    for p, est in _dict(_attr(m, "estimators_", where), f"{where}.estimators_").items():
        if p not in primitives:
            raise _fail(f"{where}.estimators_", f"has one for {p!r}, which is not among its primitives")
        _exact(est, kind, f"{where}.estimators_[{p!r}]")
        check(est, n, f"{where}.estimators_[{p!r}]")


def _classifier(m: Any, where: str) -> None:
    from sklearn.tree import DecisionTreeClassifier

    _exact(m, MethodClassifier, where)
    kind = _choice(_attr(m, "kind", where), CLASSIFIERS, f"{where}.kind")
    _names(_attr(m, "classes_", where), f"{where}.classes_")
    _optional_threads(m, where)
    precisions = ("fp32", "int8")
    for p, label in _dict(_attr(m, "constant_", where), f"{where}.constant_").items():
        _choice(p, precisions, f"{where}.constant_ key")
        _names([label], f"{where}.constant_[{p!r}]")
    for p, est in _dict(_attr(m, "models_", where), f"{where}.models_").items():
        _choice(p, precisions, f"{where}.models_ key")
        at = f"{where}.models_[{p!r}]"
        n = vars(est).get("n_features_in_") if hasattr(est, "__dict__") else None
        if not is_int(n) or n not in _FEATURE_COUNTS:
            raise _fail(f"{at}.n_features_in_", f"{n!r} is not a feature count of a schema")
        if kind == "tree":
            _decision_tree(est, DecisionTreeClassifier, n, at)
        else:
            _naive_bayes(est, n, at)


def _transfer(m: Any, where: str) -> None:
    _exact(m, TransferModel, where)
    method = _choice(_attr(m, "method", where), MODEL_METHODS, f"{where}.method")
    primitives = _names(_attr(m, "primitives_", where), f"{where}.primitives_")
    caches = _attr(m, "caches_", where)
    if caches is not None:
        _caches(caches, f"{where}.caches_")
    _optional_threads(m, where)
    _conversion(m, where)
    base = _attr(m, "base", where)
    if base is not None:
        _perfmodel(base, f"{where}.base")
    elif method != "scratch":
        raise _fail(f"{where}.base", f"is missing, which {method} needs")
    if method in ("scratch", "finetune"):
        _perfmodel(_attr(m, "model_", where), f"{where}.model_")
    elif method == "shift":
        _array(_attr(m, "shifts_", where), (len(primitives),), f"{where}.shifts_")
    elif method == "residual":
        _real(_attr(m, "shift_", where), f"{where}.shift_")
        residual = _attr(m, "residual_", where)
        if residual is not None:
            n = vars(residual).get("n_features_in_") if hasattr(residual, "__dict__") else None
            _boosting(residual, _int(n, f"{where}.residual_.n_features_in_", 1), f"{where}.residual_")


def _local(c: Any, where: str) -> None:
    _exact(c, LocalCorrection, where)
    mean = _attr(c, "mean_", where)
    k = mean.shape[0] if isinstance(mean, np.ndarray) and mean.ndim == 1 else -1
    if not 1 <= k <= len(SCHEMA_FEATURES[1]):
        raise _fail(f"{where}.mean_", f"is not 1..{len(SCHEMA_FEATURES[1])} feature means")
    _array(mean, (k,), f"{where}.mean_")
    _array(_attr(c, "scale_", where), (k,), f"{where}.scale_", positive=True)
    points = _attr(c, "points_", where)
    m = points.shape[0] if isinstance(points, np.ndarray) and points.ndim == 2 else 0
    _array(points, (m, k), f"{where}.points_")
    primitives = _names(_attr(c, "primitives_", where), f"{where}.primitives_")
    # an error is NaN where no sample timed the primitive
    _array(_attr(c, "errors_", where), (m, len(primitives)), f"{where}.errors_", finite=False)


def _ensemble(m: Any, where: str) -> None:
    _exact(m, TransferEnsemble, where)
    members = _attr(m, "members", where)
    if not isinstance(members, (list, tuple)) or not members:
        raise _fail(f"{where}.members", "is not a list of adapted models")
    for i, member in enumerate(members):
        _transfer(member, f"{where}.members[{i}]")
    weights, local = _attr(m, "weights", where), _attr(m, "local", where)
    if weights is not None:
        _array(np.asarray(weights) if isinstance(weights, (list, tuple)) else weights, (len(members),),
               f"{where}.weights")
    if local is not None:
        _local(local, f"{where}.local")


_ROOTS: dict[type, Callable[[Any, str], None]] = {
    PerfModel: _perfmodel, MethodClassifier: _classifier, TransferModel: _transfer, TransferEnsemble: _ensemble,
}

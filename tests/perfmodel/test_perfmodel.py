"""Features, regressors, classifiers, evaluation by network, transfer and persistence, on
synthetic profiled data whose ground truth is known (a roofline-like cost per primitive)."""

from __future__ import annotations

import dataclasses
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from rooftune.errors import InvalidArgument
from rooftune.perfmodel import (
    FEATURES,
    MethodClassifier,
    PerfModel,
    ProfileData,
    TransferModel,
    acl_rules,
    choose_samples,
    evaluate,
    featurize,
    framework_default,
    learning_curve,
    load_model,
    regression_metrics,
    save_model,
)
from rooftune.perfmodel.features import SCHEMA_FEATURES, torch_onednn
from rooftune.perfmodel.regressors import as_features
from rooftune.primitives.spec import ConvSpec
from rooftune.profiling import sample_specs

PRIMS = ["pytorch-default", "im2col-gemm", "gemm-1x1-nchw", "winograd-f4x4"]


def truth(spec: ConvSpec, prim: str, speed: float = 1.0) -> float:
    """A cost with structure the features can express: FLOPs at a per-primitive rate, plus a
    fixed overhead; the 1x1 GEMM only on 1x1, Winograd only on 3x3 stride 1."""
    if prim == "gemm-1x1-nchw" and (spec.R, spec.S) != (1, 1):
        return np.nan
    if prim == "winograd-f4x4" and ((spec.R, spec.S) != (3, 3) or spec.stride != (1, 1) or spec.groups != 1):
        return np.nan
    rate = {"pytorch-default": 40e9, "im2col-gemm": 25e9, "gemm-1x1-nchw": 60e9, "winograd-f4x4": 70e9}[prim]
    if spec.groups > 1:
        rate /= 20
    return speed * (spec.flops / rate + 20e-6)


def synthetic(n: int = 160, seed: int = 0, speed: float = 1.0, nets: int = 4) -> ProfileData:
    specs = sample_specs(n, seed=seed)
    times = np.asarray([[truth(s, p, speed) for p in PRIMS] for s in specs])
    sources = [[f"net{i % nets}"] if i % 5 else ["sampled"] for i in range(n)]
    return ProfileData("p" + str(seed), 2, specs, list(PRIMS), times, sources)


def test_features_follow_the_schema() -> None:
    s = ConvSpec(1, 64, 56, 56, 64, 3, 3, padding=1)
    F = featurize([s, ConvSpec(1, 32, 112, 112, 32, 3, 3, padding=1, groups=32)])
    assert F.shape == (2, len(FEATURES)) and np.all(np.isfinite(F))
    assert F[0, FEATURES.index("log_flops")] == pytest.approx(np.log2(s.flops))
    assert F[1, FEATURES.index("depthwise")] == 1 and F[0, FEATURES.index("depthwise")] == 0
    # a depthwise layer's channels fill oneDNN's blocks of 16 in all, not per group
    dw = featurize([ConvSpec(1, 24, 56, 56, 24, 3, 3, padding=1, groups=24)])[0]
    assert dw[FEATURES.index("cpg_fill16")] == pytest.approx(1 / 16)
    assert dw[FEATURES.index("c_fill16")] == pytest.approx(0.75) and dw[FEATURES.index("k_fill16")] == pytest.approx(0.75)
    assert F[0, FEATURES.index("c_fill16")] == F[0, FEATURES.index("cpg_fill16")] == 1.0
    # which path F.conv2d takes (ATen's use_mkldnn, as ONEDNN_VERBOSE showed on torch 2.15)
    col = FEATURES.index("torch_onednn")
    pw112, pw80 = ConvSpec(1, 112, 14, 14, 64, 1, 1), ConvSpec(1, 80, 14, 14, 64, 1, 1)
    assert featurize([pw112])[0, col] == 1 and featurize([pw80])[0, col] == 0  # 21952 / 15680 input elements
    assert featurize([pw112], threads=1)[0, col] == 0  # one thread: an unstrided 1x1 stays in ATen
    assert featurize([ConvSpec(1, 112, 14, 14, 64, 1, 1, stride=2)], threads=1)[0, col] == 1
    assert featurize([ConvSpec(1, 8, 8, 8, 8, 3, 3, padding=1, groups=8)], threads=1)[0, col] == 1
    assert torch_onednn(ConvSpec(1, 3, 16, 16, 8, 7, 7)) and not torch_onednn(ConvSpec(1, 3, 16, 16, 8, 3, 3))


def test_fit_and_predict_refuse_what_they_cannot_learn_from_or_read() -> None:
    data = synthetic()
    specs, times, prims = data.specs[:20], data.times[:20], data.primitives
    for make, kwargs, fragment in (
        (lambda: PerfModel("gbr"), {"Y": -np.abs(np.nan_to_num(times, nan=1e-3))}, "training data 'no time > 0'"),
        (lambda: PerfModel("gbr"), {"threads": 0}, "invalid threads 0"),
        (lambda: PerfModel("mlp", hidden=0), {}, "invalid hidden 0"),
        (lambda: PerfModel("mlp", epochs=-1), {}, "invalid epochs -1"),
        (lambda: PerfModel("gbr"), {"caches": {"L1": -1}}, "allowed a mapping of L1d, L2, L3"),
        (lambda: PerfModel("gbr"), {"X": np.zeros((20, 3))}, "an array of shape (20, 3)"),
        (lambda: PerfModel("gbr"), {"X": None}, "invalid specs None"),
    ):
        args = {"X": specs, "Y": times, "primitives": prims, **kwargs}
        with pytest.raises(InvalidArgument) as exc:
            make().fit(**args)
        assert fragment in str(exc.value)
    m = PerfModel("gbr", n_estimators=5).fit(specs, times, prims)
    assert m.predict(specs[0]).shape == (1, len(prims))  # one spec, as itself


def test_regressor_follows_sklearn_conventions_and_learns() -> None:
    data = synthetic()
    m = PerfModel("gbr", n_estimators=150)
    with pytest.raises(NotFittedError):
        m.predict(data.specs[:2])
    assert m.get_params()["estimator"] == "gbr" and not hasattr(m, "primitives_")
    assert m.fit(data.specs, data.times, data.primitives) is m
    assert m.primitives_ == PRIMS and m.n_features_in_ == len(FEATURES) and m.n_train_["gemm-1x1-nchw"] > 10
    # the features of specs predicted later are those of the platform and thread count fitted on
    one = data.subset(list(range(len(data))))
    one.threads = 1
    m1 = one.fit(PerfModel("gbr", n_estimators=5))
    assert m1.threads_ == 1 and m.threads_ is None
    pw = ConvSpec(1, 112, 14, 14, 64, 1, 1)
    assert m1.features_of([pw])[0, FEATURES.index("torch_onednn")] == 0 == 1 - m.features_of([pw])[0, FEATURES.index("torch_onednn")]
    test = synthetic(40, seed=9)
    pred = m.predict(test.specs)
    metrics = regression_metrics(pred, test.times)
    assert metrics["mape"] < 0.3 and metrics["spearman"] > 0.7 and metrics["regret_mean"] < 0.1
    with pytest.raises(InvalidArgument, match="estimator"):
        PerfModel("xgb").fit(data.specs, data.times, data.primitives)
    with pytest.raises(InvalidArgument, match="times"):
        PerfModel("gbr").fit(data.specs, data.times[:, :2], data.primitives)


def test_learning_time_per_flop_carries_efficiency_to_larger_layers() -> None:
    """Trees predict a constant per leaf: on layers larger than any it learned from, a model of
    log time predicts the largest time it saw, one of log time per FLOP the right efficiency."""
    specs = sample_specs(200, seed=3)
    small = [s for s in specs if s.groups == 1 and s.flops < 2e8][:80]
    large = [s for s in specs if s.groups == 1 and s.flops > 8e8][:20]
    assert len(small) >= 40 and len(large) >= 5
    times = np.asarray([[truth(s, "pytorch-default")] for s in small])
    true = np.asarray([[truth(s, "pytorch-default")] for s in large])
    errors = {}
    for target in ("time", "per_flop"):
        m = PerfModel("gbr", n_estimators=100, target=target).fit(small, times, ["pytorch-default"])
        assert m.target_ == target
        errors[target] = regression_metrics(m.predict(large), true)["mape"]
    assert errors["per_flop"] < 0.1 < errors["time"]
    with pytest.raises(InvalidArgument, match="target"):
        PerfModel("gbr", target="flops").fit(small, times, ["pytorch-default"])


def test_the_roofline_target_predicts_small_and_large_layers_from_their_dominant_part() -> None:
    """A cost that is a fixed part plus FLOPs over a throughput: trained on mid-sized layers, the
    roofline mlp predicts layers far smaller (fixed cost) and far larger (FLOPs) than any it saw,
    survives pickling, fine-tunes, and is refused for trees."""
    from rooftune.perfmodel.transfer import TransferModel

    def cost(s: ConvSpec) -> float:
        return 20e-6 + s.flops / 50e9

    specs = sample_specs(300, seed=4)
    mid = [s for s in specs if 1e6 < s.flops < 5e8]
    small = [s for s in specs if s.flops < 1e5][:10] + [ConvSpec(1, 8, 4, 4, 8, 1, 1)]
    large = [s for s in specs if s.flops > 2e9][:10] + [ConvSpec(1, 512, 64, 64, 512, 3, 3, padding=1)]
    assert len(mid) >= 60 and len(small) >= 2 and len(large) >= 2
    m = PerfModel("mlp", target="roofline", epochs=800).fit(mid, np.asarray([[cost(s)] for s in mid]), ["p"])
    assert m.target_ == "roofline"
    for group in (small, large):
        true = np.asarray([[cost(s)] for s in group])
        assert regression_metrics(m.predict(group), true)["mape"] < 0.25
    again = pickle.loads(pickle.dumps(m))
    assert np.allclose(again.predict(large), m.predict(large))
    # the new platform is twice as slow per FLOP: fine-tuning the heads on 30 layers learns it
    slower = np.asarray([[20e-6 + s.flops / 25e9] for s in mid[:30]])
    tuned = TransferModel(m, "finetune").fit(mid[:30], slower, ["p"])
    rest = mid[30:]
    assert regression_metrics(tuned.predict(rest), np.asarray([[20e-6 + s.flops / 25e9] for s in rest]))["mape"] < 0.25
    with pytest.raises(InvalidArgument, match="roofline"):
        PerfModel("gbr", target="roofline").fit(mid, np.asarray([[cost(s)] for s in mid]), ["p"])
    # auto, the default: the roofline for the mlp, log time for the trees
    assert PerfModel("mlp", epochs=5).fit(mid, np.asarray([[cost(s)] for s in mid]), ["p"]).target_ == "roofline"
    assert PerfModel("gbr", n_estimators=5).fit(mid, np.asarray([[cost(s)] for s in mid]), ["p"]).target_ == "time"


def test_a_model_saved_before_targets_existed_still_predicts_log_time() -> None:
    data = synthetic(60)
    m = PerfModel("gbr", n_estimators=20, target="time").fit(data.specs, data.times, data.primitives)
    state = m.__getstate__()
    del state["target"], state["target_"]
    old = PerfModel.__new__(PerfModel)
    old.__setstate__(state)
    assert old.get_params()["target"] == "time"
    assert np.allclose(old.predict(data.specs[:5]), m.predict(data.specs[:5]))


@pytest.mark.parametrize("estimator", ["rf", "mlp"])
def test_other_regressors_learn(estimator: str) -> None:
    data = synthetic()
    m = PerfModel(estimator, n_estimators=100, epochs=600).fit(data.specs, data.times, data.primitives)
    metrics = regression_metrics(m.predict(synthetic(40, seed=9).specs), synthetic(40, seed=9).times)
    assert metrics["spearman"] > 0.6 and metrics["mape"] < 0.5


def test_extrapolation_is_flagged() -> None:
    data = synthetic()
    m = PerfModel("rf", n_estimators=20).fit(data.specs, data.times, data.primitives)
    inside = data.specs[0]
    outside = ConvSpec(64, 2048, 200, 200, 2048, 3, 3, padding=1)
    assert list(m.extrapolated([inside, outside])) == [False, True]


def test_classifier_and_baselines() -> None:
    data = synthetic(200)
    idx, _ = data.best()
    labels = [PRIMS[i] for i in idx]
    clf = MethodClassifier("tree").fit(data.specs, labels)
    test = synthetic(60, seed=5)
    tidx, _ = test.best()
    acc = np.mean(clf.predict(test.specs) == np.asarray([PRIMS[i] for i in tidx], dtype=object))
    assert acc > 0.8
    assert MethodClassifier("nb").fit(data.specs, labels).predict(test.specs[:3]).shape == (3,)
    assert clf.threads_ is None and MethodClassifier("tree").fit(data.specs, labels, threads=1).threads_ == 1
    with pytest.raises(NotFittedError):
        MethodClassifier().predict(test.specs[:1])
    assert acl_rules(ConvSpec(1, 64, 56, 56, 64, 3, 3, padding=1)) == "winograd-f4x4"
    assert acl_rules(ConvSpec(1, 64, 56, 56, 64, 3, 3, padding=2, dilation=2)) == "im2col-gemm"
    assert acl_rules(ConvSpec(1, 64, 56, 56, 64, 9, 9, padding=4)) == "fft"
    assert acl_rules(ConvSpec(1, 3, 224, 224, 64, 7, 7, stride=2, padding=3)) == "im2col-gemm"
    assert acl_rules(ConvSpec(1, 64, 56, 56, 256, 1, 1)) == "gemm-1x1-nchw"
    assert framework_default(ConvSpec(1, 64, 56, 56, 256, 1, 1)) == "pytorch-default"


def test_evaluation_holds_each_network_out() -> None:
    data = synthetic(120)
    train, test = data.split_by_network(["net1"])
    assert all("net1" in s for s in test.sources) and not any("net1" in s for s in train.sources)
    assert len(train) + len(test) == len(data)
    r = evaluate(data, estimators=("rf",), make=lambda e: PerfModel(e, n_estimators=20))
    assert r["networks"] == ["net0", "net1", "net2", "net3"]
    rf = r["regressors"]["rf"]
    assert set(rf["by_network"]) == set(r["networks"]) and 0 <= rf["within_10pct"] <= 1 and rf["regret_mean"] >= 0
    assert set(r["classifiers"]) == {"tree", "nb"} and set(r["baselines"]) == {"framework-default", "acl-rules"}
    assert r["repeatability"] == {"rows": 0}  # synthetic rows carry no passes
    # the synthetic truth makes Winograd/1x1 GEMM best where they apply: the default path has regret
    assert r["baselines"]["framework-default"]["regret_mean"] > r["classifiers"]["tree"]["regret_mean"]
    assert r["baselines"]["framework-default"]["regret_mean"] > r["classifiers"]["nb"]["regret_mean"]


def test_transfer_adapts_to_a_slower_platform() -> None:
    a = synthetic(160)
    base = a.fit(PerfModel("gbr", n_estimators=100))
    b = synthetic(120, seed=3, speed=1.7)  # platform B: everything 1.7x slower
    idx = choose_samples(b.specs, 25, "cluster", seed=0)
    assert len(set(idx)) == 25 and idx == choose_samples(b.specs, 25, "cluster", seed=0)
    rest = [i for i in range(len(b)) if i not in idx]
    tr, te = b.subset(idx), b.subset(rest)
    scores = {}
    for method in ("base", "residual", "scratch"):
        m = TransferModel(None if method == "scratch" else base, method).fit(tr.specs, tr.times, tr.primitives)
        scores[method] = regression_metrics(m.predict(te.specs), te.times)["mape"]
    assert scores["residual"] < scores["base"] / 3 and scores["residual"] < scores["scratch"]
    # features on the new platform are those of its own thread count (the base's by default)
    assert base.threads_ == a.threads == 2
    assert TransferModel(base, "residual").fit(tr.specs, tr.times, tr.primitives).threads_ == 2
    one = TransferModel(base, "residual").fit(tr.specs, tr.times, tr.primitives, threads=1)
    pw = ConvSpec(1, 112, 14, 14, 64, 1, 1)
    assert one.threads_ == 1 and one.predict([pw]).shape == (1, len(base.primitives_))
    # a transferred model saved before threads_ and conversion_ existed still loads and predicts
    old = pickle.loads(pickle.dumps(one))
    old.__dict__.pop("threads_"), old.__dict__.pop("conversion_")
    again = pickle.loads(pickle.dumps(old))
    assert again.threads_ is None and again.conversion_ is None and again.predict([pw]).shape == (1, len(base.primitives_))
    with pytest.raises(InvalidArgument, match="sampler"):
        choose_samples(b.specs, 5, "greedy")


def test_the_cluster_sampler_stands_for_every_spec_and_always_gives_k() -> None:
    """The k specs nearest k-means centres leave every spec closer to a chosen one (mean squared
    distance in the sampler's feature space) than any of twenty random draws; specs alike in
    every feature still give k distinct samples."""
    specs = sample_specs(200, seed=3)
    F = featurize(specs)[:, :len(SCHEMA_FEATURES[1])]
    F = (F - F.mean(axis=0)) / (F.std(axis=0) + 1e-9)

    def spread(idx: list[int]) -> float:
        return float((np.linalg.norm(F[:, None, :] - F[idx][None], axis=2).min(axis=1) ** 2).mean())

    rng = np.random.default_rng(0)
    for k in (10, 25):
        idx = choose_samples(specs, k, "cluster", seed=0)
        assert len(set(idx)) == k and idx == choose_samples(specs, k, "cluster", seed=0)
        assert spread(idx) < min(spread(rng.choice(len(specs), k, replace=False).tolist()) for _ in range(20))
    same = [ConvSpec(1, 64, 28, 28, 64, 3, 3, padding=1)] * 20 + specs[:3]
    idx = choose_samples(same, 8, "cluster", seed=1)
    assert len(set(idx)) == 8 and all(0 <= i < len(same) for i in idx)
    assert choose_samples(same, 50, "cluster") == list(range(len(same)))


def test_each_sample_weighs_as_many_specs_as_it_stands_for() -> None:
    from rooftune.perfmodel import sample_weights
    from rooftune.perfmodel.transfer import median_shifts, stack_weights

    crowd, lone = ConvSpec(1, 64, 28, 28, 64, 3, 3, padding=1), [ConvSpec(1, 512, 7, 7, 2048, 1, 1), ConvSpec(1, 3, 224, 224, 64, 7, 7)]
    w = sample_weights([crowd] * 10 + lone, [0, 10, 11])
    assert w.tolist() == pytest.approx([2.5, 0.25, 0.25]) and w.mean() == pytest.approx(1.0)
    # a weighed median follows the heavy rows; even weights give the plain median, NaNs left out
    err = np.array([[0.0, np.nan], [1.0, 2.0], [10.0, 4.0], [np.nan, 6.0]])
    assert median_shifts(err) == pytest.approx([1.0, 4.0]) == median_shifts(err, np.ones(4))
    assert median_shifts(err, np.array([1.0, 1.0, 5.0, 1.0])) == pytest.approx([10.0, 4.0])
    assert median_shifts(np.array([[0.0], [1.0], [2.0], [3.0]]), np.ones(4)) == [1.5]
    # in a fit: a shift, and the ensemble's stacking, with even weights are those without weights;
    # weighing the samples of one half of the specs moves the shift toward that half's error
    a = synthetic(60).fit(PerfModel("mlp", epochs=50))
    b = synthetic(40, seed=3, speed=1.7)
    b.times[:20] *= 1.5  # the first half 1.5x slower again
    plain = TransferModel(a, "shift").fit(b.specs, b.times, b.primitives)
    even = TransferModel(a, "shift").fit(b.specs, b.times, b.primitives, weights=np.ones(40))
    heavy = TransferModel(a, "shift").fit(b.specs, b.times, b.primitives, weights=np.r_[np.full(20, 9.0), np.ones(20)])
    assert np.allclose(plain.shifts_, even.shifts_) and np.all(heavy.shifts_ > plain.shifts_)
    c = synthetic(60, seed=5, speed=0.6).fit(PerfModel("mlp", epochs=50))
    stacked = [stack_weights([a, c], b.specs, b.times, b.primitives, kinds=("shift",), weights=w)
               for w in (None, np.ones(40), np.r_[np.full(20, 9.0), np.ones(20)])]
    assert stacked[0] == pytest.approx(stacked[1]) and len(stacked[2]) == 2 and sum(stacked[2]) == pytest.approx(1.0)


def test_finetune_and_learning_curve(tmp_path: Path) -> None:
    from rooftune.perfmodel.transfer import plot_learning_curve

    a = synthetic(120)
    base = a.fit(PerfModel("mlp", epochs=400))
    b = synthetic(80, seed=3, speed=1.7)
    curve = learning_curve(base, b, ks=(10, 25), methods=("base", "finetune", "residual"))
    assert set(curve["curve"]) == {"base", "finetune", "residual"} and set(curve["curve"]["finetune"]) == {10, 25}
    assert curve["curve"]["finetune"][25]["mape"] < curve["curve"]["base"][25]["mape"]
    png = plot_learning_curve(curve, str(tmp_path / "curve.png"))
    assert Path(png).stat().st_size > 1000
    # without the passes' spreads: nothing said of the target's repeatability, no steady share
    assert curve["repeatability"] == {"rows": 0} and "within_10pct_steady" not in curve["curve"]["base"][25]
    # with them: half the rows repeat within 10 %, and each point scores those rows apart
    spread = np.where(np.arange(b.times.size).reshape(b.times.shape) % 2 == 0, 1.02, 1.4)
    noisy = dataclasses.replace(b, spread=np.where(np.isnan(b.times), np.nan, spread))
    again = learning_curve(base, noisy, ks=(10,), methods=("base",))
    rep, point = again["repeatability"], again["curve"]["base"][10]
    assert rep["rows"] == int((~np.isnan(b.times)).sum()) and 0.3 < rep["within_10pct"] < 0.7
    test_rows = ~np.isnan(b.times[[i for i in range(len(b)) if i not in set(choose_samples(b.specs, 10))]])
    assert 0 < point["steady_pairs"] < test_rows.sum() and 0.0 <= point["within_10pct_steady"] <= 1.0
    with pytest.raises(InvalidArgument, match="mlp"):
        TransferModel(a.fit(PerfModel("rf", n_estimators=10)), "finetune").fit(b.specs[:5], b.times[:5], PRIMS)


def test_an_ensemble_of_bases_averages_their_fine_tuned_log_times(tmp_path: Path) -> None:
    """Every base fine-tuned on the same samples, their log times averaged; a primitive that only
    one base knows takes that base's prediction; it saves, loads and drives a learning curve."""
    from rooftune.perfmodel import TransferEnsemble, fit_transfer

    a = synthetic(120).fit(PerfModel("mlp", epochs=300, n_nets=1))
    c = synthetic(120, seed=5, speed=0.6)  # the second base never saw winograd-f4x4
    c = ProfileData(c.platform_id, 2, c.specs, PRIMS[:3], c.times[:, :3], c.sources,
                    fingerprint={"caches": [{"name": "L2", "size_bytes": 2 << 20}, {"name": "L3", "size_bytes": 256 << 20}]})
    c_model = c.fit(PerfModel("mlp", epochs=300, n_nets=1))
    assert c_model.caches_ != a.caches_  # each member computes the features of its own machine's caches
    b = synthetic(80, seed=3, speed=1.7)
    tr, te = b.subset(list(range(25))), b.subset(list(range(25, 80)))
    ens = fit_transfer([a, c_model], "ensemble", tr.specs, tr.times, tr.primitives, threads=tr.threads)
    # each base fine-tuned, then each base shifted by its median error (nothing retrained)
    assert isinstance(ens, TransferEnsemble) and len(ens.members) == 4 and ens.method == "ensemble"
    assert [m.method for m in ens.members] == ["finetune", "finetune", "shift", "shift"]
    assert [m.base for m in ens.members] == [a, c_model, a, c_model]
    assert ens.primitives_ == PRIMS and ens.members[1].base.primitives_ == PRIMS[:3]
    one = [m.predict_log(te.specs) for m in ens.members]
    assert np.isnan(one[1][:, 3]).all() and np.isnan(one[3][:, 3]).all() and not np.isnan(one[0][:, 3]).any()
    error = np.log(tr.times) - a.predict_log(tr.specs)  # the shift: each primitive's median log error
    shift, seen = np.asarray([np.nanmedian(c) if np.any(~np.isnan(c)) else np.nan for c in error.T]), ~np.isnan(error).all(axis=0)
    assert seen.sum() >= 3 and np.allclose((one[2] - a.predict_log(te.specs))[:, seen], shift[seen])
    w = np.asarray(ens.weights)  # stacked on the samples' out-of-fold predictions
    assert w.shape == (4,) and np.all(w >= 0) and w.sum() == pytest.approx(1.0)
    # the weighted mean, then its own errors on the samples carried to the specs near them
    local = ens.local(as_features(te.specs, a.caches_, tr.threads), ens.primitives_)
    got = ens.predict_log(te.specs) - local
    assert np.allclose(got[:, :3], sum(w[i] * one[i][:, :3] for i in range(4)))
    # only the members of the first base know winograd: their weights, or their plain mean if both are 0
    w03 = w[[0, 2]] if w[[0, 2]].sum() > 0 else np.ones(2)
    assert np.allclose(got[:, 3], (w03[0] * one[0][:, 3] + w03[1] * one[2][:, 3]) / w03.sum())
    equal = TransferEnsemble(ens.members[:2])  # no weights, no correction (saved before them): the plain mean
    with pytest.raises(InvalidArgument, match="one per member"):
        TransferEnsemble(ens.members, list(w[:2]))
    assert np.allclose(equal.predict_log(te.specs)[:, :3], (one[0][:, :3] + one[1][:, :3]) / 2)
    assert ens.provenance_["weights"] == pytest.approx(list(w))
    assert ens.provenance_["local_correction"]["samples"] == 25
    single = fit_transfer([a], "finetune", tr.specs, tr.times, tr.primitives, threads=tr.threads)
    assert isinstance(single, TransferModel) and np.allclose(single.predict_log(te.specs), one[0])
    assert ens.provenance_["method"] == "ensemble" and len(ens.provenance_["bases"]) == 4
    assert [b["adapted"] for b in ens.provenance_["bases"]] == ["finetune", "finetune", "shift", "shift"]
    assert ens.predict_conversion(te.specs[:3]).shape == (3,) and ens.extrapolated(te.specs[:3]).shape == (3,)
    back = load_model(save_model(ens, tmp_path / "ens.rtmodel"))
    assert np.allclose(back.predict(te.specs[:4]), ens.predict(te.specs[:4]))
    curve = learning_curve(a, b, ks=(25,), methods=("finetune", "ensemble", "base"), others=[c_model])
    assert set(curve["curve"]) == {"finetune", "ensemble", "base"}
    assert curve["curve"]["ensemble"][25]["mape"] < curve["curve"]["base"][25]["mape"]
    # without further bases there is no ensemble to draw
    assert "ensemble" not in learning_curve(a, b, ks=(10,), methods=("finetune", "ensemble"))["curve"]
    with pytest.raises(InvalidArgument, match="fit_transfer"):
        TransferModel(a, "ensemble").fit(tr.specs, tr.times, tr.primitives)
    with pytest.raises(InvalidArgument, match="mlp"):
        fit_transfer([a, synthetic(60).fit(PerfModel("rf", n_estimators=5))], "ensemble", tr.specs, tr.times, PRIMS)


def test_the_local_correction_carries_the_samples_errors_to_the_specs_near_them() -> None:
    """A spec at a sample takes (nearly all of) that sample's error, shrunk by how many of its
    nearest samples timed the primitive; a primitive no near sample timed, or one the samples do
    not know, is not corrected."""
    from rooftune.perfmodel.transfer import LOCAL_NEIGHBOURS, LOCAL_SHRINK, LocalCorrection

    specs = sample_specs(30, seed=2)
    F = featurize(specs)
    errors = np.zeros((30, 2))
    errors[:, 0] = 0.2  # every sample 20 % slow (in log) on the first primitive
    errors[7, 1], errors[:7, 1], errors[8:, 1] = -0.3, np.nan, np.nan  # one sample timed the second
    local = LocalCorrection(F, errors, ["a", "b"])
    got = local(F, ["a", "b", "c"])
    shrink = LOCAL_NEIGHBOURS / (LOCAL_NEIGHBOURS + LOCAL_SHRINK)
    assert np.allclose(got[:, 0], 0.2 * shrink) and np.all(got[:, 2] == 0)
    assert got[7, 1] == pytest.approx(-0.3 / (1 + LOCAL_SHRINK))  # only itself, of its neighbours, timed b
    # the specs corrected on b are exactly those with sample 7 among their nearest
    assert set(np.flatnonzero(got[:, 1])) == {i for i in range(30)
                                              if 7 in np.argsort(np.linalg.norm(local.points_ - local.points_[i],
                                                                                axis=1))[:LOCAL_NEIGHBOURS]}
    assert local(F[:0], ["a"]).shape == (0, 1)


def test_the_ensemble_weighs_a_base_near_the_new_platform_above_a_far_one() -> None:
    """Stacked weights: a base whose times have the target's shape carries the ensemble; one that
    learned a noisy machine's times is weighed down; with one member or too few samples, none."""
    from rooftune.perfmodel.transfer import stack_weights

    near = synthetic(120).fit(PerfModel("mlp", epochs=300, n_nets=2))
    noisy = synthetic(120, seed=5)
    noisy.times = noisy.times * np.exp(np.random.default_rng(1).normal(0, 0.5, noisy.times.shape))
    far = noisy.fit(PerfModel("mlp", epochs=300, n_nets=2))
    b = synthetic(60, seed=3, speed=1.7)
    w = stack_weights([far, near], b.specs, b.times, b.primitives, threads=b.threads)
    # members: far and near fine-tuned, then far and near shifted
    assert w is not None and len(w) == 4 and w[1] + w[3] > 0.6 > w[0] + w[2]
    lone = stack_weights([near], b.specs, b.times, b.primitives, threads=b.threads)
    assert lone is not None and len(lone) == 2 and sum(lone) == pytest.approx(1.0)  # its two adaptations
    assert stack_weights([near], b.specs, b.times, b.primitives, kinds=("finetune",)) is None
    assert stack_weights([far, near], b.specs[:4], b.times[:4], b.primitives) is None


def test_platform_id_does_not_depend_on_scikit_learn_being_imported() -> None:
    import subprocess
    import sys

    code = "from rooftune.platform import current_platform as c; {} print(c().id)"
    plain = subprocess.run([sys.executable, "-c", code.format("")], capture_output=True, text=True, check=True)
    with_sk = subprocess.run([sys.executable, "-c", code.format("import sklearn.ensemble;")],
                             capture_output=True, text=True, check=True)
    swapped = subprocess.run([sys.executable, "-c", "import sklearn.ensemble; " + code.format("")],
                             capture_output=True, text=True, check=True)
    assert plain.stdout == with_sk.stdout == swapped.stdout


def test_transfer_profiles_the_chosen_samples_and_saves_where_select_looks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rooftune.perfmodel as pm
    import rooftune.profiling as profiling
    from rooftune.platform import current_platform

    base = synthetic(120).fit(PerfModel("gbr", n_estimators=50))
    profiled: list[ConvSpec] = []

    def fake_campaign(specs, *, store, threads, progress=None, **kw):  # synthetic times, 1.5x slower platform
        rows = []
        for spec, sources in specs:
            profiled.append(spec)
            for p in PRIMS:
                t = truth(spec, p, 1.5)
                rows.append({"spec_key": spec.key(), "spec": spec.to_dict(), "primitive": p, "threads": threads[0],
                             "status": "ok" if t == t else "unsupported", "median_s": t if t == t else None,
                             "iqr_s": 0.0, "repetitions": 1, "reason": "", "warnings": [], "sources": list(sources)})
        store.save_profiles(current_platform(), rows)
        return profiling.CampaignResult(current_platform().id, added=len(rows))

    monkeypatch.setattr(profiling, "run_campaign", fake_campaign)
    monkeypatch.setattr("rooftune.perfmodel.adapt.transferred_model_path", lambda pid: tmp_path / f"perfmodel-{pid}.rtmodel")
    model, info = pm.transfer(base, samples=12, models=["resnet18"], pool=30, db=str(tmp_path / "t.db"))
    assert len(profiled) == 12 == info["samples"] and Path(info["saved"]).is_file()
    loaded, source = pm.default_model()
    assert source == info["saved"] and isinstance(loaded, TransferModel)
    # a tree base is adapted by boosting on its error; an mlp base (the shipped kind) is fine-tuned
    assert loaded.provenance_["transfer"]["specs"] == 12 and loaded.provenance_["method"] == "residual"
    assert pm.default_method(base) == "residual" and pm.default_method(PerfModel("mlp")) == "finetune"
    assert pm.default_method([PerfModel("mlp"), PerfModel("mlp")]) == "ensemble"
    assert pm.default_method([PerfModel("mlp")]) == "finetune" and pm.default_method([base, PerfModel("mlp")]) == "residual"
    with pytest.raises(InvalidArgument, match="samples"):
        pm.transfer(base, samples=2, db=str(tmp_path / "t.db"))
    # several mlp bases (the shipped ones, nearest first): each fine-tuned on the same samples, averaged
    mlps = [synthetic(120).fit(PerfModel("mlp", epochs=100, n_nets=1)),
            synthetic(120, seed=5, speed=0.6).fit(PerfModel("mlp", epochs=100, n_nets=1))]
    ens, info = pm.transfer(mlps, samples=12, models=["resnet18"], pool=30, db=str(tmp_path / "t.db"))
    assert info["method"] == "ensemble" and isinstance(pm.default_model()[0], pm.TransferEnsemble)
    assert profiled[12:] == profiled[:12]  # the same sampler and seed choose the same specs
    assert info["base"].count(";") == 1
    first, _ = pm.transfer(mlps, samples=12, method="finetune", models=["resnet18"], pool=30, db=str(tmp_path / "t.db"))
    assert isinstance(first, TransferModel) and first.base is mlps[0]
    # an adapted model is not a base, and a tree is not fine-tuned: refused before anything is profiled
    before = len(profiled)
    for bad, method, why in ((ens, None, "adapted model"), (first, "residual", "adapted model"),
                             (base, "finetune", "fine-tunes an mlp"), ([base, mlps[0]], "ensemble", "fine-tunes an mlp")):
        with pytest.raises(InvalidArgument, match=why):
            pm.transfer(bad, samples=12, method=method, models=["resnet18"], pool=30, db=str(tmp_path / "t.db"))
    assert len(profiled) == before
    pm.check_base(mlps[0], "ensemble")  # a trained mlp is a base for every method


def test_transfer_refuses_an_adapted_model_as_its_base_before_profiling(tmp_path: Path) -> None:
    from tests.test_cli import assert_one_line_error, rooftune_in_process

    b = synthetic(40, seed=3, speed=1.7)
    adapted = TransferModel(None, "scratch").fit(b.specs, b.times, b.primitives, threads=b.threads)
    path = save_model(adapted, tmp_path / "adapted.rtmodel")
    for extra in ([], ["--eval"]):
        proc = rooftune_in_process("transfer", "--base", str(path), *extra, db=tmp_path / "t.db")
        assert_one_line_error(proc, "--base 'an adapted model", "rooftune train --save")
    assert not (tmp_path / "t.db").exists()  # nothing profiled, no store made


def test_transfer_eval_says_how_far_the_target_data_repeats(tmp_path: Path) -> None:
    """`rooftune transfer --eval` on a store whose rows disagree with themselves: the curve, the
    target's repeatability, the steady rows' share per method, and a warning that the curve
    measures the noise."""
    from rooftune.platform import current_platform
    from rooftune.store import Store
    from tests.test_cli import rooftune_in_process

    base = save_model(synthetic(80).fit(PerfModel("mlp", epochs=60, n_nets=1, hidden=16)), tmp_path / "base.rtmodel")
    b = synthetic(40, seed=3, speed=1.7)
    rows = []
    for i, s in enumerate(b.specs):
        for j, p in enumerate(b.primitives):
            t = b.times[i, j]
            if np.isnan(t):
                continue
            slower = 1.02 if (i + j) % 3 else 1.5  # a third of the rows disagree with themselves
            rows.append({"spec_key": s.key(), "spec": s.to_dict(), "primitive": p, "threads": 2, "status": "ok",
                         "median_s": t, "iqr_s": 0.0, "repetitions": 10, "reason": "", "warnings": [],
                         "sources": b.sources[i], "pass_medians": [t * slower, t]})
    with Store(tmp_path / "t.db") as st:
        st.save_profiles(current_platform(), rows)
    proc = rooftune_in_process("transfer", "--eval", "--base", str(base), db=tmp_path / "t.db")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert f"of {len(rows)} had a second pass within 10 % of their stored time" in text
    assert "within +-10 % on the steady test rows only" in text and "warning" not in proc.stderr
    for i, r in enumerate(rows):
        r["pass_medians"] = [r["median_s"] * (1.02 if i % 3 == 0 else 1.5), r["median_s"]]
    with Store(tmp_path / "n.db") as st:
        st.save_profiles(current_platform(), rows)
    proc = rooftune_in_process("transfer", "--eval", "--base", str(base), "--json", db=tmp_path / "n.db")
    assert proc.returncode == 0, proc.stderr
    import json

    r = json.loads(proc.stdout)
    assert r["repeatability"]["within_10pct"] == pytest.approx(sum(1 for i in range(len(rows)) if i % 3 == 0) / len(rows))
    assert all("within_10pct_steady" in v for c in r["curve"].values() for v in c.values())
    proc = rooftune_in_process("transfer", "--eval", "--base", str(base), db=tmp_path / "n.db")
    assert "warning: only " in proc.stderr and "measures their noise more than the transfer" in proc.stderr


def test_the_shipped_base_model_loads_with_its_provenance() -> None:
    from rooftune.perfmodel import BASE_MODELS, base_model_paths, load_model, read_header

    paths = base_model_paths()
    assert [p.name for p in paths] == list(BASE_MODELS)  # every shipped model is installed
    spec = ConvSpec(1, 64, 56, 56, 64, 3, 3, padding=1)
    for path in paths:
        header = read_header(path)
        assert header["versioned_libraries"] == []  # loads under any torch and scikit-learn
        m = load_model(path)
        prov = m.provenance_
        assert prov["specs"] >= 300 and len(prov["networks"]) >= 10 and prov["platforms"] and prov["cpu_model"]
        assert header["provenance"] == prov
        # an older schema's features are the first columns of today's: such a model reads those
        n = len(SCHEMA_FEATURES[header["feature_schema"]])
        assert m.n_features_in_ == n <= len(FEATURES)
        assert m.features_of([ConvSpec(1, 8, 8, 8, 8, 1, 1)]).shape == (1, n)
        pred = m.predict([spec])[0]
        j = m.primitives_.index("pytorch-default")
        assert 1e-6 < pred[j] < 1.0 and not m.extrapolated([spec])[0]
    assert read_header(paths[0])["feature_schema"] == 1  # the Zen 5 model predates schema 2


def test_the_base_model_nearest_the_machine_is_chosen() -> None:
    """Of the shipped base models, a machine gets the one profiled on its vendor and vector ISA."""
    from types import SimpleNamespace

    from rooftune.perfmodel import base_closeness, base_model_path, load_base_model, read_header

    def machine(vendor: str, uarch: str | None, isa: tuple[str, ...]) -> SimpleNamespace:
        return SimpleNamespace(vendor=vendor, microarchitecture=uarch, effective_isa=isa, usable_cores=2)

    zen5 = machine("AuthenticAMD", "Zen 5", ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni"))
    xeon = machine("GenuineIntel", None, ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx"))
    skylake = machine("GenuineIntel", "Skylake", ("avx", "avx2", "fma", "avx512f"))
    arm = machine("ARM", "Neoverse V2", ("neon", "sve"))
    zen4 = machine("AuthenticAMD", "Zen 4", ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni"))
    assert base_model_path(zen5).name == "base_model.rtmodel"
    assert base_model_path(zen4).name == "base_model_zen4.rtmodel"
    assert base_model_path(xeon).name == base_model_path(skylake).name == "base_model_xeon.rtmodel"
    # an ARM machine: the Xeon model differs from it in every vector extension, the Zen 5 model's
    # extensions were not recorded (counted as neither like nor unlike)
    assert base_model_path(arm).name == "base_model.rtmodel"
    xeon_model = load_base_model(xeon)
    assert xeon_model.provenance_["vendor"] == "GenuineIntel"
    # the Zen 5 model, saved before vendor and ISA were recorded: its vendor is read from the CPU's name
    zen_prov = read_header(base_model_path(zen5))["provenance"]
    assert "vendor" not in zen_prov and base_closeness(zen_prov, zen5)[:3] == (1, 1, 0)
    assert base_closeness(zen_prov, xeon)[0] == 0
    # among one vendor's machines the vector extensions decide; a stored fingerprint works as well
    avx2 = {"vendor": "GenuineIntel", "isa": ["avx2", "fma"], "usable_cores": 2}
    avx512 = {"vendor": "GenuineIntel", "isa": ["avx2", "fma", "avx512f", "avx512_vnni"], "usable_cores": 2}
    assert base_closeness(avx512, skylake) > base_closeness(avx2, skylake)
    assert base_closeness(avx2, {"vendor": "GenuineIntel", "effective_isa": ["avx2", "fma"], "usable_cores": 4}) == (1, 0, 2, 0)
    assert base_closeness(avx2, SimpleNamespace()) == (0, 0, 0, 0)  # a platform that says nothing
    # a transfer measured on a platform starts from a base that has not seen its data
    seen = xeon_model.provenance_["platforms"][0]
    # (the Zen 4 model shares the Xeon's AVX-512 extensions; the Zen 5 model's were not recorded)
    assert base_model_path(xeon, exclude_platform=seen).name == "base_model_zen4.rtmodel"
    assert base_model_path(xeon, exclude_platform="another").name == "base_model_xeon.rtmodel"
    # the bases of an ensemble: every shipped one not trained on the platform, nearest first
    from rooftune.perfmodel import load_base_models

    zen4_prov = read_header(base_model_path(zen4))["provenance"]
    assert [m.provenance_["platforms"] for m in load_base_models(xeon)] == \
        [xeon_model.provenance_["platforms"], zen4_prov["platforms"], zen_prov["platforms"]]
    assert [m.provenance_["platforms"] for m in load_base_models(zen5)][0] == zen_prov["platforms"]
    assert [m.provenance_["platforms"] for m in load_base_models(xeon, exclude_platform=seen)] == \
        [zen4_prov["platforms"], zen_prov["platforms"]]


def test_the_data_is_measured_against_itself() -> None:
    """rows_to_data keeps each row's second-fastest pass over its fastest; evaluation reports how
    many rows agree with themselves within 5 and 10 %, through every split."""
    from rooftune.perfmodel import rows_to_data

    spec = ConvSpec(1, 16, 14, 14, 16, 3, 3, padding=1).to_dict()
    other = ConvSpec(1, 32, 7, 7, 32, 1, 1).to_dict()

    def row(spec_d: dict, key: str, prim: str, passes: list[float] | None, status: str = "ok") -> dict:
        return {"threads": 2, "spec": spec_d, "spec_key": key, "primitive": prim, "status": status,
                "median_s": min(passes) if passes else None, "sources": ["netA" if key == "a" else "netB"],
                "pass_medians": passes}

    rows = [row(spec, "a", "p1", [1.0, 1.04, 1.5]), row(spec, "a", "p2", [2.0, 2.3]),
            row(other, "b", "p1", [1.0]), row(other, "b", "p2", [3.0, 3.1, 3.2]),
            row(other, "b", "p3", None, status="unsupported")]
    data = rows_to_data(rows, "plat", 2)
    assert data.spread is not None and data.spread.shape == data.times.shape
    assert data.spread[0, :2].tolist() == pytest.approx([1.04, 1.15]) and math.isnan(data.spread[0, 2])
    assert math.isnan(data.spread[1, 0]) and data.spread[1, 1] == pytest.approx(3.1 / 3.0)
    rep = data.repeatability()
    assert rep["rows"] == 3  # the row with one pass and the unsupported one say nothing
    assert rep["within_5pct"] == pytest.approx(2 / 3) and rep["within_10pct"] == pytest.approx(2 / 3)
    # a subset carries its rows' spread
    assert data.subset([1]).repeatability()["rows"] == 1
    assert ProfileData("p", 2, [], [], np.zeros((0, 0)), []).repeatability() == {"rows": 0}


def test_the_fastest_primitive_is_looked_at_twice() -> None:
    """repeatability() says on how many specs the primitives' second-fastest passes name the same
    fastest primitive as the stored times: a spec needs two primitives with two passes each."""
    nan = math.nan
    times = np.array([[1.0, 2.0, nan], [1.0, 1.1, 5.0], [1.0, 3.0, 9.0]])
    spread = np.array([[1.04, 1.15, nan],   # p1 still fastest at its second pass
                       [1.30, 1.02, 1.0],   # p1 1.30 against p2 1.12: a second look names p2
                       [1.10, nan, nan]])   # one primitive with two passes: says nothing
    data = ProfileData("p", 2, [ConvSpec(1, 8, 8, 8, 8, 3, 3)] * 3, ["p1", "p2", "p3"], times, [["n"]] * 3,
                       spread=spread)
    rep = data.repeatability()
    assert rep["fastest_specs"] == 2 and rep["same_fastest"] == pytest.approx(0.5)
    assert "fastest_specs" not in data.subset([2]).repeatability()


def test_train_eval_prints_the_second_look(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    from rooftune.cli import perfmodel as cli

    buf = io.StringIO()
    monkeypatch.setattr(cli, "out", Console(file=buf, width=200))
    rep = {"rows": 4, "within_5pct": 0.5, "within_10pct": 0.75, "fastest_specs": 2, "same_fastest": 0.5}
    cli._print_eval({"platform_id": "p", "threads": 2, "specs": 3, "networks": ["n"], "regressors": {},
                     "classifiers": {}, "baselines": {}, "repeatability": rep})
    text = " ".join(buf.getvalue().split())
    assert "75.0 % of 4 had a second pass" in text
    assert "the same fastest primitive on 50.0 % of 2 specs" in text


def test_each_primitive_is_scored_with_the_way_it_misses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Per primitive: its pairs, share within +-10 %, MAPE and bias (median predicted/measured),
    pooled over the held-out networks and printed by `train --eval`."""
    import io

    from rich.console import Console

    from rooftune.cli import perfmodel as cli
    from rooftune.perfmodel.evaluate import by_primitive, by_primitive_line

    true = np.array([[1.0, 2.0, np.nan], [1.0, 4.0, 1.0], [2.0, 1.0, np.nan]])
    pred = np.array([[1.05, 1.0, 1.0], [0.5, 2.0, np.nan], [2.1, 0.5, 7.0]])  # "b" predicted twice too fast
    got = by_primitive(pred, true, ["a", "b", "c"])
    assert set(got) == {"a", "b"}  # "c" has no pair both measured and predicted
    assert got["a"] == {"pairs": 3, "within_10pct": pytest.approx(2 / 3), "mape": pytest.approx(0.2),
                        "bias": pytest.approx(1.05)}
    assert got["b"]["within_10pct"] == 0.0 and got["b"]["bias"] == pytest.approx(0.5)
    assert by_primitive_line(got).endswith("a 67% x1.05, b 0% x0.50")
    data = synthetic(120)
    rf = evaluate(data, estimators=("rf",), classifiers=(), make=lambda e: PerfModel(e, n_estimators=20))["regressors"]["rf"]
    assert sum(b["pairs"] for b in rf["by_primitive"].values()) == rf["pairs"]
    assert set(rf["by_primitive"]) <= set(data.primitives)
    buf = io.StringIO()
    monkeypatch.setattr(cli, "out", Console(file=buf, width=200))
    cli._print_by_primitive({"rf": {"by_primitive": got}, "gbr": {"by_primitive": {"a": got["a"]}}})
    text = " ".join(buf.getvalue().replace("│", " ").split())
    assert "b 3 0.0 % x0.50 -" in text and "a 3 66.7 % x1.05 66.7 % x1.05" in text


def test_the_model_is_also_scored_on_the_steady_rows_only() -> None:
    from rooftune.perfmodel.evaluate import steady_share

    true = np.array([[1.0, 1.0, 1.0, 1.0, np.nan]])
    pred = np.array([[1.05, 1.2, 0.92, 3.0, 1.0]])
    spread = np.array([[1.0, 1.05, 1.10, 1.5, 1.0]])  # the fourth row disagrees with itself by 50 %
    assert steady_share(pred, true, spread) == {"steady_pairs": 3, "within_10pct_steady": pytest.approx(2 / 3)}
    assert steady_share(pred, true, np.full(true.shape, np.nan)) == {}
    # through evaluate(): every row steady, so the steady share is the share
    data = synthetic(120)
    data.spread = np.where(np.isnan(data.times), np.nan, 1.0)
    rf = evaluate(data, estimators=("rf",), classifiers=(), make=lambda e: PerfModel(e, n_estimators=20))["regressors"]["rf"]
    assert rf["steady_pairs"] == rf["pairs"] and rf["within_10pct_steady"] == pytest.approx(rf["within_10pct"])


def test_evaluation_reports_the_repeatability_of_the_rows_it_scores() -> None:
    # The held-out rows repeat perfectly, the sampled specs (never held out) poorly: the figure
    # printed beside the regressors' is the held-out rows'.
    data = synthetic(120)
    sampled = np.array(["sampled" in s for s in data.sources])
    data.spread = np.where(np.isnan(data.times), np.nan, np.where(sampled[:, None], 1.5, 1.0))
    assert sampled.any() and data.repeatability()["within_10pct"] < 1.0
    r = evaluate(data, estimators=("rf",), classifiers=(), make=lambda e: PerfModel(e, n_estimators=20))
    assert r["repeatability"]["within_10pct"] == 1.0
    assert r["repeatability"]["rows"] == r["regressors"]["rf"]["pairs"]


def test_naive_bayes_lets_a_feature_constant_within_a_class_differ_a_little() -> None:
    """Every Winograd win in training has K = 64: a 3x3 layer with K = 72 or 60 is still
    Winograd's, not vetoed by a zero variance (scikit-learn's default smoothing would)."""
    from rooftune.perfmodel.classifiers import MethodClassifier

    rng = np.random.default_rng(0)
    specs, labels = [], []
    for _ in range(40):
        c, h = int(rng.choice([32, 64, 128, 256])), int(rng.choice([14, 28, 56]))
        specs.append(ConvSpec(1, c, h, h, 64, 3, 3, padding=1))
        labels.append("winograd-f4x4")
        r, k = int(rng.choice([1, 3, 5])), int(rng.choice([16, 32, 128, 256, 512]))
        specs.append(ConvSpec(1, c, h, h, k, r, r, padding=r // 2))
        labels.append("im2col-gemm")
    test = [ConvSpec(1, 64, 28, 28, 72, 3, 3, padding=1), ConvSpec(1, 128, 56, 56, 60, 3, 3, padding=1)]
    assert list(MethodClassifier("nb").fit(specs, labels).predict(test)) == ["winograd-f4x4"] * 2


def test_the_mlp_averages_an_ensemble_of_nets_and_loads_a_single_net_model() -> None:
    data = synthetic(60)
    m = PerfModel("mlp", epochs=50, n_nets=3).fit(data.specs, data.times, data.primitives)
    assert len(m.nets_) == 3 and m.get_params()["n_nets"] == 3
    x, lf = m.net_input(m.features_of(data.specs[:5])), m._log_flops(m.features_of(data.specs[:5]))
    each = [net.predict(x, lf=lf) * m.y_std_ + m.y_mean_ for net in m.nets_]
    assert not np.allclose(each[0], each[1])  # different initial weights
    assert np.allclose(m.predict_log(data.specs[:5]), np.mean(each, axis=0))
    # a model saved with one net (before the ensemble) loads and predicts as it did
    state = m.__getstate__()
    state["net_"] = state.pop("nets_")[0]
    del state["n_nets"]
    old = PerfModel.__new__(PerfModel)
    old.__setstate__(state)
    assert old.n_nets == 1 and len(old.nets_) == 1
    assert np.allclose(old.predict_log(data.specs[:5]), each[0])
    with pytest.raises(InvalidArgument, match="n_nets"):
        PerfModel("mlp", n_nets=0).fit(data.specs, data.times, data.primitives)


def test_times_are_brought_to_the_quiet_machine_by_the_probe_read_at_their_fastest_pass() -> None:
    from rooftune.perfmodel.data import PROBE_ELASTICITY, rows_to_data

    a, b, c = ConvSpec(1, 16, 8, 8, 16, 3, 3, padding=1), ConvSpec(1, 32, 8, 8, 32, 1, 1), ConvSpec(1, 8, 4, 4, 8, 1, 1)

    def row(spec: ConvSpec, prim: str, medians: list[float], canary: list[float] | None, threads: int = 2) -> dict:
        return {"spec": spec.to_dict(), "spec_key": spec.key(), "primitive": prim, "threads": threads, "status": "ok",
                "median_s": min(medians), "pass_medians": medians, "pass_canary": canary, "sources": ["net"]}

    rows = [
        row(a, "p", [1.0e-3, 1.2e-3], [1.0e-4, 1.0e-4]),  # fastest pass on a quiet machine
        row(b, "p", [2.5e-3, 2.0e-3], [1.0e-4, 1.44e-4]),  # fastest pass while the probe read 1.44x
        row(c, "p", [3.0e-3], None),  # no probe readings: as measured
        row(a, "transform:nchw-to-nhwc", [4.0e-5], [1.21e-4]),
        row(b, "p", [5.0e-3], [0.5e-4], threads=1),  # another thread count: not the reference
    ]
    data = rows_to_data(rows, "plat", 2)
    t = dict(zip([s.key() for s in data.specs], data.times[:, 0], strict=False))
    assert t[a.key()] == pytest.approx(1.0e-3)
    assert t[b.key()] == pytest.approx(2.0e-3 / 1.44 ** PROBE_ELASTICITY)
    assert t[c.key()] == pytest.approx(3.0e-3)
    assert data.transforms[a.key()]["nchw-to-nhwc"] == pytest.approx(4.0e-5 / 1.21 ** PROBE_ELASTICITY)
    scaling = data.probe_scaling()
    assert scaling["rows"] == 3 and scaling["scaled"] == 1
    assert scaling["median"] == pytest.approx(1.44 ** PROBE_ELASTICITY)
    assert data.provenance()["probe_scaling"] == scaling
    assert data.subset([1]).probe_factor[0, 0] == pytest.approx(data.probe_factor[1, 0])
    raw = rows_to_data(rows, "plat", 2, probe_exponent=0)
    assert sorted(raw.times[:, 0]) == pytest.approx([1.0e-3, 2.0e-3, 3.0e-3])
    assert raw.probe_scaling() == {**raw.probe_scaling(), "scaled": 0, "exponent": 0.0}
    full = rows_to_data(rows, "plat", 2, probe_exponent=1)
    assert sorted(full.times[:, 0])[1] == pytest.approx(2.0e-3 / 1.44)
    with pytest.raises(InvalidArgument, match="probe_exponent"):
        rows_to_data(rows, "plat", 2, probe_exponent=-1)
    assert synthetic(20).probe_scaling()["exponent"] == 0.0  # data built without a store: as given


def test_the_shipped_zen4_base_was_fitted_on_the_data_kept_beside_it(tmp_path: Path) -> None:
    """benchmarks/data holds the profiled rows the shipped Zen 4 base was trained on, in two files
    (a campaign of 31 networks and a later one of eight more, with the layers they share with the
    31). Imported as a user would, they give the same platform, specs, timed rows and networks as
    the base's provenance, so the base can be refitted and its held-out figures measured again
    (`rooftune train`, benchmarks/perfmodel_eval.py) without profiling for an hour and a half."""
    from rooftune.perfmodel import load_profile_data, read_header
    from rooftune.profiling.dataset import import_profiles
    from rooftune.store import Store

    root = Path(__file__).parents[2]
    prov = read_header(root / "src/rooftune/perfmodel/base_model_zen4.rtmodel")["provenance"]
    platform = prov["platforms"][0]
    first, more = (root / f"benchmarks/data/zen4-{platform}{s}.parquet" for s in ("", "-8nets"))
    new = ["deeplabv3_resnet50", "densenet161", "efficientnet_b4", "efficientnet_v2_m", "regnet_x_8gf",
           "regnet_y_8gf", "resnext101_32x8d", "resnext101_64x4d"]
    with Store(str(tmp_path / "zen4.db")) as store:
        import_profiles(store, more)
        alone = load_profile_data(store, platform)
        counts = import_profiles(store, first)
        data = load_profile_data(store, platform)
    # the later file: the eight networks' layers, some shared with the first file's networks
    assert set(new) <= set(alone.networks) and all(set(src) & set(new) for src in alone.sources)
    assert 0 < counts["added"] < counts["rows"]  # the shared rows: stored once
    assert (data.threads, len(data), int(np.sum(~np.isnan(data.times))), data.networks) == \
        (prov["threads"], prov["specs"], prov["rows"], prov["networks"])
    assert set(new) <= set(data.networks)
    assert data.probe_scaling()["scaled"] == prov["probe_scaling"]["scaled"]

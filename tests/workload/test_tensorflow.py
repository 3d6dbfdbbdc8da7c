"""TensorFlow and Keras models: loading (module:callable, .keras, SavedModel, keras:NAME, a Keras
object), the op graph with shapes and costs, the analysis, the tensorflow runtime with its
guideline and baselines, and one verified trial in its own process; with the bad input each refuses."""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from rooftune.errors import InvalidArgument, WorkloadError

# Triton (torch's compiler stack) before TensorFlow, as rooftune loads them (keras_models._tf)
importlib.import_module("torch._dynamo")
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

TINY = "tests.workload.tf_models:tiny_cnn"
C = 8  # tiny_cnn's channels


@pytest.fixture(scope="module")
def tiny():
    from rooftune.workload import load_workload

    return load_workload(TINY)


@pytest.fixture(scope="module")
def tiny_graph(tiny):
    from rooftune.workload import capture

    return capture(tiny)


def test_a_callable_returning_a_keras_model_runs_as_keras_does(tiny) -> None:
    from tests.workload.tf_models import tiny_cnn

    assert tiny.kind == "keras callable" and tiny.framework == "tensorflow"
    assert tiny.input_shapes == [(1, 16, 16, 3)] and tiny.batch == 1
    [out] = tiny()
    expected = tiny_cnn()(tiny.inputs[0].numpy(), training=False)
    np.testing.assert_allclose(out.numpy(), np.asarray(expected), rtol=1e-5, atol=1e-6)


def test_the_op_graph_has_the_ops_tensorflow_ran_with_shapes_and_costs(tiny_graph) -> None:
    from rooftune.costs import cost_of
    from rooftune.costs.tf_ops import tf_type

    g = tiny_graph
    assert g.capture == "tensorflow step stats"
    types = {tf_type(op.module_type) for op in g.ops}
    assert {"Conv2D", "DepthwiseConv2dNative", "MatMul", "Softmax", "Mean"} <= types
    costs = {op.name: cost_of(op) for op in g.ops}
    assert not [op.target for op in g.ops if costs[op.name].flops is None]  # every op has a formula
    conv = [costs[op.name].flops for op in g.ops if tf_type(op.module_type) == "Conv2D"]
    depthwise = [costs[op.name].flops for op in g.ops if tf_type(op.module_type) == "DepthwiseConv2dNative"]
    matmul = [costs[op.name].flops for op in g.ops if tf_type(op.module_type) == "MatMul"]
    # 2 * N * K * H * W * C * kh * kw: the conv 3 -> 8, the depthwise 8 channels of one filter each
    assert conv == [2 * 16 * 16 * C * 3 * 9] and depthwise == [2 * 16 * 16 * C * 9] and matmul == [2 * C * 4]
    first = next(op for op in g.ops if tf_type(op.module_type) == "Conv2D")
    assert first.args["x0"].shape == (1, 16, 16, 3) and first.outputs[0].shape == (1, 16, 16, C)
    times = g.run_timed(lambda: 0.0)
    assert len(times) == len(g.ops) and sum(times) > 0


def test_analyze_places_every_tensorflow_op(tiny, ceilings_db: Path) -> None:
    from rooftune.analysis import analyze

    [a] = analyze(tiny, budget_s=0.5, db=str(ceilings_db), threads=1)
    assert a.capture == "tensorflow step stats" and a.workload_kind == "keras callable"
    assert a.runs >= 10 and a.end_to_end_s > 0 and a.ops_sum_s > 0
    assert math.isfinite(a.accounting_ratio) and a.accounting_ci[0] <= a.accounting_ratio <= a.accounting_ci[1]
    assert {o.kind for o in a.ops} >= {"conv", "matmul", "softmax", "reduction"}
    assert a.flops >= 2 * 16 * 16 * C * 3 * 9 + 2 * 16 * 16 * C * 9 + 2 * C * 4
    assert all(o.bound in {"compute", "overhead", "memory-L1", "memory-L2", "memory-L3", "memory-DRAM"}
               for o in a.ops)
    assert a.to_dict()["opportunities"]


def test_a_keras_object_is_analyzed_and_saved_to_a_keras_file(tmp_path: Path, ceilings_db: Path) -> None:
    from rooftune.analysis import analyze
    from rooftune.workload import load_workload
    from rooftune.workload.keras_models import save_keras_file
    from tests.workload.tf_models import tiny_cnn

    model = tiny_cnn()
    [a] = analyze(model, budget_s=0.3, db=str(ceilings_db), threads=1, batch=2)
    assert a.model == "tiny_cnn" and a.batch == 2
    path = save_keras_file(model, tmp_path)
    assert save_keras_file(model, tmp_path) == path  # the same model, the same file
    wl = load_workload(str(path))
    assert wl.kind == "keras file"
    np.testing.assert_allclose(wl()[0].numpy(), np.asarray(model(wl.inputs[0].numpy(), training=False)),
                               rtol=1e-5, atol=1e-6)


def test_a_keras_file_with_code_is_refused_in_safe_mode(tmp_path: Path) -> None:
    from rooftune.workload import load_workload
    from tests.workload.tf_models import with_lambda

    path = tmp_path / "lam.keras"
    with_lambda().save(str(path))
    with pytest.raises(WorkloadError, match="cannot load the .keras file") as e:
        load_workload(str(path))
    assert "\n" not in str(e.value)


def test_a_saved_model_runs_its_serving_signature_and_one_without_is_refused(tmp_path: Path) -> None:
    from rooftune.workload import load_workload

    class Double(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def __call__(self, x):
            return {"y": x * 2.0}

    m = Double()
    tf.saved_model.save(m, str(tmp_path / "served"), signatures={"serving_default": m.__call__})
    wl = load_workload(str(tmp_path / "served"), batch=4)
    assert wl.kind == "tensorflow savedmodel" and wl.input_shapes == [(4, 3)]
    torch.testing.assert_close(wl()[0], wl.inputs[0] * 2.0)
    with pytest.raises(InvalidArgument, match="invalid input shape '4x5': this model takes \\?x3"):
        load_workload(str(tmp_path / "served"), inputs=[(4, 5)])

    bare = tf.Module()
    bare.v = tf.Variable(1.0)
    tf.saved_model.save(bare, str(tmp_path / "bare"), signatures={})
    with pytest.raises(WorkloadError, match="no serving signature"):
        load_workload(str(tmp_path / "bare"))


def test_keras_applications_by_name_and_their_bad_names() -> None:
    from rooftune.workload import load_workload

    wl = load_workload("keras:MobileNetV2", inputs=[(1, 32, 32, 3)])
    logits = wl()[0]
    assert wl.kind == "keras application" and logits.shape == (1, 1000)
    # logits on a live signal (batch norms set from a seeded batch), the same in every process:
    # untrained with Keras's defaults they are about 1e-11 and a softmax over them 1/1000 everywhere
    assert logits.std() > 0.05 and (logits < 0).any()
    torch.testing.assert_close(load_workload("keras:MobileNetV2", inputs=[(1, 32, 32, 3)])()[0], logits)
    # the classifier's activation the user asks for is the one built
    probs = load_workload("keras:MobileNetV2", inputs=[(1, 32, 32, 3)],
                          options={"classifier_activation": "softmax"})()[0]
    assert float(probs.sum()) == pytest.approx(1.0, abs=1e-4)
    with pytest.raises(InvalidArgument, match="did you mean keras:ResNet50"):
        load_workload("keras:ResNet5O")
    with pytest.raises(InvalidArgument, match="invalid input shape"):
        load_workload("keras:MobileNetV2", inputs=[(1, 32, 32)])


def test_a_missing_tensorflow_is_named_with_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from rooftune.workload import load_workload

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorflow" else real(name, *a))
    with pytest.raises(WorkloadError, match=r"TensorFlow is not installed: pip install 'rooftune\[tf\]'"):
        load_workload("keras:ResNet50")
    from rooftune.runtimes import get_runtime

    assert "pip install" in get_runtime("tensorflow").available()


def test_the_tensorflow_runtime_matches_tensorflows_fp32_output(tiny, tmp_path: Path) -> None:
    from rooftune.runconfig import RunConfig
    from rooftune.runtimes import get_runtime

    rt = get_runtime("tensorflow")
    ref = tiny()
    for options in ({}, {"remapper": False}, {"xla": True}):
        cfg = RunConfig(runtime="tensorflow", intra_threads=1, inter_threads=1, runtime_options=options)
        prepared = rt.prepare(tiny, cfg, tmp_path)
        for got, want in zip(prepared.output(), ref, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert rt.normalize(RunConfig(runtime="tensorflow", memory_format="channels_last")).memory_format == "contiguous"
    assert RunConfig(runtime="tensorflow", runtime_options={"onednn": False}).environment()["TF_ENABLE_ONEDNN_OPTS"] == "0"
    with pytest.raises(ValueError, match="PyTorch model"):
        from rooftune.workload import load_workload

        rt.prepare(load_workload("tests.analysis.tiny_models:small_cnn"), RunConfig(runtime="tensorflow"), tmp_path)


def test_guideline_and_baselines_of_a_tensorflow_graph(tiny_graph, fake_platform) -> None:
    from dataclasses import replace

    from rooftune.runtimes import get_runtime
    from rooftune.tuning.guidelines import baselines, framework_seeds, guideline

    guide, why = guideline(fake_platform, tiny_graph, {"tensorflow": get_runtime("tensorflow")})
    assert guide.runtime == "tensorflow" and guide.intra_threads * guide.inter_threads <= fake_platform.usable_cores
    assert any("inter-op" in w for w in why)
    peers = {c.name: c for c in baselines(fake_platform, {"tensorflow": get_runtime("tensorflow")}, "tensorflow")}
    assert set(peers) == {"tensorflow-vanilla", "tensorflow-recommended", "intel-recommended-tf"}
    assert not peers["tensorflow-vanilla"].set_threads and peers["intel-recommended-tf"].pin
    for c in peers.values():
        c.validate()
    # ONNX Runtime's and OpenVINO's defaults are a TensorFlow model's peers too, named as for PyTorch
    available = {n: get_runtime(n) for n in ("tensorflow", "onnxruntime", "openvino")}
    # with OpenVINO at hand, it runs the guideline's threads from the TensorFlow graph itself, and
    # TensorFlow with the guideline's pools is measured beside it (Wang et al.'s on the framework)
    ov, why = guideline(fake_platform, tiny_graph, available)
    assert (ov.runtime, ov.option("source"), ov.intra_threads) == ("openvino", "framework", guide.intra_threads)
    assert any("OpenVINO converting the TensorFlow graph" in w for w in why)
    assert framework_seeds(fake_platform, tiny_graph, ov) == [replace(guide, name="guideline (tensorflow)")]
    assert framework_seeds(fake_platform, tiny_graph, guide) == []
    peers = {c.name: c for c in baselines(fake_platform, available, "tensorflow")}
    assert set(peers) == {"tensorflow-vanilla", "tensorflow-recommended", "intel-recommended-tf",
                          "onnxruntime-default", "openvino-default", "openvino-latency"}
    assert peers["onnxruntime-default"].vendor_defaults and peers["openvino-default"].precision == "default"


def test_a_trial_of_a_keras_model_is_verified_in_its_own_process(tmp_path: Path) -> None:
    from rooftune.bench import Policy
    from rooftune.runconfig import RunConfig
    from rooftune.tuning.setup import Setup, run_trial

    setup = Setup({"model": TINY, "inputs": None, "options": {}}, tmp_path)
    setup.files(1)
    cfg = RunConfig(runtime="tensorflow", intra_threads=1, inter_threads=1, name="t")
    r = run_trial(cfg, setup, Policy(number=1, warmup_s=0.0, budget_s=0.2, min_samples=3, max_samples=20))
    assert r.ok, r.error
    assert r.verify["ok"] and r.latency_s > 0


@pytest.mark.parametrize("runtime,options", [("onnxruntime", {}), ("openvino", {}), ("openvino", {"source": "onnx"}),
                                             ("ncnn", {})])
def test_the_other_runtimes_run_a_keras_model_verified_against_tensorflows_fp32_output(
        tiny, tmp_path: Path, runtime: str, options: dict) -> None:
    pytest.importorskip("tf2onnx")
    from rooftune.runconfig import RunConfig
    from rooftune.runtimes import get_runtime
    from rooftune.tuning.verify import check_prepared

    rt = get_runtime(runtime)
    if rt.available():
        pytest.skip(rt.available())
    assert "tensorflow" in rt.frameworks
    cfg = RunConfig(runtime=runtime, intra_threads=1, runtime_options=options)
    prepared = rt.prepare(tiny, cfg, tmp_path)
    verify = check_prepared(prepared, "fp32", tuple(tiny.inputs), tiny())
    assert verify["ok"], verify
    torch.testing.assert_close(prepared.output()[0], tiny()[0], rtol=1e-4, atol=1e-5)
    # the artifact is what a later trial loads without building the model
    assert prepared.artifact is not None and prepared.artifact.exists() and rt.artifact_ready(cfg, tmp_path)


def test_a_layer_no_converter_takes_fails_those_runtimes_naming_it_and_tensorflow_still_runs(tmp_path: Path) -> None:
    pytest.importorskip("tf2onnx")
    from rooftune.runconfig import RunConfig
    from rooftune.runtimes import get_runtime
    from rooftune.runtimes.sources import OpConversionFailure
    from rooftune.tuning.skips import CONVERSION_FAILED
    from rooftune.workload import load_workload

    wl = load_workload("tests.workload.tf_models:with_custom_op")
    got = get_runtime("tensorflow").prepare(wl, RunConfig(runtime="tensorflow", intra_threads=1), tmp_path).output()
    torch.testing.assert_close(got[0], wl()[0])
    for runtime, options, converter in (("onnxruntime", {}, "tf2onnx"), ("ncnn", {}, "tf2onnx"),
                                        ("openvino", {}, "OpenVINO's TensorFlow frontend"),
                                        ("openvino", {"source": "onnx"}, "tf2onnx")):
        rt = get_runtime(runtime)
        if rt.available():
            continue
        with pytest.raises(OpConversionFailure) as err:
            rt.prepare(wl, RunConfig(runtime=runtime, intra_threads=1, runtime_options=options), tmp_path / runtime)
        line = f"{type(err.value).__name__}: {err.value}"
        # one line, the op and the layer as the Keras model names it (its graph scope is bessel_1)
        assert line == f"{CONVERSION_FAILED}{converter} has no conversion for op BesselI1e in layer bessel"


def test_trials_of_a_keras_model_on_onnxruntime_are_verified_or_fail_with_the_layer(tmp_path: Path) -> None:
    pytest.importorskip("tf2onnx")
    from rooftune.bench import Policy
    from rooftune.runconfig import RunConfig
    from rooftune.tuning.setup import Setup, run_trial

    policy = Policy(number=1, warmup_s=0.0, budget_s=0.2, min_samples=3, max_samples=20)
    for d in ("tiny", "custom"):
        (tmp_path / d).mkdir()
    setup = Setup({"model": TINY, "inputs": None, "options": {}}, tmp_path / "tiny")
    setup.files(1)
    r = run_trial(RunConfig(runtime="onnxruntime", intra_threads=1, name="t"), setup, policy)
    assert r.ok, r.error
    assert r.verify["ok"] and r.latency_s > 0
    custom = Setup({"model": "tests.workload.tf_models:with_custom_op", "inputs": None, "options": {}},
                   tmp_path / "custom")
    custom.files(1)
    r = run_trial(RunConfig(runtime="onnxruntime", intra_threads=1, name="t"), custom, policy)
    assert not r.ok and r.error == "OpConversionFailure: tf2onnx has no conversion for op BesselI1e in layer bessel"


@pytest.mark.parametrize("cell,batch", [("LSTM", 1), ("LSTM", 3), ("GRU", 2)])
def test_a_keras_recurrent_layer_costs_what_pytorchs_analytic_formula_gives(cell: str, batch: int) -> None:
    """The ops of a Keras LSTM's or GRU's while loop, every iteration listed, sum to the FLOPs of
    the formula PyTorch's LSTM and GRU are costed by (costs.formulas.recurrent), less or more what
    the two definitions differ by: Keras's LSTM has one bias vector where PyTorch's has two, and
    Keras's GRU computes (1-z)*n + z*h in four ops where the formula counts three."""
    from rooftune.costs import cost_of, costs_of
    from rooftune.workload import capture
    from rooftune.workload.graph import OpNode, TensorMeta
    from rooftune.workload.keras_models import from_keras_model

    steps, width, hidden = 5, 6, 7
    keras.utils.set_random_seed(0)
    x = keras.Input((steps, width))
    layer = getattr(keras.layers, cell)(hidden)
    model = keras.Model(x, layer(x))
    # biases that are not all zeros: Grappler folds an add of a constant zero away
    layer.set_weights([w if w.ndim > 1 and w.shape[0] != 2 else np.random.default_rng(0).normal(size=w.shape)
                       for w in layer.get_weights()])
    wl = from_keras_model(model, "recurrent", "keras model", batch=batch)
    graph = capture(wl)
    costs = costs_of(graph)
    ours = [(op, c) for op, c in zip(graph.ops, costs, strict=True) if f"/{cell.lower()}" in op.name]
    assert all(c.flops is not None for _, c in ours), [op.module_type for op, c in ours if c.flops is None]
    # the loop body is listed once per step
    assert sum(1 for op, _ in ours if op.module_type.endswith("MatMul") and "while" in op.name) >= 2 * steps
    gates = {"LSTM": 4, "GRU": 3}[cell]

    def f(*shape: int) -> TensorMeta:
        return TensorMeta(shape, "float32", 4)

    pytorch = cost_of(OpNode(0, cell.lower(), f"aten.{cell.lower()}", "", cell,
                             {"input": f(steps, batch, width), "params": [f(gates * hidden, width), f(gates * hidden, hidden),
                                                                          f(gates * hidden), f(gates * hidden)],
                              "has_biases": True, "num_layers": 1, "bidirectional": False, "batch_first": False},
                             (f(steps, batch, hidden),)))
    assert pytorch.kind == "rnn"
    differ = -steps * batch * gates * hidden if cell == "LSTM" else steps * batch * hidden
    assert sum(c.flops for _, c in ours) == pytorch.flops + differ


# The pipeline's fixed configurations (TensorFlow's peers, each a fresh process importing
# TensorFlow) run whatever the budget: beside two busy processes on 2 cores they took over the
# suite's 300 s limit, so this test's limit is the cluster study's.
@pytest.mark.timeout(1200)
def test_optimize_runs_a_keras_model_end_to_end_with_its_report(ceilings_db: Path, tmp_path: Path) -> None:
    """The whole pipeline on a Keras model: analysis, tuning against TensorFlow's peers (the
    guideline from the TF graph on OpenVINO, TensorFlow with its pools beside it), select skipped
    with its reason, the report and the saved best, every trial checked against TensorFlow."""
    import json

    from rooftune.bench import Policy
    from rooftune.pipeline import optimize

    fast = Policy(number=1, warmup_s=0.05, budget_s=0.3, min_samples=6, max_samples=60)
    r = optimize(TINY, out=tmp_path / "out", store=str(ceilings_db), runtimes=["tensorflow", "openvino"], trials=1,
                 trial_policy=fast, compare_policy=fast, budget_s=90, precisions=("fp32",))
    assert {s.name: s.status for s in r.steps.values()} == {
        "machine": "ok", "analyze": "ok", "tune": "ok", "select": "skipped", "report": "ok"}, r.steps
    assert "TensorFlow model" in r.steps["select"].message
    s = json.loads((r.out / "summary.json").read_text())
    assert s["tune"]["best"]["verify"]["ok"] and s["analysis"]["end_to_end_s"] > 0
    names = {t.config.name for t in r.tune.trials if t.ok}
    assert {"guideline", "tensorflow-vanilla", "intel-recommended-tf"} <= names
    # a seed runs within the budget's wall clock: on a loaded host the study says it had no time left
    assert "guideline (tensorflow)" in names or any(
        n.startswith("no time left in the budget for") and "guideline (tensorflow)" in n for n in r.tune.notes)
    assert all(t.verify.get("ok") for t in r.tune.trials if t.ok)
    assert r.tune.guideline.config.runtime == "openvino"
    sp = s["speedup_vs_vanilla"]
    # a bound too few pairs could set is null in the JSON, with its note beside it
    low, high = (-math.inf if sp["ci_low"] is None else sp["ci_low"]), (math.inf if sp["ci_high"] is None else sp["ci_high"])
    assert low <= sp["ratio"] <= high
    text = (r.out / "report.html").read_text()
    assert "tensorflow-vanilla" in text and f"{r.tune.speedup['tensorflow-vanilla']['ratio']:.2f}x" in text
    assert json.loads((r.out / "best.json").read_text())["workload"]["model"] == TINY
    # the usage it gives: the tuned configuration loaded back, checked against TensorFlow's output
    assert any("against TensorFlow's fp32 output" in line for line in r.usage())
    import rooftune
    from rooftune.runtimes import output_tensors
    from rooftune.workload import load_workload

    tuned = rooftune.load_tuned(r.out / "best.json")
    try:
        assert tuned.check["ok"]
        torch.testing.assert_close(output_tensors(tuned(*tuned.example_inputs)), output_tensors(load_workload(TINY)()),
                                   rtol=1e-3, atol=1e-4)
    finally:
        tuned.close()

"""Winograd F(4x4,3x3) written into ONNX graphs: which convolutions qualify, that the rewrite
computes the same function, how layers are chosen, and ONNX Runtime's `conv=winograd` option."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rooftune.runtimes import winograd_onnx as wo  # noqa: E402


def conv_model(n: int = 1, h: int = 10, w: int = 13) -> onnx.ModelProto:
    """x (n,8,h,w) -> 3x3 pad 1 (bias) -> relu -> 3x3 no pad, no bias -> 3x3 stride 2 ->
    3x3 groups 2 -> 3x3 dilation 2 -> 3x3 pads (0,1,2,1)."""
    rng = np.random.default_rng(0)

    def init(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    inits = [init("w1", 16, 8, 3, 3), init("b1", 16), init("w2", 8, 16, 3, 3), init("w3", 8, 8, 3, 3),
             init("w4", 8, 4, 3, 3), init("w5", 8, 8, 3, 3), init("w6", 6, 8, 3, 3), init("b6", 6)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="c1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="r1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="c2", kernel_shape=[3, 3]),
        helper.make_node("Conv", ["c2", "w3"], ["c3"], name="c3", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c3", "w4"], ["c4"], name="c4", kernel_shape=[3, 3], group=2, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c4", "w5"], ["c5"], name="c5", kernel_shape=[3, 3], dilations=[2, 2], pads=[2, 2, 2, 2]),
        helper.make_node("Conv", ["c5", "w6", "b6"], ["y"], name="c6", kernel_shape=[3, 3], pads=[0, 1, 2, 1]),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 8, h, w])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def test_only_3x3_stride_1_dense_convolutions_qualify() -> None:
    cands = {c.node: c for c in wo.candidates(conv_model())}
    assert sorted(cands) == ["c1", "c2", "y"]  # by output; not stride 2, two groups, dilation 2
    assert cands["c1"].key == (1, 8, 10, 13, 16, 1, 1, 1, 1) and cands["c1"].shape == "8->16 at 10x13"
    assert cands["y"].pads == (0, 1, 2, 1) and cands["c2"].pads == (0, 0, 0, 0)


@pytest.mark.parametrize("n", [1, 3])
def test_the_rewritten_graph_computes_the_same_function(n: int) -> None:
    model = conv_model(n)
    x = np.random.default_rng(1).standard_normal((n, 8, 10, 13)).astype(np.float32)
    ref = run(model, x)
    new = wo.rewrite(model, ["c1", "c2", "y"])
    ops = [node.op_type for node in new.graph.node]
    assert ops.count("DepthToSpace") == 3 and ops.count("Conv") == 6  # 3 kept, 3 input transforms
    assert {i.name for i in new.graph.initializer}.isdisjoint({"w1", "w2", "w6"})  # the direct weights dropped
    got = run(new, x)
    assert got.shape == ref.shape
    # F(4x4,3x3) rounds differently (transform entries up to 8 and 1/24), within fp32's reach
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()
    with pytest.raises(ValueError, match="not Winograd candidates: c3"):
        wo.rewrite(model, ["c1", "c3"])


def test_new_names_keep_clear_of_the_graphs_own_and_shared_weights_stay() -> None:
    model = conv_model()
    # a tensor of the graph's own named like the rewrite's, and c1's weight used again by an Add
    model.graph.initializer.append(numpy_helper.from_array(np.ones((16, 8, 3, 3), np.float32), "wino0_u"))
    model.graph.node.append(helper.make_node("Add", ["w1", "wino0_u"], ["w_plus"], name="uses_w1"))
    model.graph.output.append(helper.make_tensor_value_info("w_plus", TensorProto.FLOAT, None))
    new = wo.rewrite(model, ["c1"])
    inits = [i.name for i in new.graph.initializer]
    assert len(inits) == len(set(inits)) and "w1" in inits and "wino0_u" in inits  # still used: kept
    assert "b1" not in inits  # c1's bias, used by nothing else now: dropped
    x = np.random.default_rng(1).standard_normal((1, 8, 10, 13)).astype(np.float32)
    import onnxruntime as ort

    ref = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = ort.InferenceSession(new.SerializeToString()).run(None, {"x": x})
    assert np.array_equal(ref[1], got[1]) and np.abs(ref[0] - got[0]).max() <= 1e-4 * np.abs(ref[0]).max()


def test_layers_are_measured_once_per_shape_and_chosen_by_the_lower_end_of_the_interval() -> None:
    model = onnx.load_from_string(conv_model().SerializeToString())
    cands = wo.candidates(model)
    twin = wo.Candidate("c1-again", *cands[0].key[:5], cands[0].pads)
    calls = []
    answers = iter([(1.6, (1.5, 1.7)), (1.1, (1.0, 1.2)), (0.7, (0.6, 0.8))])

    def fake_compare(direct, wino):  # noqa: ANN001, ANN202
        direct(), wino()  # both sides run their small model
        calls.append(1)
        ratio, ci = next(answers)
        return SimpleNamespace(ratio=ratio, ci=ci)

    choices = wo.choose([cands[0], twin, cands[1], cands[2]], wo.ort_session_factory(1), compare=fake_compare,
                        evict_bytes=2**20)
    assert len(calls) == 3  # the twin shape was not measured again
    assert [c.chosen for c in choices] == [True, True, False, False]
    assert choices[0].to_dict() == {"node": "c1", "shape": "8->16 at 10x13", "speedup": 1.6, "ci": [1.5, 1.7], "chosen": True}


def test_the_eviction_buffer_is_twice_the_caches_within_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    import rooftune.platform.sysfs as sysfs
    from rooftune.platform.sysfs import CacheLevel

    l3 = CacheLevel(3, "Unified", 96 * 2**20, ((0, 1), (2, 3)))  # two instances: 192 MiB in all
    monkeypatch.setattr(sysfs, "read_caches", lambda: (CacheLevel(2, "Unified", 2**20, ((0,), (1,), (2,), (3,))), l3))
    assert wo.evict_size() == 2 * (4 + 192) * 2**20
    monkeypatch.setattr(sysfs, "read_caches", lambda: ())  # no sysfs: the floor
    assert wo.evict_size() == 64 * 2**20
    monkeypatch.setattr(sysfs, "read_caches", lambda: (CacheLevel(3, "Unified", 2**30, ((0,),)),))
    assert wo.evict_size() == 2**30


def test_a_layer_whose_winograd_output_disagrees_is_never_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    cand = wo.candidates(conv_model())[0]
    real = wo.subgraph

    def broken(cand, weight, bias, x, y, prefix):  # noqa: ANN001, ANN202
        return real(cand, weight * 1.5, bias, x, y, prefix)  # a wrong weight transform

    monkeypatch.setattr(wo, "subgraph", broken)
    (choice,) = wo.choose([cand], wo.ort_session_factory(1), compare=lambda a, b: SimpleNamespace(ratio=3.0, ci=(2.9, 3.1)),
                          evict_bytes=2**20)
    assert choice.ratio == 3.0 and not choice.chosen


def test_onnxruntime_runs_the_rewrite_verified_and_says_which_layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rooftune.runtimes import get_runtime
    from rooftune.tuning import RunConfig
    from rooftune.workload import load_workload

    # every eligible layer rewritten, whatever its speed (and however few samples 0.2 s gave)
    monkeypatch.setattr(wo, "MIN_SPEEDUP", float("-inf"))
    monkeypatch.setattr(wo, "CHOOSE_BUDGET_S", 0.2)
    monkeypatch.setattr(wo, "evict_size", lambda: 2**20)
    monkeypatch.setattr(wo, "network_speedup", lambda *a, **k: (1.5, (1.4, 1.6)))  # the network faster with them
    wl = load_workload("tests.analysis.tiny_models:winograd_cnn")
    with torch.no_grad():
        ref = wl.module(*wl.inputs)
    rt = get_runtime("onnxruntime")
    cfg = rt.normalize(RunConfig(runtime="onnxruntime", intra_threads=1, runtime_options={"conv": "winograd"}))
    assert not rt.artifact_ready(cfg, tmp_path)
    prepared = rt.prepare(wl, cfg, tmp_path)
    assert prepared.artifact.name == "model-winograd-t1.onnx" and rt.artifact_ready(cfg, tmp_path)
    (out,) = prepared.output()
    assert torch.allclose(out, ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item())
    ops = [n.op_type for n in onnx.load(str(prepared.artifact)).graph.node]
    assert ops.count("DepthToSpace") == 2  # the two 3x3 stride-1 dense layers, BN folded into the first
    layers = json.loads(prepared.artifact.with_suffix(".json").read_text())
    assert layers["threads"] == 1 and [entry["chosen"] for entry in layers["layers"]] == [True, True]
    assert (tmp_path / prepared.artifact.parent.name / "model.onnx").exists()  # the export, shared with direct
    # int8 is quantized from the direct export: the option is dropped there
    int8 = rt.normalize(RunConfig(runtime="onnxruntime", precision="int8", runtime_options={"conv": "winograd"}))
    assert "conv" not in int8.runtime_options
    # direct is no option at all: one configuration, one identity
    direct = rt.normalize(RunConfig(runtime="onnxruntime", runtime_options={"conv": "direct", "spinning": True}))
    assert direct.key() == rt.normalize(RunConfig(runtime="onnxruntime", runtime_options={"spinning": True})).key()


def test_layers_faster_alone_are_not_kept_where_the_network_is_not_faster_with_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """resnet18 on the Zen 4 VM: six of thirteen layers measured faster by Winograd between 1x1
    neighbours, and the guideline with them ran 1.2x slower than ONNX Runtime's default. The
    network is timed with and without the layers chosen; without its whole interval above 1 the
    direct model is kept, and the note says why."""
    from rooftune.runtimes import get_runtime
    from rooftune.tuning import RunConfig
    from rooftune.tuning.study import TrialResult, winograd_note
    from rooftune.workload import load_workload

    monkeypatch.setattr(wo, "MIN_SPEEDUP", float("-inf"))
    monkeypatch.setattr(wo, "CHOOSE_BUDGET_S", 0.2)
    monkeypatch.setattr(wo, "evict_size", lambda: 2**20)
    # the real network comparison runs on the tiny model: a finite ratio within its interval
    monkeypatch.setattr(wo, "NETWORK_BUDGET_S", 0.3)
    direct = conv_model()
    cands = wo.candidates(direct)
    ratio, (lo, hi) = wo.network_speedup(direct, wo.rewrite(direct, [c.node for c in cands], cands),
                                         wo.ort_session_factory(1))
    assert math.isfinite(ratio) and ratio > 0 and lo <= ratio <= hi
    monkeypatch.setattr(wo, "network_speedup", lambda *a, **k: (0.83, (0.80, 0.86)))
    wl = load_workload("tests.analysis.tiny_models:winograd_cnn")
    rt = get_runtime("onnxruntime")
    cfg = rt.normalize(RunConfig(runtime="onnxruntime", intra_threads=1, runtime_options={"conv": "winograd"}))
    prepared = rt.prepare(wl, cfg, tmp_path)
    assert [n.op_type for n in onnx.load(str(prepared.artifact)).graph.node].count("DepthToSpace") == 0
    record = json.loads(prepared.artifact.with_suffix(".json").read_text())
    assert [e["chosen"] for e in record["layers"]] == [False, False]
    assert record["network"] == {"speedup": 0.83, "ci": [0.8, 0.86], "layers": 2, "kept": False}
    trial = TrialResult(cfg, ok=True, artifact=str(prepared.artifact))
    assert winograd_note(trial) == ("conv=winograd: 2 of the 2 eligible 3x3 layers measured faster by Winograd alone, "
                                    "but the network with them ran 0.83x (0.80-0.86) as fast as without: none kept, "
                                    "the model runs its direct convolutions")


def test_the_guideline_and_the_space_offer_winograd_only_where_a_convolution_takes_it(fake_platform) -> None:  # noqa: ANN001
    from rooftune.runtimes import get_runtime
    from rooftune.tuning import guideline
    from rooftune.tuning.guidelines import winograd_share
    from rooftune.tuning.study import search_space
    from rooftune.workload import OpGraph, OpNode, TensorMeta

    def conv(i: int, k: int, stride: int = 1, groups: int = 1) -> OpNode:
        t, w = TensorMeta((1, 8, 8, 8), "float32", 4), TensorMeta((8, 8 // groups, k, k), "float32", 4)
        return OpNode(i, f"c{i}", "aten.conv2d", "", "Conv2d",
                      {"input": t, "weight": w, "stride": [stride, stride], "groups": groups}, (t,), (i - 1,) if i else ())

    three = OpGraph("3", (conv(0, 3), conv(1, 1)), "torch.export")  # 9x the 1x1's FLOPs
    strided = OpGraph("s", (conv(0, 3, stride=2), conv(1, 3, groups=8), conv(2, 1)), "torch.export")
    assert winograd_share(three) == pytest.approx(0.9) and winograd_share(strided) == 0.0
    available = {n: get_runtime(n) for n in ("eager", "onnxruntime")}
    guide, why = guideline(fake_platform, three, available)
    assert guide.runtime_options["conv"] == "winograd" and any("Winograd F(4x4,3x3)" in w for w in why)
    assert "conv" not in guideline(fake_platform, strided, available)[0].runtime_options
    assert search_space(fake_platform, available, ["fp32"])["runtime_options"]["onnxruntime"]["conv"] == ["direct", "winograd"]
    assert "conv" not in search_space(fake_platform, available, ["fp32"], winograd=False)["runtime_options"]["onnxruntime"]


def test_the_study_says_which_layers_were_rewritten_and_save_keeps_it(tmp_path: Path) -> None:
    from rooftune.tuning import RunConfig
    from rooftune.tuning.study import TrialResult, save_config, winograd_note

    art = tmp_path / "model-winograd-t2.onnx"
    art.write_bytes(b"onnx")
    layers = [{"node": "a", "shape": "256->256 at 56x56", "speedup": 1.5, "ci": [1.4, 1.6], "chosen": True},
              {"node": "b", "shape": "512->512 at 28x28", "speedup": 1.25, "ci": [1.2, 1.3], "chosen": True},
              {"node": "c", "shape": "64->64 at 224x224", "speedup": 0.7, "ci": [0.6, 0.8], "chosen": False}]
    art.with_suffix(".json").write_text(json.dumps({"threads": 2, "layers": layers}))
    trial = TrialResult(RunConfig(runtime="onnxruntime", runtime_options={"conv": "winograd"}), ok=True, artifact=str(art))
    assert winograd_note(trial) == ("conv=winograd: Winograd F(4x4,3x3) on 2 of the 3 eligible 3x3 layers "
                                    "(each 1.25-1.50x as fast between 1x1 neighbours, weights cold)")
    # the counts are read when the trial ends (the artifact's folder goes with the study) and stored
    counted = replace(trial, rewritten=(2, 3))
    assert counted.describe().endswith("conv=winograd (2 of 3 layers)") and trial.describe() == trial.config.describe()
    assert TrialResult.from_stored({"config": trial.config.to_dict(), "status": "ok",
                                    "result": counted.to_dict()}).describe() == counted.describe()
    plain = TrialResult(RunConfig(runtime="onnxruntime"), ok=True, artifact=str(art))
    assert winograd_note(plain) == "" and plain.describe() == plain.config.describe()
    art.with_suffix(".json").write_text(json.dumps({"threads": 2, "layers": layers[2:]}))
    assert "none of the 1 eligible" in winograd_note(trial)
    assert replace(trial, rewritten=(0, 1)).describe().endswith("conv=winograd (0 of 1 layers)")
    saved = save_config(trial, tmp_path / "out" / "best.json")
    assert (saved.parent / "best_model-winograd-t2.json").exists() and (saved.parent / "best_model-winograd-t2.onnx").exists()


def test_a_replay_runs_the_saved_rewrite_without_measuring_the_layers_again(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from rooftune.runtimes import get_runtime
    from rooftune.tuning import RunConfig
    from rooftune.tuning.replay import replay
    from rooftune.tuning.study import TrialResult, save_config
    from rooftune.workload import load_workload

    model = "tests.analysis.tiny_models:winograd_cnn"
    monkeypatch.setattr(wo, "MIN_SPEEDUP", float("-inf"))
    monkeypatch.setattr(wo, "CHOOSE_BUDGET_S", 0.2)
    monkeypatch.setattr(wo, "evict_size", lambda: 2**20)
    monkeypatch.setattr(wo, "network_speedup", lambda *a, **k: (1.5, (1.4, 1.6)))  # the network faster with them
    cfg = RunConfig(runtime="onnxruntime", intra_threads=1, runtime_options={"conv": "winograd"})
    prepared = get_runtime("onnxruntime").prepare(load_workload(model), cfg, tmp_path / "study")
    saved = save_config(TrialResult(cfg, ok=True, artifact=str(prepared.artifact)), tmp_path / "best.json",
                        {"model": model, "inputs": None, "options": {}})

    def no_measuring(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the layers were measured again")

    monkeypatch.setattr(wo, "choose", no_measuring)
    r = replay(saved, seconds=0.2)
    assert r["verify"]["ok"] and r["median_s"] > 0


def test_openvino_from_onnx_runs_its_own_measured_rewrite_and_a_replay_keeps_it(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("openvino")
    from rooftune.runtimes import get_runtime
    from rooftune.tuning import RunConfig
    from rooftune.tuning.replay import replay
    from rooftune.tuning.study import TrialResult, save_config, winograd_note
    from rooftune.workload import load_workload

    monkeypatch.setattr(wo, "MIN_SPEEDUP", float("-inf"))
    monkeypatch.setattr(wo, "CHOOSE_BUDGET_S", 0.2)
    monkeypatch.setattr(wo, "evict_size", lambda: 2**20)
    monkeypatch.setattr(wo, "network_speedup", lambda *a, **k: (1.5, (1.4, 1.6)))  # the network faster with them
    sessions = []
    factory = wo.ov_session_factory
    monkeypatch.setattr(wo, "ov_session_factory", lambda threads: sessions.append(threads) or factory(threads))
    model = "tests.analysis.tiny_models:winograd_cnn"
    wl = load_workload(model)
    with torch.no_grad():
        ref = wl.module(*wl.inputs)
    rt = get_runtime("openvino")
    cfg = rt.normalize(RunConfig(runtime="openvino", intra_threads=1, runtime_options={"source": "onnx", "conv": "winograd"}))
    assert cfg.runtime_options["conv"] == "winograd" and not rt.artifact_ready(cfg, tmp_path / "study")
    prepared = rt.prepare(wl, cfg, tmp_path / "study")
    assert rt.artifact_ready(cfg, tmp_path / "study")
    assert sessions == [1]  # the layers were measured with OpenVINO, at the configuration's threads
    assert prepared.artifact.name == "model-onnx-winograd-t1.xml"
    (out,) = prepared.output()
    assert torch.allclose(out, ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item())
    rewritten = prepared.artifact.parent.parent / "onnxruntime-contiguous-fp32-b1" / "model-winograd-ov-t1.onnx"
    assert [n.op_type for n in onnx.load(str(rewritten)).graph.node].count("DepthToSpace") == 2
    trial = TrialResult(cfg, ok=True, artifact=str(prepared.artifact))
    assert winograd_note(trial).startswith("conv=winograd: Winograd F(4x4,3x3) on 2 of the 2 eligible 3x3 layers")
    # from the PyTorch module there is no ONNX graph to rewrite, and int8 is quantized from the
    # direct model: the option is dropped, one configuration, one identity
    for other in ({"source": "framework", "conv": "winograd"}, {"source": "onnx", "conv": "direct"}):
        assert "conv" not in rt.normalize(RunConfig(runtime="openvino", runtime_options=other)).runtime_options
    assert "conv" not in rt.normalize(RunConfig(runtime="openvino", precision="int8",
                                                runtime_options={"source": "onnx", "conv": "winograd"})).runtime_options
    # two streams run each request on one stream's threads: the layers are measured, and the IR
    # named, for those
    two = rt.normalize(RunConfig(runtime="openvino", intra_threads=2,
                                 runtime_options={"source": "onnx", "conv": "winograd", "streams": 2}))
    assert rt.artifact_file(two, tmp_path).name == "model-onnx-winograd-t1.xml"
    # the rewrite folds batch norm with ONNX Runtime: without it, the option is refused, not failed
    import rooftune.runtimes.openvino_runtime as ovr

    with monkeypatch.context() as m:
        m.setattr(ovr, "missing", lambda p: f"{p} is not installed" if p == "onnxruntime" else None)
        assert "onnxruntime is not installed" in rt.unsupported(cfg)
        assert rt.unsupported(RunConfig(runtime="openvino", runtime_options={"source": "onnx"})) is None
    # --save keeps the IR, its weights and the per-layer figures; a replay runs that IR
    saved = save_config(trial, tmp_path / "best.json", {"model": model, "inputs": None, "options": {}})
    assert {p.name for p in tmp_path.glob("best_*")} == {"best_model-onnx-winograd-t1.xml", "best_model-onnx-winograd-t1.bin",
                                                          "best_model-onnx-winograd-t1.json"}

    def no_measuring(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the layers were measured again")

    monkeypatch.setattr(wo, "choose", no_measuring)
    r = replay(saved, seconds=0.2)
    assert r["verify"]["ok"] and r["median_s"] > 0

"""The guideline's inter-op width from the op graph, and the baselines of this machine."""

from __future__ import annotations

import pytest

from rooftune.platform import Platform
from rooftune.tuning import average_width, baselines, guideline
from rooftune.workload import OpGraph, OpNode, TensorMeta


def conv(index: int, producers: tuple[int, ...]) -> OpNode:
    t = TensorMeta((1, 8, 8, 8), "float32", 4)
    w = TensorMeta((8, 8, 3, 3), "float32", 4)
    return OpNode(index, f"conv{index}", "aten.conv2d", "", "Conv2d", {"input": t, "weight": w}, (t,), producers)


def relu(index: int, producers: tuple[int, ...]) -> OpNode:
    t = TensorMeta((1, 8, 8, 8), "float32", 4)
    return OpNode(index, f"relu{index}", "aten.relu", "", "ReLU", {"self": t}, (t,), producers)


def test_width_of_a_chain_is_one_and_of_four_branches_is_higher() -> None:
    chain = OpGraph("c", (conv(0, ()), relu(1, (0,)), conv(2, (1,)), conv(3, (2,))), "torch.export")
    assert average_width(chain) == 1.0
    # stem conv, then 4 parallel convs, then a conv joining them: 6 heavy ops over 3 levels.
    branches = (conv(0, ()), conv(1, (0,)), conv(2, (0,)), conv(3, (0,)), conv(4, (0,)), conv(5, (1, 2, 3, 4)))
    assert average_width(OpGraph("b", branches, "torch.export")) == 2.0


def test_guideline_divides_cores_among_pools_and_baselines_are_named(fake_platform: Platform) -> None:
    branches = (conv(0, ()), conv(1, (0,)), conv(2, (0,)), conv(3, (0,)), conv(4, (0,)), conv(5, (1, 2, 3, 4)))
    from dataclasses import replace

    big = replace(fake_platform, usable_cores=16, physical_cores=16, logical_cores=16)
    cfg, why = guideline(big, OpGraph("b", branches, "torch.export"), {"eager": None, "torchscript": None})
    assert cfg.inter_threads == 2 and cfg.intra_threads == 8  # width 2 -> 2 pools of 8 threads
    small, _ = guideline(fake_platform, OpGraph("b", branches, "torch.export"), {"eager": None, "torchscript": None})
    assert small.inter_threads == 1 and small.intra_threads == fake_platform.usable_cores  # 2 cores: one pool
    assert cfg.runtime == "torchscript" and cfg.memory_format == "channels_last"
    assert any("average width 2.00" in w for w in why)
    names = [b.name for b in baselines(fake_platform, {"eager": None})]
    assert names == ["vanilla", "pytorch-launcher", "intel-recommended"]
    names = [b.name for b in baselines(fake_platform, {"eager": None, "onnxruntime": None, "openvino": None})]
    assert names[-3:] == ["onnxruntime-default", "openvino-default", "openvino-latency"]
    vanilla = baselines(fake_platform, {})[0]
    assert vanilla.set_threads is False and vanilla.environment() == {}


def test_graph_runtimes_get_no_openmp_binding_and_openmp_runtimes_do(fake_platform: Platform) -> None:
    # Binding the OpenMP pool pins the main thread, and ONNX Runtime's own pool inherits that one
    # core: measured 2.9x slower on mobilenet_v2 (8.58 vs 2.98 ms).
    chain = OpGraph("c", (conv(0, ()), conv(1, (0,))), "torch.export")
    ort, _ = guideline(fake_platform, chain, {"onnxruntime": None, "eager": None})
    assert ort.runtime == "onnxruntime" and ort.omp == {} and ort.memory_format == "contiguous"
    ts, why = guideline(fake_platform, chain, {"eager": None, "torchscript": None})
    assert ts.omp == {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"} and ts.memory_format == "channels_last"
    ov, _ = guideline(fake_platform, chain, {"openvino": None})
    assert ov.runtime == "openvino" and ov.allocator == "glibc"


def test_normalize_drops_what_a_runtime_ignores() -> None:
    from rooftune.runtimes import get_runtime
    from rooftune.tuning import RunConfig

    omp = {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}
    a = RunConfig(runtime="onnxruntime", intra_threads=2, inter_threads=2, memory_format="channels_last", omp=omp,
                  runtime_options={"execution_mode": "sequential", "hint": "LATENCY"})
    n = get_runtime("onnxruntime").normalize(a)
    assert n.omp == {} and n.memory_format == "contiguous" and n.inter_threads == 1
    assert n.runtime_options == {"execution_mode": "sequential"} and n.intra_threads == 2
    p = get_runtime("onnxruntime").normalize(RunConfig(runtime="onnxruntime", inter_threads=2,
                                                       runtime_options={"execution_mode": "parallel"}))
    assert p.inter_threads == 2
    e = get_runtime("eager").normalize(RunConfig(runtime="eager", inter_threads=2, memory_format="channels_last", omp=omp))
    assert e.omp == omp and e.memory_format == "channels_last" and e.inter_threads == 1
    vanilla = RunConfig(runtime="eager", set_threads=False)
    assert get_runtime("eager").normalize(vanilla) == vanilla


def test_search_asks_only_what_the_chosen_runtime_uses(fake_platform: Platform) -> None:
    import optuna

    from rooftune.runtimes import get_runtime
    from rooftune.tuning.space import search_space
    from rooftune.tuning.space import suggest as _suggest

    available = {n: get_runtime(n) for n in ("eager", "onnxruntime", "openvino")}
    space = search_space(fake_platform, available, ["fp32"])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = set()
    for _ in range(40):
        t = study.ask()
        cfg = _suggest(t, space)
        seen.add(cfg.runtime)
        assert get_runtime(cfg.runtime).normalize(cfg) == cfg
        if cfg.runtime != "eager":
            assert "bind" not in t.params and "memory_format" not in t.params and cfg.omp == {}
        else:
            assert "bind" in t.params
        study.tell(t, 1.0)
    assert seen == {"eager", "onnxruntime", "openvino"}


def conv3d(index: int, producers: tuple[int, ...]) -> OpNode:
    t = TensorMeta((1, 8, 4, 8, 8), "float32", 4)
    w = TensorMeta((8, 8, 3, 3, 3), "float32", 4)
    return OpNode(index, f"conv{index}", "aten.conv3d", "", "Conv3d", {"input": t, "weight": w}, (t,), producers)


def test_a_network_of_3d_convolutions_gets_openvino_and_others_keep_onnxruntime(fake_platform: Platform) -> None:
    from rooftune.tuning.guidelines import conv3d_share

    video = OpGraph("v", (conv3d(0, ()), relu(1, (0,)), conv3d(2, (1,)), conv(3, (2,))), "torch.export")
    image = OpGraph("c", (conv(0, ()), conv(1, (0,))), "torch.export")
    assert conv3d_share(image) == 0.0
    assert 0.9 < conv3d_share(video) < 1.0  # two 3-D convolutions of 3x the FLOPs of the 2-D one
    both = {"onnxruntime": None, "openvino": None, "eager": None}
    cfg, why = guideline(fake_platform, video, both)
    assert cfg.runtime == "openvino" and cfg.runtime_options["hint"] == "LATENCY"
    assert any("3-D convolutions carry" in w for w in why)
    assert guideline(fake_platform, image, both)[0].runtime == "onnxruntime"
    # without OpenVINO, the usual order
    assert guideline(fake_platform, video, {"onnxruntime": None, "eager": None})[0].runtime == "onnxruntime"


def test_the_openvino_from_onnx_seed_takes_the_guidelines_threads(fake_platform: Platform) -> None:
    from rooftune.runtimes import get_runtime
    from rooftune.tuning.guidelines import source_seeds

    available = {n: get_runtime(n) for n in ("eager", "onnxruntime", "openvino")}
    image = OpGraph("c", (conv(0, ()), conv(1, (0,))), "torch.export")
    guide, _ = guideline(fake_platform, image, available)
    (seed,) = source_seeds(guide, available)
    assert seed.runtime == "openvino" and seed.precision == "fp32" and seed.intra_threads == guide.intra_threads
    # 3x3 convolutions: the guideline asks for Winograd, and so does the seed
    assert guide.runtime_options["conv"] == "winograd" and seed.omp == {}
    assert seed.runtime_options == {"hint": "LATENCY", "streams": 1, "source": "onnx", "conv": "winograd"}
    from dataclasses import replace

    direct = replace(guide, runtime_options={k: v for k, v in guide.runtime_options.items() if k != "conv"})
    assert source_seeds(direct, available)[0].runtime_options == {"hint": "LATENCY", "streams": 1, "source": "onnx"}
    assert source_seeds(guide, available, "throughput")[0].runtime_options["hint"] == "THROUGHPUT"
    # an OpenVINO guideline (3-D convolutions) keeps its own options and reads ONNX
    video = OpGraph("v", (conv3d(0, ()), conv3d(1, (0,))), "torch.export")
    ov_guide, _ = guideline(fake_platform, video, available)
    assert source_seeds(ov_guide, available)[0].runtime_options == {**ov_guide.runtime_options, "source": "onnx"}
    # no seed without OpenVINO installed (a None entry stands for a runtime whose object is absent)
    assert source_seeds(guide, {"eager": None, "openvino": None}) == []
    assert source_seeds(guide, {"eager": None, "onnxruntime": None}) == []


def test_openvino_from_onnx_leaves_the_space_without_the_onnx_package(fake_platform: Platform,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import rooftune.runtimes.openvino_runtime as ovr
    from rooftune.runtimes import get_runtime
    from rooftune.tuning import RunConfig
    from rooftune.tuning.study import search_space

    available = {n: get_runtime(n) for n in ("eager", "openvino")}
    assert search_space(fake_platform, available, ["fp32"])["runtime_options"]["openvino"]["source"] == ["framework", "onnx"]
    monkeypatch.setattr(ovr, "missing", lambda p: f"{p} is not installed" if p == "onnx" else None)
    ov = get_runtime("openvino")
    assert "onnx is not installed" in ov.unsupported(RunConfig(runtime="openvino", runtime_options={"source": "onnx"}))
    assert ov.unsupported(RunConfig(runtime="openvino")) is None
    assert search_space(fake_platform, available, ["fp32"])["runtime_options"]["openvino"]["source"] == ["framework"]
    from rooftune.tuning.guidelines import source_seeds

    assert source_seeds(RunConfig(runtime="onnxruntime", intra_threads=2), available) == []  # nor the seed


def linear(index: int, producers: tuple[int, ...], features: int = 64) -> OpNode:
    x = TensorMeta((1, 16, features), "float32", 4)
    w = TensorMeta((features, features), "float32", 4)
    return OpNode(index, f"linear{index}", "aten.linear", "", "Linear", {"input": x, "weight": w}, (x,), producers)


def test_a_network_of_matrix_products_gets_openvino_reading_the_onnx_export(fake_platform: Platform,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import rooftune.runtimes.openvino_runtime as ovr
    from rooftune.costs import costs_of
    from rooftune.runtimes import get_runtime
    from rooftune.tuning.guidelines import product_share, source_seeds

    available = {n: get_runtime(n) for n in ("eager", "onnxruntime", "openvino")}
    mlp = OpGraph("m", (linear(0, ()), relu(1, (0,)), linear(2, (1,))), "torch.export")
    image = OpGraph("c", (conv(0, ()), conv(1, (0,))), "torch.export")
    mixed = OpGraph("x", (conv(0, ()), linear(1, (0,), 8)), "torch.export")
    assert product_share(costs_of(mlp)) == 1.0 and product_share(costs_of(image)) == 0.0
    assert product_share(costs_of(mixed)) < 0.5  # the 8x8 linear is small beside the conv
    cfg, why = guideline(fake_platform, mlp, available)
    assert (cfg.runtime, cfg.runtime_options) == ("openvino", {"hint": "LATENCY", "streams": 1, "source": "onnx"})
    assert any("matrix products carry 100%" in w for w in why)
    assert cfg.omp == {} and cfg.memory_format == "contiguous"
    assert source_seeds(cfg, available) == []  # the guideline already is the OpenVINO-from-ONNX seed
    assert guideline(fake_platform, mlp, available, objective="throughput")[0].runtime_options["hint"] == "THROUGHPUT"
    assert guideline(fake_platform, image, available)[0].runtime == "onnxruntime"
    assert guideline(fake_platform, mixed, available)[0].runtime == "onnxruntime"
    # OpenVINO cannot read ONNX here (the onnx package missing): ONNX Runtime, as before
    monkeypatch.setattr(ovr, "missing", lambda name: "no onnx" if name == "onnx" else None)
    assert guideline(fake_platform, mlp, available)[0].runtime == "onnxruntime"
    # no OpenVINO object to ask: ONNX Runtime
    assert guideline(fake_platform, mlp, {"onnxruntime": None, "openvino": None})[0].runtime == "onnxruntime"

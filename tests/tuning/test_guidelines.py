"""The guideline's inter-op width from the op graph, and the baselines of this machine."""

from __future__ import annotations

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
    cfg, why = guideline(fake_platform, OpGraph("b", branches, "torch.export"), {"eager": None, "torchscript": None})
    cores = max(1, fake_platform.usable_cores // max(1, fake_platform.logical_cores // fake_platform.physical_cores))
    assert cfg.inter_threads == min(cores, 2) and cfg.intra_threads == max(1, cores // cfg.inter_threads)
    assert cfg.runtime == "torchscript" and cfg.memory_format == "channels_last"
    assert any("average width 2.00" in w for w in why)
    names = [b.name for b in baselines(fake_platform, {"eager": None})]
    assert names == ["vanilla", "pytorch-launcher", "intel-recommended"]
    names = [b.name for b in baselines(fake_platform, {"eager": None, "onnxruntime": None, "openvino": None})]
    assert names[-2:] == ["onnxruntime-default", "openvino-latency"]
    vanilla = baselines(fake_platform, {})[0]
    assert vanilla.set_threads is False and vanilla.environment() == {}

"""Roofline placement and findings on hand-made roofs: exact bounds, efficiencies and reasons."""

from __future__ import annotations

import pytest

from rooftune.analysis import Roofs, describe, place, reason
from rooftune.costs import OpCost
from rooftune.platform import Platform
from rooftune.workload import OpNode, TensorMeta
from tests.conftest import make_ceilings

ROOFS = Roofs(
    threads=2,
    peak={"fp32": 100e9, "gemm_bf16": 400e9},
    bandwidth={"L1": 1000e9, "L2": 400e9, "L3": 200e9, "DRAM": 50e9},
    capacity={"L1": 64_000, "L2": 1_000_000, "L3": 32_000_000},
    dispatch_s=2e-6,
)


def f32(*shape: int) -> TensorMeta:
    return TensorMeta(tuple(shape), "float32", 4)


def test_compute_bound_op() -> None:
    # 1 GFLOP on 10 MB: AI 100 FLOP/B, working set in L3 -> roof min(100G, 100 * 200G) = 100 GFLOP/s.
    p = place(OpCost("conv", 1e9, 10e6, "conv"), 0.02, "float32", ROOFS)
    assert p.level == "L3"
    assert p.roof_flops == 100e9
    assert p.compute_s == pytest.approx(0.01) and p.memory_s == pytest.approx(5e-5)
    assert p.bound == "compute"
    assert p.efficiency == pytest.approx(0.5)
    assert p.lower_bound_s == pytest.approx(0.01)
    assert p.headroom_s == pytest.approx(0.01)


def test_memory_bound_op_uses_the_level_its_working_set_fits() -> None:
    # 0.2 MFLOP on 800 kB: fits L2 (1 MB): memory time 2 us, compute 2 us -> tie goes to compute;
    # make it clearly memory-bound with fewer FLOPs.
    p = place(OpCost("elementwise", 1e5, 800_000, "elementwise"), 8e-6, "float32", ROOFS)
    assert p.level == "L2"
    assert p.memory_s == pytest.approx(2e-6)
    assert p.bound == "memory-L2"
    assert p.roof_flops == pytest.approx(1e5 / 800_000 * 400e9)
    assert p.efficiency == pytest.approx(0.25)
    assert p.headroom_s == pytest.approx(6e-6)


def test_beyond_the_last_cache_is_dram() -> None:
    p = place(OpCost("copy", 0.0, 100e6, "concat"), 4e-3, "float32", ROOFS)
    assert p.level == "DRAM" and p.bound == "memory-DRAM"
    assert p.memory_s == pytest.approx(2e-3) and p.efficiency == pytest.approx(0.5)
    assert p.roof_flops is None  # no FLOPs: no FLOP/s roof, bandwidth alone bounds it


def test_overhead_bound_within_twice_the_dispatch_floor() -> None:
    p = place(OpCost("elementwise", 10.0, 80.0, "elementwise"), 3.9e-6, "float32", ROOFS)
    assert p.bound == "overhead"
    assert p.lower_bound_s == 2e-6  # the floor, not the tiny roofline time
    assert p.headroom_s == pytest.approx(1.9e-6)


def test_work_below_one_dispatch_is_overhead_bound_whatever_its_time() -> None:
    """A 16->10 linear on 2 rows: its FLOPs and bytes take the hardware nanoseconds, the dispatch
    floor binds its lower bound, and that names its bound even at ten times the floor."""
    p = place(OpCost("linear", 640.0, 736.0, "linear"), 20e-6, "float32", ROOFS)
    assert p.bound == "overhead" and p.lower_bound_s == 2e-6 and p.headroom_s == pytest.approx(18e-6)
    assert p.efficiency == pytest.approx(640.0 / 100e9 / 20e-6)
    # just above one dispatch's work, the hardware's bound again
    assert place(OpCost("elementwise", 1e3, 2.1e6, "elementwise"), 20e-6, "float32", ROOFS).bound == "memory-L3"


def test_unknown_op_has_no_efficiency_and_only_a_floor() -> None:
    p = place(OpCost("unknown", None, None, "no cost formula for aten.x"), 1e-3, "float32", ROOFS)
    assert p.bound == "unknown" and p.efficiency is None and p.headroom_s is None
    assert p.lower_bound_s == 2e-6


def test_bf16_ops_use_the_native_gemm_roof_and_fp16_falls_back_to_fp32() -> None:
    assert ROOFS.peak_for("bfloat16") == ("gemm_bf16", 400e9)
    assert ROOFS.peak_for("float16") == ("fp32", 100e9)
    assert ROOFS.peak_for("int8") == ("fp32", 100e9)  # no int8 roof measured


def test_roofs_from_ceilings_per_thread(fake_platform: Platform) -> None:
    c = make_ceilings(fake_platform)
    top = c.max_threads
    r = Roofs.from_ceilings(c, top)
    assert r.peak["fp32"] == 100e9 * top and r.notes == ()
    assert r.dispatch_s == 2e-6 and list(r.bandwidth) == ["L1", "L2", "L3", "DRAM"]
    if top > 1:
        r1 = Roofs.from_ceilings(c, 1)
        assert r1.peak["fp32"] == 100e9
        assert any("bandwidths measured on" in n for n in r1.notes)


def test_a_thread_count_not_measured_scales_from_the_nearest_below(fake_platform: Platform) -> None:
    from dataclasses import replace

    c = make_ceilings(fake_platform)
    per = {"fp32": {1: 100e9, 2: 200e9, 4: 300e9, 8: 700e9}}  # as 1, 2, 4, 8 on a large machine
    c = replace(c, threads=(1, 2, 4, 8), peak_flops_per_thread=per, peak_flops={"fp32": 700e9})
    r = Roofs.from_ceilings(c, 3)
    assert r.peak["fp32"] == 300e9 and "fp32 peak on 3 threads scaled from its 2-thread value" in r.notes  # capped by 4
    assert Roofs.from_ceilings(c, 6).peak["fp32"] == pytest.approx(450e9)  # 300 x 6/4, below the 8-thread 700


def conv_node(c: int, k: int, groups: int, kernel: int = 3, stride: int = 1) -> OpNode:
    return OpNode(
        0, "conv2d", "aten.conv2d", "features.3", "Conv2d",
        {"input": f32(1, c, 56, 56), "weight": f32(k, c // groups, kernel, kernel), "bias": None,
         "stride": [stride, stride], "groups": groups},
        (f32(1, k, 56 // stride, 56 // stride),),
    )


def test_reasons_name_the_op_where_it_sits_and_what_to_try() -> None:
    dw = conv_node(32, 32, 32)
    assert describe(dw, "conv") == "depthwise 3x3 conv"
    assert reason(dw, "conv", "memory-L2", 0.18, "L2") == (
        "depthwise 3x3 conv, memory-bound in L2 at 18% of roof: try channels_last (oneDNN's depthwise kernels want NHWC)"
    )
    full = conv_node(64, 64, 1, stride=2)
    assert reason(full, "conv", "compute", 0.3, "L2").startswith("3x3 conv stride 2, compute-bound at 30% of roof: try another")
    assert "near its roof" in reason(full, "conv", "compute", 0.9, "L2")
    gemv = OpNode(1, "linear", "aten.linear", "fc", "Linear", {"input": f32(1, 2048), "weight": f32(1000, 2048)}, (f32(1, 1000),))
    assert describe(gemv, "linear") == "linear 1x2048->1000"
    assert "matrix-vector" in reason(gemv, "linear", "memory-DRAM", 0.6, "DRAM")
    bn = OpNode(2, "bn", "aten.batch_norm", "bn1", "BatchNorm2d", {"input": f32(1, 8, 4, 4)}, (f32(1, 8, 4, 4),))
    assert "fold it into the preceding conv" in reason(bn, "norm", "memory-L1", 0.1, "L1")
    assert "dispatch-bound" in reason(bn, "norm", "overhead", 0.01, "L1")
    assert "no cost formula" in reason(bn, "unknown", "unknown", None, "")
    lstm = OpNode(3, "lstm", "aten.lstm", "rnn", "LSTM", {"input": f32(1, 64, 128)}, (f32(1, 64, 512),))
    assert "each step reads the recurrent weights again" in reason(lstm, "rnn", "memory-L3", 0.2, "L3")
    assert "widens each step's GEMM" in reason(lstm, "rnn", "compute", 0.2, "L2")
    assert "tune --int8" in reason(lstm, "rnn", "memory-L3", 0.2, "L3")
    gru = OpNode(4, "gru", "aten.gru", "rnn", "GRU", {"input": f32(1, 64, 128)}, (f32(1, 64, 512),))
    advice = reason(gru, "rnn", "memory-L3", 0.2, "L3")  # no int8 GRU to offer: nothing claimed
    assert "each step reads the recurrent weights again" in advice and "int8" not in advice


def test_a_1d_3d_or_transposed_convolution_is_not_sent_to_select_or_channels_last() -> None:
    """rooftune select rewrites 2-D convolutions and channels_last is a 4-D layout: a 1-D, 3-D or
    transposed convolution is named as such and advised otherwise."""
    c1 = OpNode(0, "conv1d", "aten.conv1d", "0", "Conv1d",
                {"input": f32(1, 1, 16000), "weight": f32(64, 1, 80), "stride": [4], "groups": 1}, (f32(1, 64, 3981),))
    assert describe(c1, "conv") == "80-tap conv1d stride 4"
    low = reason(c1, "conv", "compute", 0.29, "L2", {})
    assert low.endswith("try a graph runtime's kernels (rooftune tune: ONNX Runtime, OpenVINO)")
    assert "select" not in low and "channels_last" not in reason(c1, "conv", "memory-L2", 0.2, "L2")
    c3 = OpNode(1, "conv3d", "aten.conv3d", "stem", "Conv3d",
                {"input": f32(1, 3, 16, 112, 112), "weight": f32(64, 3, 3, 7, 7), "stride": [1, 2, 2]},
                (f32(1, 64, 16, 56, 56),))
    assert describe(c3, "conv") == "3x7x7 conv3d" and "near its roof" in reason(c3, "conv", "compute", 0.8, "L2")
    up = OpNode(2, "conv_transpose2d", "aten.conv_transpose2d", "up", "ConvTranspose2d",
                {"input": f32(1, 64, 48, 48), "weight": f32(64, 32, 2, 2), "stride": [2, 2]}, (f32(1, 32, 96, 96),))
    assert describe(up, "conv") == "2x2 transposed conv stride 2"  # select has no primitive for it either
    assert reason(up, "conv", "compute", 0.17, "L2", {}).endswith("try a graph runtime's kernels (rooftune tune: ONNX Runtime, OpenVINO)")
    assert "rooftune select" in reason(conv_node(64, 64, 1), "conv", "compute", 0.3, "L2")  # 2-D as before


def test_lower_precision_advice_follows_the_machines_measured_gemm_roofs() -> None:
    """bf16 and int8 are offered for compute-bound products with the ratio this machine's GEMM roofs
    measured, and not where they ran no faster than fp32 (a CPU without native bf16 emulates it)."""
    from rooftune.analysis.findings import lower_precisions

    zen4 = lower_precisions({"fp32": 216e9, "gemm_fp32": 199e9, "gemm_bf16": 438e9, "gemm_int8": 890e9})
    assert zen4 == pytest.approx({"bf16": 2.2, "int8": 4.47}, rel=0.01)
    avx2 = lower_precisions({"gemm_fp32": 100e9, "gemm_bf16": 40e9, "gemm_int8": 150e9})
    assert set(avx2) == {"int8"}
    assert lower_precisions({"gemm_fp32": 100e9, "gemm_bf16": 110e9}) == {}
    assert lower_precisions({"fp32": 100e9}) == {}  # no GEMM roofs measured: nothing claimed
    lin = OpNode(1, "linear", "aten.linear", "fc1", "Linear", {"input": f32(128, 256), "weight": f32(1024, 256)},
                 (f32(128, 1024),))
    assert reason(lin, "linear", "compute", 0.45, "L2", zen4) == (
        "linear 128x256->1024, compute-bound at 45% of roof: try bf16 (its GEMM 2.2x fp32's here: tune --bf16) "
        "or int8 (its GEMM 4.5x fp32's here: tune --int8), or another runtime's GEMM")
    only_int8 = reason(lin, "linear", "compute", 0.45, "L2", avx2)
    assert "int8 (its GEMM 1.5x" in only_int8 and "bf16" not in only_int8
    none = reason(lin, "linear", "compute", 0.45, "L2", {})
    assert none.endswith("try another runtime's GEMM (no lower precision's GEMM measured faster than fp32's here)")
    assert "bf16/int8 where native" in reason(lin, "linear", "compute", 0.45, "L2")  # roofs unknown
    full = conv_node(64, 64, 1)
    assert reason(full, "conv", "compute", 0.9, "L2", {}).endswith(
        "near its roof, and no lower precision's GEMM measured faster than fp32's here")
    assert "only a lower precision is faster, bf16 (its GEMM 2.2x" in reason(full, "conv", "compute", 0.9, "L2", zen4)
    attn = OpNode(2, "sdpa", "aten.scaled_dot_product_attention", "attn", "MultiheadAttention",
                  {"query": f32(1, 4, 128, 64)}, (f32(1, 4, 128, 64),))
    assert reason(attn, "attention", "compute", 0.3, "L2", avx2).endswith("(scaled_dot_product_attention)")
    assert reason(attn, "attention", "compute", 0.3, "L2", zen4).endswith(
        "and try bf16 (its GEMM 2.2x fp32's here: tune --bf16)")


def test_an_op_without_work_is_overhead_whatever_its_time() -> None:
    p = place(OpCost("view", 0.0, 0.0, "view"), 50e-6, "float32", ROOFS)
    assert p.bound == "overhead" and p.efficiency == 0.0
    assert p.headroom_s == pytest.approx(48e-6)
    node = OpNode(0, "transpose", "aten.transpose", "attn", "MultiheadAttention", {"self": f32(4, 4)}, (f32(4, 4),))
    assert "a view (no data moved)" in reason(node, "view", "overhead", 0.0, "L1")

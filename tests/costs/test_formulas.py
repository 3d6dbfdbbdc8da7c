"""Cost formulas, each checked against an independent computation: the recurrent formula on captured
LSTM/GRU ops, and hand-built op nodes for every other kind."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from rooftune.costs import OpCost, cost_of, costs_of
from rooftune.workload import OpNode, TensorMeta, capture, capture_hooks, load_workload

F32 = 4


def f32(*shape: int) -> TensorMeta:
    return TensorMeta(tuple(shape), "float32", F32)


def node(target: str, args: dict[str, Any], *outputs: TensorMeta) -> OpNode:
    return OpNode(0, target.rsplit(".", 1)[-1], target, "", "", args, tuple(outputs))


def numel(*shape: int) -> int:
    return math.prod(shape)


# --------------------------------------------------------------------------------------------
# recurrent ops, captured from the built-ins

GATES = {"lstm": 4, "gru": 3}
POINTWISE = {"lstm": 13, "gru": 10}
INPUT_SIZE, HIDDEN, SEQ = 7, 6, 5


def rnn_flops(cell: str, *, n: int, t: int, i: int, h: int, layers: int, bidirectional: bool) -> int:
    g, p = GATES[cell], POINTWISE[cell]
    d = 2 if bidirectional else 1
    total = 0
    for layer in range(layers):
        i_l = i if layer == 0 else h * d
        total += d * t * (2 * n * g * h * (i_l + h) + 2 * n * g * h + p * n * h)
    return total


def rnn_bytes(cell: str, *, n: int, t: int, i: int, h: int, layers: int, bidirectional: bool, with_hx: bool) -> int:
    g = GATES[cell]
    d = 2 if bidirectional else 1
    states = 2 if cell == "lstm" else 1  # (h, c) or h
    params = 0
    for layer in range(layers):
        i_l = i if layer == 0 else h * d
        params += d * (g * h * i_l + g * h * h + 2 * g * h)
    inputs = n * t * i + params + (states * layers * d * n * h if with_hx else 0)
    outputs = n * t * d * h + states * layers * d * n * h
    return F32 * (inputs + outputs)


RNN_CONFIGS = [
    (cell, layers, bidi, batch)
    for cell, (layers, bidi, batch) in itertools.chain(
        (("lstm", c) for c in itertools.product([1, 3], [False, True], [1, 4])),
        (("gru", c) for c in itertools.product([1, 2], [False, True], [1, 3])),
    )
]


@pytest.mark.filterwarnings("ignore:The tensor attributes:UserWarning")
@pytest.mark.parametrize("cell,layers,bidirectional,batch", RNN_CONFIGS)
def test_recurrent_formula(cell: str, layers: int, bidirectional: bool, batch: int) -> None:
    opts = {"input_size": INPUT_SIZE, "hidden": HIDDEN, "seq_len": SEQ, "layers": layers, "bidirectional": bidirectional}
    wl = load_workload(cell, options=opts, batch=batch)
    dims = dict(n=batch, t=SEQ, i=INPUT_SIZE, h=HIDDEN, layers=layers, bidirectional=bidirectional)
    expected_flops = rnn_flops(cell, **dims)

    exported = capture(wl)
    assert exported.capture == "torch.export"
    rnn_ops = [op for op in exported.ops if op.target == f"aten.{cell}"]
    assert len(rnn_ops) == 1
    op = rnn_ops[0]
    cost = cost_of(op)
    assert cost.kind == "rnn"
    assert cost.formula == "recurrent"
    assert cost.flops == expected_flops
    # export passes the zero initial state(s) explicitly: they are inputs too
    assert cost.bytes == rnn_bytes(cell, **dims, with_hx=True)
    assert cost.bytes == sum(t.nbytes for t in op.tensors()) + sum(t.nbytes for t in op.outputs)

    assert cost.traffic == rnn_traffic(cell, **dims, with_hx=True) and cost.working_set is not None
    hooked = capture_hooks(wl, "forced")
    assert [o.target for o in hooked.ops] == [f"aten.{cell}"]
    hcost = cost_of(hooked.ops[0])
    assert hcost.kind == "rnn"
    assert hcost.flops == expected_flops
    assert hcost.bytes == rnn_bytes(cell, **dims, with_hx=False)


def rnn_traffic(cell: str, *, n: int, t: int, i: int, h: int, layers: int, bidirectional: bool, with_hx: bool) -> int:
    """What the steps move: the compulsory bytes, and each layer's recurrent weights (G*H x H per
    direction) once more for every step after the first."""
    g, d = GATES[cell], 2 if bidirectional else 1
    return rnn_bytes(cell, n=n, t=t, i=i, h=h, layers=layers, bidirectional=bidirectional, with_hx=with_hx) \
        + F32 * layers * d * (t - 1) * g * h * h


@pytest.mark.filterwarnings("ignore:The tensor attributes:UserWarning")
def test_a_recurrent_op_moves_its_recurrent_weights_every_step() -> None:
    """Step t+1 needs step t's state: the recurrent weights are read once per step, from the level
    that holds one layer's; placed there, a batch-1 LSTM whose compulsory bytes make it look
    compute-bound is memory-bound."""
    from rooftune.analysis import Roofs, place

    for layers, bidirectional in ((2, False), (1, True)):
        wl = load_workload("lstm", options={"input_size": INPUT_SIZE, "hidden": HIDDEN, "seq_len": SEQ,
                                            "layers": layers, "bidirectional": bidirectional})
        [op] = [o for o in capture(wl).ops if o.target == "aten.lstm"]
        c = cost_of(op)
        dims = dict(n=1, t=SEQ, i=INPUT_SIZE, h=HIDDEN, layers=layers, bidirectional=bidirectional)
        assert c.traffic == rnn_traffic("lstm", **dims, with_hx=True) > c.bytes
        assert c.working_set == F32 * (2 if bidirectional else 1) * 4 * HIDDEN * HIDDEN
    # the suite's LSTM (2 layers, hidden 512, 64 steps, input 128) on roofs like a 2-core Zen 4's
    roofs = Roofs(threads=2, peak={"fp32": 229e9}, bandwidth={"L1": 528e9, "L2": 211e9, "L3": 179e9, "DRAM": 38e9},
                  capacity={"L1": 64 * 1024, "L2": 2 << 20, "L3": 32 << 20}, dispatch_s=2e-6)
    dims = dict(n=1, t=64, i=128, h=512, layers=2, bidirectional=False)
    flops, compulsory = rnn_flops("lstm", **dims), rnn_bytes("lstm", **dims, with_hx=True)
    moved = rnn_traffic("lstm", **dims, with_hx=True)
    assert compulsory < 14e6 and moved > 540e6  # 13 MB once against 4 MiB per step and layer
    as_before = place(OpCost("rnn", flops, compulsory, "recurrent"), 18.6e-3, "float32", roofs)
    assert as_before.bound == "compute" and as_before.level == "L3"
    now = place(OpCost("rnn", flops, compulsory, "recurrent", moved, 4 * 4 * 512 * 512), 18.6e-3, "float32", roofs)
    assert now.bound == "memory-L3" and now.level == "L3"
    assert now.lower_bound_s == pytest.approx(moved / 179e9) and now.lower_bound_s > as_before.lower_bound_s


def test_recurrent_formula_worked_example() -> None:
    """One layer, one direction, N=1, T=1, I=H=1: LSTM 2*4*2 + 2*4 + 13 = 37; GRU 2*3*2 + 2*3 + 10 = 28."""
    assert rnn_flops("lstm", n=1, t=1, i=1, h=1, layers=1, bidirectional=False) == 37
    assert rnn_flops("gru", n=1, t=1, i=1, h=1, layers=1, bidirectional=False) == 28


def test_recurrent_without_params_is_unreadable() -> None:
    op = node("aten.lstm", {"input": f32(1, 5, 7), "params": [], "num_layers": 1}, f32(1, 5, 6))
    c = cost_of(op)
    assert c.kind == "rnn"
    assert c.flops is None
    assert c.bytes is None


# --------------------------------------------------------------------------------------------
# convolution


def conv_node() -> OpNode:
    return node(
        "aten.conv2d",
        {"input": f32(2, 8, 10, 10), "weight": f32(16, 4, 3, 3), "bias": f32(16), "stride": [1, 1],
         "padding": [0, 0], "dilation": [1, 1], "groups": 2},
        f32(2, 16, 8, 8),
    )


def test_conv_grouped() -> None:
    c = cost_of(conv_node())
    assert c.kind == "conv"
    assert c.formula == "conv"
    assert c.flops == 2 * 2 * 16 * 8 * 8 * (8 / 2) * 3 * 3
    assert c.bytes == F32 * (numel(2, 8, 10, 10) + numel(16, 4, 3, 3) + 16 + numel(2, 16, 8, 8))


def test_conv_grouped_matches_flop_counter() -> None:
    conv = torch.nn.Conv2d(8, 16, 3, groups=2)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        y = conv(torch.zeros(2, 8, 10, 10))
    assert tuple(y.shape) == (2, 16, 8, 8)
    assert cost_of(conv_node()).flops == counter.get_total_flops()


def transposed_node(target: str) -> OpNode:
    args: dict[str, Any] = {
        "input": f32(2, 8, 5, 5), "weight": f32(8, 8, 3, 3), "bias": f32(16), "stride": [2, 2],
        "padding": [0, 0], "output_padding": [0, 0], "groups": 2, "dilation": [1, 1],
    }
    if target == "aten.convolution":
        args["transposed"] = True
    return node(target, args, f32(2, 16, 11, 11))


@pytest.mark.parametrize("target", ["aten.conv_transpose2d", "aten.convolution"])
def test_conv_transposed_counts_input_spatial(target: str) -> None:
    # N=2, C_in=8, H_in=W_in=5 -> C_out=16, groups 2, 3x3, stride 2: output 11x11
    c = cost_of(transposed_node(target))
    assert c.kind == "conv"
    assert c.flops == 2 * 2 * 8 * 5 * 5 * (16 / 2) * 3 * 3
    assert c.bytes == F32 * (numel(2, 8, 5, 5) + numel(8, 8, 3, 3) + 16 + numel(2, 16, 11, 11))


def test_conv_transposed_matches_flop_counter() -> None:
    conv = torch.nn.ConvTranspose2d(8, 16, 3, stride=2, groups=2)
    assert tuple(conv.weight.shape) == (8, 8, 3, 3)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        y = conv(torch.zeros(2, 8, 5, 5))
    assert tuple(y.shape) == (2, 16, 11, 11)
    assert cost_of(transposed_node("aten.conv_transpose2d")).flops == counter.get_total_flops()


def test_conv_without_weight_is_unreadable_not_an_exception() -> None:
    op = node("aten.conv2d", {"input": f32(1, 3, 8, 8), "weight": None, "bias": None}, f32(1, 4, 6, 6))
    c = cost_of(op)
    assert c.kind == "conv"
    assert c.flops is None
    assert c.bytes is None
    assert "weight" in c.formula
    assert c.formula.startswith("aten.conv2d: ")
    assert not c.known
    assert c.intensity is None


def test_op_without_tensors_is_unreadable() -> None:
    c = cost_of(node("aten.relu", {}))
    assert c.kind == "elementwise"
    assert c.flops is None


# --------------------------------------------------------------------------------------------
# linear, matrix products, attention


def test_linear_3d_input_bias_not_counted() -> None:
    with_bias = node("aten.linear", {"input": f32(2, 5, 16), "weight": f32(32, 16), "bias": f32(32)}, f32(2, 5, 32))
    without = node("aten.linear", {"input": f32(2, 5, 16), "weight": f32(32, 16), "bias": None}, f32(2, 5, 32))
    c, c0 = cost_of(with_bias), cost_of(without)
    assert c.kind == "linear"
    assert c.flops == 2 * 10 * 32 * 16
    assert c0.flops == c.flops
    assert c.bytes == F32 * (2 * 5 * 16 + 32 * 16 + 32 + 2 * 5 * 32)
    assert c.bytes - c0.bytes == F32 * 32


def test_linear_matches_flop_counter() -> None:
    lin = torch.nn.Linear(16, 32)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        lin(torch.zeros(2, 5, 16))
    assert counter.get_total_flops() == 2 * 10 * 32 * 16


@pytest.mark.parametrize(
    "target,args,out,flops",
    [
        ("aten.mm", {"self": f32(4, 8), "mat2": f32(8, 6)}, f32(4, 6), 2 * 4 * 6 * 8),
        ("aten.bmm", {"self": f32(3, 4, 8), "mat2": f32(3, 8, 6)}, f32(3, 4, 6), 2 * 3 * 4 * 6 * 8),
        ("aten.matmul", {"self": f32(2, 3, 4, 8), "other": f32(8, 6)}, f32(2, 3, 4, 6), 2 * 2 * 3 * 4 * 6 * 8),
        # addmm: "self" is the bias; K comes from mat1
        ("aten.addmm", {"self": f32(6), "mat1": f32(4, 8), "mat2": f32(8, 6)}, f32(4, 6), 2 * 4 * 6 * 8),
        ("aten.baddbmm", {"self": f32(3, 4, 6), "batch1": f32(3, 4, 8), "batch2": f32(3, 8, 6)}, f32(3, 4, 6), 2 * 3 * 4 * 6 * 8),
        ("aten.mv", {"self": f32(4, 8), "vec": f32(8)}, f32(4), 2 * 4 * 8),
    ],
)
def test_matrix_products(target: str, args: dict[str, Any], out: TensorMeta, flops: int) -> None:
    c = cost_of(node(target, args, out))
    assert c.kind == "matmul"
    assert c.flops == flops
    assert c.bytes == sum(t.nbytes for t in args.values()) + out.nbytes


def test_scaled_dot_product_attention() -> None:
    q, k, v = f32(2, 4, 10, 8), f32(2, 4, 12, 8), f32(2, 4, 12, 16)
    out = f32(2, 4, 10, 16)
    c = cost_of(node("aten.scaled_dot_product_attention", {"query": q, "key": k, "value": v, "attn_mask": None}, out))
    assert c.kind == "attention"
    assert c.flops == 2 * 2 * 4 * 10 * 12 * 8 + 2 * 2 * 4 * 10 * 12 * 16
    assert c.bytes == q.nbytes + k.nbytes + v.nbytes + out.nbytes


def test_attention_missing_value_is_unreadable() -> None:
    c = cost_of(node("aten.scaled_dot_product_attention", {"query": f32(1, 2, 3), "key": f32(1, 2, 3)}, f32(1, 2, 3)))
    assert c.kind == "attention"
    assert c.flops is None


def mha_node(q: TensorMeta, batch_first: bool) -> OpNode:
    args = {"query": q, "key": q, "value": q, "embed_dim": 16, "num_heads": 2, "batch_first": batch_first}
    return node("nn.MultiheadAttention", args, q)


@pytest.mark.parametrize("q,batch_first", [(f32(2, 4, 16), True), (f32(4, 2, 16), False)])
def test_multihead_attention_batched(q: TensorMeta, batch_first: bool) -> None:
    # N=2, L=S=4, E=16: four E x E projections on 8 tokens + Q K^T and P V
    c = cost_of(mha_node(q, batch_first))
    assert c.kind == "attention"
    assert c.flops == 2 * 16 * 16 * (2 * 8 + 2 * 8) + 4 * 2 * 4 * 4 * 16
    weights = F32 * (4 * 16 * 16 + 4 * 16)
    assert c.bytes == 4 * q.nbytes + weights  # query, key, value, output + the layer's weights


def test_multihead_attention_unbatched_ignores_batch_first() -> None:
    # unbatched (L=6, E=16): nn.MultiheadAttention ignores batch_first for 2-D inputs
    expected = 2 * 16 * 16 * (2 * 6 + 2 * 6) + 4 * 1 * 6 * 6 * 16
    assert cost_of(mha_node(f32(6, 16), False)).flops == expected
    assert cost_of(mha_node(f32(6, 16), True)).flops == expected


# --------------------------------------------------------------------------------------------
# memory-bound kinds


def test_relu_inplace_on_1000_elements() -> None:
    c = cost_of(node("aten.relu_", {"self": f32(1000)}, f32(1000)))
    assert c.kind == "elementwise"
    assert c.flops == 1000
    assert c.bytes == 8000  # read once, written once


def test_binary_elementwise_counts_both_inputs() -> None:
    c = cost_of(node("aten.add", {"self": f32(10, 10), "other": f32(10, 10), "alpha": 1}, f32(10, 10)))
    assert c.flops == 100
    assert c.bytes == 3 * 100 * F32


def test_batch_norm_two_per_element() -> None:
    x = f32(2, 4, 5, 5)
    stats = {k: f32(4) for k in ("weight", "bias", "running_mean", "running_var")}
    c = cost_of(node("aten.batch_norm", {"input": x, **stats, "training": False}, f32(2, 4, 5, 5)))
    assert c.kind == "norm"
    assert c.flops == 2 * 200
    assert c.bytes == F32 * (200 + 4 * 4 + 200)


def test_softmax_five_per_element() -> None:
    c = cost_of(node("aten.softmax", {"self": f32(3, 7), "dim": -1}, f32(3, 7)))
    assert c.kind == "softmax"
    assert c.flops == 5 * 21
    assert c.bytes == F32 * 42


def test_max_pool2d_window_per_output() -> None:
    c = cost_of(node("aten.max_pool2d", {"self": f32(1, 4, 11, 11), "kernel_size": [3, 3], "stride": [2, 2]}, f32(1, 4, 5, 5)))
    assert c.kind == "pool"
    assert c.flops == 100 * 9
    assert c.bytes == F32 * (4 * 121 + 100)


def test_max_pool2d_int_kernel() -> None:
    c = cost_of(node("aten.max_pool2d", {"input": f32(1, 4, 11, 11), "kernel_size": 3}, f32(1, 4, 5, 5)))
    assert c.flops == 100 * 9


def test_adaptive_pool_per_input_element() -> None:
    c = cost_of(node("aten.adaptive_avg_pool2d", {"self": f32(1, 8, 7, 7), "output_size": [1, 1]}, f32(1, 8, 1, 1)))
    assert c.kind == "pool"
    assert c.flops == 8 * 49


def test_cat_moves_bytes_only() -> None:
    a, b, out = f32(2, 3), f32(2, 5), f32(2, 8)
    c = cost_of(node("aten.cat", {"tensors": [a, b], "dim": 1}, out))
    assert c.kind == "concat"
    assert c.flops == 0
    assert c.bytes == F32 * (6 + 10 + 16)


@pytest.mark.parametrize("target", ["aten.roll", "aten.flip", "aten.reflection_pad2d", "aten.pixel_shuffle",
                                    "aten.upsample_nearest2d"])
def test_data_movement_reads_and_writes_once(target: str) -> None:
    c = cost_of(node(target, {"self": f32(1, 8, 6, 6)}, f32(1, 8, 6, 6)))
    assert (c.kind, c.flops, c.bytes) == ("copy", 0, 2 * F32 * 288)


def test_a_gather_moves_what_it_gathers_not_its_whole_source() -> None:
    """A window attention's relative position bias: a 169x3 table read at 2401 positions."""
    idx = TensorMeta((2401,), "int64", 8)
    c = cost_of(node("aten.index", {"self": f32(169, 3), "indices": [idx]}, f32(2401, 3)))
    assert (c.kind, c.flops, c.bytes) == ("copy", 0, 8 * 2401 + 2 * F32 * 2401 * 3)
    sel = cost_of(node("aten.index_select", {"self": f32(1000, 64), "dim": 0, "index": TensorMeta((10,), "int64", 8)},
                       f32(10, 64)))
    assert sel.bytes == 8 * 10 + 2 * F32 * 640


@pytest.mark.parametrize(("target", "taps"), [("aten.upsample_bilinear2d", 4), ("aten.upsample_bicubic2d", 16)])
def test_an_interpolation_weighs_its_taps_per_output(target: str, taps: int) -> None:
    c = cost_of(node(target, {"self": f32(1, 21, 28, 28), "output_size": [224, 224]}, f32(1, 21, 224, 224)))
    assert c.kind == "elementwise" and c.flops == 2 * taps * 21 * 224 * 224
    assert c.bytes == F32 * 21 * (28 * 28 + 224 * 224)


@pytest.mark.parametrize("target", ["aten.view", "aten.flatten", "aten.transpose", "aten.dropout", "aten.reshape"])
def test_view_ops_cost_nothing(target: str) -> None:
    c = cost_of(node(target, {"self": f32(4, 6)}, f32(6, 4)))
    assert c.kind == "view"
    assert c.flops == 0
    assert c.bytes == 0
    assert c.intensity is None


def test_fill_writes_its_output() -> None:
    c = cost_of(node("aten.zeros", {"size": [2, 3]}, f32(2, 3)))
    assert c.kind == "fill"
    assert (c.flops, c.bytes) == (0, 24)


def test_unknown_op() -> None:
    c = cost_of(node("aten.some_new_op", {"self": f32(10)}, f32(10)))
    assert c.kind == "unknown"
    assert c.flops is None
    assert c.bytes is None
    assert "no cost formula" in c.formula
    assert "aten.some_new_op" in c.formula
    assert not c.known


def test_costs_of_keeps_op_order() -> None:
    from rooftune.workload import OpGraph

    ops = (
        node("aten.relu", {"self": f32(10)}, f32(10)),
        node("aten.view", {"self": f32(10)}, f32(2, 5)),
        node("aten.mystery", {}, f32(1)),
    )
    costs = costs_of(OpGraph("w", ops, "torch.export"))
    assert [c.kind for c in costs] == ["elementwise", "view", "unknown"]


# --------------------------------------------------------------------------------------------
# OpCost


def test_intensity_is_flops_per_byte() -> None:
    c = OpCost("conv", 100.0, 40.0, "conv")
    assert c.known
    assert c.intensity == 2.5
    assert isinstance(c.intensity, float)


def test_intensity_of_measured_op() -> None:
    c = cost_of(conv_node())
    assert c.intensity == c.flops / c.bytes  # type: ignore[operator]


def test_intensity_unknown_is_none() -> None:
    assert OpCost("unknown", None, None, "no cost formula for x").intensity is None
    assert OpCost("conv", 10.0, None, "x").intensity is None
    assert OpCost("conv", None, 10.0, "x").intensity is None


def test_intensity_zero_flops() -> None:
    assert OpCost("concat", 0.0, 64.0, "concat").intensity == 0.0


def test_an_attention_masks_comparison_and_fill_are_elementwise() -> None:
    """``mask == 0`` (a bool output, one byte an element) and ``masked_fill_`` count one op an
    element and the bytes of what they read and write, where they had no formula."""
    mask = TensorMeta((1, 128), "int64", 8)
    eq = cost_of(node("aten.eq", {"self": mask}, TensorMeta((1, 128), "bool", 1)))
    assert (eq.kind, eq.flops, eq.bytes) == ("elementwise", 128, 128 * 8 + 128)
    scores = f32(1, 4, 128, 128)
    fill = cost_of(node("aten.masked_fill_", {"self": scores, "mask": TensorMeta((1, 1, 1, 128), "bool", 1)}, scores))
    assert (fill.kind, fill.flops) == ("elementwise", numel(1, 4, 128, 128))
    assert fill.bytes == 2 * 4 * numel(1, 4, 128, 128) + 128


@pytest.mark.parametrize(("equation", "shapes"), [
    ("bhid,bhjd->bhij", [(2, 3, 5, 4), (2, 3, 7, 4)]),   # attention scores
    ("ij,jk->ik", [(6, 5), (5, 3)]),
    ("bij->bji", [(2, 3, 4)]),                           # one operand
    ("ii->i", [(4, 4)]),                                 # a diagonal
])
def test_einsum_matches_flop_counter(equation: str, shapes: list[tuple[int, ...]]) -> None:
    xs = [torch.randn(s) for s in shapes]
    with FlopCounterMode(display=False) as fc:
        torch.einsum(equation, *xs)
    out = torch.einsum(equation, *xs)
    c = cost_of(node("aten.einsum", {"equation": equation, "tensors": [f32(*s) for s in shapes]}, f32(*out.shape)))
    assert c.kind == "matmul"
    if len(shapes) > 1:
        assert c.flops == fc.get_total_flops() == 2 * math.prod({k: v for x, s in zip(equation.split("->")[0].split(","), shapes, strict=False)
                                                                for k, v in zip(x, s, strict=False)}.values())
    else:  # flop_counter counts none for one operand; rooftune one per point of its index space
        assert c.flops == {"bij->bji": 24, "ii->i": 4}[equation]


def test_einsum_with_broadcast_dimensions_is_unreadable() -> None:
    c = cost_of(node("aten.einsum", {"equation": "...ij,...jk->...ik", "tensors": [f32(2, 3, 4), f32(2, 4, 5)]}, f32(2, 3, 5)))
    assert not c.known and "broadcast" in c.formula


def test_the_last_ops_of_the_zoo_without_a_formula() -> None:
    """swin_v2's cosine attention (a vector norm, an in-place zero) and mvit's tensor_split."""
    norm = cost_of(node("aten.linalg_vector_norm", {"self": f32(1, 3, 49, 32), "ord": 2, "dim": [-1]}, f32(1, 3, 49, 1)))
    assert (norm.kind, norm.flops, norm.bytes) == ("reduction", 2 * 3 * 49 * 32, F32 * 3 * 49 * 33)
    zero = cost_of(node("aten.zero_", {"self": f32(8, 8)}, f32(8, 8)))
    assert (zero.kind, zero.flops, zero.bytes) == ("fill", 0, F32 * 64)
    split = cost_of(node("aten.tensor_split", {"self": f32(4, 6), "sections": 2}, f32(2, 6), f32(2, 6)))
    assert (split.kind, split.flops, split.bytes) == ("view", 0, 0)


def test_a_reshape_of_a_transposed_tensor_is_a_copy_and_of_a_contiguous_one_a_view() -> None:
    """An attention block's ``a.transpose(1, 2).reshape(B, T, D)`` copies its 32 KiB; the same
    reshape of a contiguous tensor moves nothing. Both as captured from a real module."""

    class Heads(torch.nn.Module):
        def forward(self, a: torch.Tensor) -> torch.Tensor:
            return a.transpose(1, 2).reshape(1, 64, 128) + a.reshape(1, 64, 128)

    wl_module = Heads()
    x = torch.randn(1, 4, 64, 32)
    from rooftune.workload.models import Workload

    graph = capture(Workload("heads", "callable", wl_module, (x,), {}))
    reshapes = [(op, cost_of(op)) for op in graph.ops if op.target == "aten.reshape"]
    assert len(reshapes) == 2, [op.target for op in graph.ops]
    (copied, c1), (viewed, c2) = sorted(reshapes, key=lambda oc: oc[0].tensors()[0].contiguous)
    assert not copied.tensors()[0].contiguous and viewed.tensors()[0].contiguous
    assert c1.kind == "copy" and c1.bytes == 2 * 64 * 128 * 4
    assert c2.kind == "view" and c2.bytes == 0.0

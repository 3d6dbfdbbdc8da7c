"""Op graphs: torch.export capture of a real model, the module-hook fallback, and the timed runner."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable

import pytest
import torch
from torch import nn

from rooftune.workload import (
    OpGraph,
    OpNode,
    TensorMeta,
    Workload,
    capture,
    capture_export,
    capture_hooks,
    load_workload,
)


def counting_clock() -> Callable[[], float]:
    """0, 1, 2, 3, ...: an op timed by one read before and one after lasts exactly 1.0."""
    c = itertools.count()
    return lambda: float(next(c))


def squares_clock() -> Callable[[], float]:
    """0, 1, 4, 9, ...: the k-th timed op (reads 2k and 2k+1) lasts exactly 4k + 1."""
    c = itertools.count()
    return lambda: float(next(c)) ** 2


# --------------------------------------------------------------------------------------------
# resnet18 through torch.export


@pytest.fixture(scope="module")
def resnet18_graph() -> OpGraph:
    return capture(load_workload("resnet18"))


def test_resnet18_is_captured_by_export(resnet18_graph: OpGraph) -> None:
    assert resnet18_graph.capture == "torch.export"
    assert resnet18_graph.capture_note == ""
    assert resnet18_graph.workload == "resnet18"


#: What torch.export names a batch norm and the residual add: torch 2.4's IR, then 2.5's on.
BATCH_NORM = ("aten.batch_norm", "aten._native_batch_norm_legit_no_training")
ADD = ("aten.add_", "aten.add")


def test_resnet18_op_counts(resnet18_graph: OpGraph) -> None:
    counts = Counter(op.target for op in resnet18_graph.ops)
    # 1 stem conv + 8 basic blocks x 2 convs + 3 downsample 1x1 convs = 20
    assert counts["aten.conv2d"] == 20
    assert sum(counts[t] for t in BATCH_NORM) == 20
    assert counts["aten.linear"] == 1
    assert counts["aten.max_pool2d"] == 1
    assert counts["aten.adaptive_avg_pool2d"] == 1
    assert sum(counts[t] for t in ADD) == 8  # one residual add per basic block
    downsample = [op for op in resnet18_graph.ops if op.target == "aten.conv2d" and "downsample" in op.module]
    assert len(downsample) == 3
    assert all(op.tensor("weight").shape[2:] == (1, 1) for op in downsample)  # type: ignore[union-attr]


def test_resnet18_ops_are_indexed_in_order(resnet18_graph: OpGraph) -> None:
    assert [op.index for op in resnet18_graph.ops] == list(range(len(resnet18_graph.ops)))
    assert all(isinstance(op, OpNode) for op in resnet18_graph.ops)


def test_every_op_has_shaped_outputs(resnet18_graph: OpGraph) -> None:
    for op in resnet18_graph.ops:
        assert op.outputs, op.target
        for out in op.outputs:
            assert isinstance(out, TensorMeta)
            assert len(out.shape) >= 1
            assert all(isinstance(d, int) and d >= 1 for d in out.shape)
            assert out.dtype == "float32"
            assert out.itemsize == 4


def test_first_conv_arguments(resnet18_graph: OpGraph) -> None:
    conv = next(op for op in resnet18_graph.ops if op.target == "aten.conv2d")
    assert conv.index == 0
    assert conv.op == "conv2d"
    assert conv.module == "conv1"
    assert conv.module_type == "Conv2d"
    assert conv.args["input"] == TensorMeta((1, 3, 224, 224), "float32", 4)
    assert conv.args["weight"] == TensorMeta((64, 3, 7, 7), "float32", 4)
    assert conv.tensor("weight") == TensorMeta((64, 3, 7, 7), "float32", 4)
    assert conv.args["bias"] is None
    assert list(conv.args["stride"]) == [2, 2]
    assert list(conv.args["padding"]) == [3, 3]
    assert list(conv.args["dilation"]) == [1, 1]  # a default, filled in from the schema
    assert conv.args["groups"] == 1
    assert conv.outputs == (TensorMeta((1, 64, 112, 112), "float32", 4),)
    assert conv.shapes() == {"inputs": [[1, 3, 224, 224], [64, 3, 7, 7]], "outputs": [[1, 64, 112, 112]]}


def test_producers_form_edges(resnet18_graph: OpGraph) -> None:
    ops = resnet18_graph.ops
    assert ops[0].producers == ()
    assert ops[1].target in BATCH_NORM
    assert ops[1].producers == (0,)
    for op in ops:
        assert all(p < op.index for p in op.producers)
    # a residual add joins two branches
    adds = [op for op in ops if op.target in ADD]
    assert len(adds) == 8 and all(len(op.producers) == 2 for op in adds)


def test_depth(resnet18_graph: OpGraph) -> None:
    assert resnet18_graph.depth > 1
    assert resnet18_graph.depth <= len(resnet18_graph.ops)


def test_run_timed_real_clock(resnet18_graph: OpGraph) -> None:
    d = resnet18_graph.run_timed(time.perf_counter)
    assert len(d) == len(resnet18_graph.ops)
    assert all(isinstance(x, float) and x >= 0.0 for x in d)


def test_run_timed_counting_clock(resnet18_graph: OpGraph) -> None:
    d = resnet18_graph.run_timed(counting_clock())
    assert d == [1.0] * len(resnet18_graph.ops)


def test_run_timed_times_ops_in_order(resnet18_graph: OpGraph) -> None:
    d = resnet18_graph.run_timed(squares_clock())
    assert d == [4.0 * k + 1.0 for k in range(len(resnet18_graph.ops))]
    # a second run starts afresh
    assert resnet18_graph.run_timed(counting_clock()) == [1.0] * len(resnet18_graph.ops)


# --------------------------------------------------------------------------------------------
# fallback to module hooks


class Branchy(nn.Module):
    """Data-dependent control flow: torch.export cannot trace it."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 3)
        self.c = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x))
        if y.sum() > 0:
            return self.b(y)
        return self.c(y)


@pytest.fixture(scope="module")
def branchy() -> tuple[Workload, OpGraph]:
    torch.manual_seed(0)
    wl = Workload("branchy", "callable", Branchy().eval(), (torch.randn(2, 4),))
    return wl, capture(wl)


def test_fallback_to_module_hooks(branchy: tuple[Workload, OpGraph]) -> None:
    wl, g = branchy
    assert g.capture == "module hooks"
    assert "torch.export failed" in g.capture_note
    assert "\n" not in g.capture_note
    assert g.workload == "branchy"


def test_fallback_ops_are_leaf_modules(branchy: tuple[Workload, OpGraph]) -> None:
    wl, g = branchy
    with torch.no_grad():
        took_b = bool((torch.relu(wl.module.a(wl.inputs[0]))).sum() > 0)
    branch = "b" if took_b else "c"
    assert [op.module for op in g.ops] == ["a", branch]
    assert [op.target for op in g.ops] == ["aten.linear", "aten.linear"]
    assert [op.module_type for op in g.ops] == ["Linear", "Linear"]
    first = g.ops[0]
    assert first.args["input"] == TensorMeta((2, 4), "float32", 4)
    assert first.args["weight"] == TensorMeta((4, 4), "float32", 4)
    assert first.outputs == (TensorMeta((2, 4), "float32", 4),)
    width = 3 if took_b else 2
    assert g.ops[1].outputs == (TensorMeta((2, width), "float32", 4),)
    assert g.depth == 1  # hooks see no edges


def test_fallback_run_timed(branchy: tuple[Workload, OpGraph]) -> None:
    _, g = branchy
    d = g.run_timed(time.perf_counter)
    assert len(d) == len(g.ops)
    assert all(x >= 0.0 for x in d)
    assert g.run_timed(counting_clock()) == [1.0] * len(g.ops)
    assert g.run_timed(squares_clock()) == [4.0 * k + 1.0 for k in range(len(g.ops))]


def test_capture_export_raises_where_capture_falls_back(branchy: tuple[Workload, OpGraph]) -> None:
    wl, _ = branchy
    with pytest.raises(Exception):  # noqa: B017 - export's error classes differ between torch versions
        capture_export(wl)


def test_capture_hooks_on_lstm_is_one_op() -> None:
    wl = load_workload("lstm", options={"hidden": 16, "input_size": 8, "seq_len": 5})
    g = capture_hooks(wl, "forced")
    assert g.capture == "module hooks"
    assert g.capture_note == "forced"
    assert len(g.ops) == 1
    op = g.ops[0]
    assert op.target == "aten.lstm"
    assert op.module == "rnn"
    assert op.module_type == "LSTM"
    assert op.args["num_layers"] == 2
    assert op.args["batch_first"] is True
    assert op.args["bidirectional"] is False
    assert len(op.args["params"]) == 8  # w_ih, w_hh, b_ih, b_hh for 2 layers
    # output sequence, h_n, c_n
    assert [t.shape for t in op.outputs] == [(1, 5, 16), (2, 1, 16), (2, 1, 16)]
    assert g.run_timed(counting_clock()) == [1.0]


class ConvByKeyword(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(input=x)


def test_hooks_see_keyword_inputs() -> None:
    from rooftune.costs import cost_of

    wl = Workload("kw", "callable", ConvByKeyword().eval(), (torch.zeros(1, 3, 10, 10),))
    g = capture_hooks(wl, "forced")
    assert [op.target for op in g.ops] == ["aten.convolution"]
    flops = cost_of(g.ops[0]).flops
    assert flops in (None, 2 * 1 * 8 * 3 * 3 * 3 * 8 * 8)  # unknown, or right; never wrong


# --------------------------------------------------------------------------------------------
# TensorMeta


def test_tensor_meta_of_bfloat16() -> None:
    m = TensorMeta.of(torch.zeros(2, 3, dtype=torch.bfloat16))
    assert m.shape == (2, 3)
    assert m.dtype == "bfloat16"
    assert m.itemsize == 2
    assert m.numel == 6
    assert m.nbytes == 12
    assert m.to_dict() == {"shape": [2, 3], "dtype": "bfloat16"}


def test_tensor_meta_of_scalar_and_int64() -> None:
    m = TensorMeta.of(torch.tensor(3, dtype=torch.int64))
    assert m.shape == ()
    assert m.numel == 1
    assert m.nbytes == 8


def test_op_node_tensors_flattens_lists() -> None:
    a, b, c = (TensorMeta((2,), "float32", 4), TensorMeta((3,), "float32", 4), TensorMeta((4,), "float32", 4))
    op = OpNode(0, "cat", "aten.cat", "", "", {"tensors": [a, b], "dim": 0, "out": c}, (c,))
    assert op.tensors() == [a, b, c]
    assert op.tensor("tensors") is None
    assert op.tensor("out") == c
    assert op.op == "cat"


def test_depth_of_chain_and_empty_graph() -> None:
    t = TensorMeta((1,), "float32", 4)
    ops = (
        OpNode(0, "a", "aten.relu", "", "", {"self": t}, (t,)),
        OpNode(1, "b", "aten.relu", "", "", {"self": t}, (t,), (0,)),
        OpNode(2, "c", "aten.relu", "", "", {"self": t}, (t,), (1,)),
        OpNode(3, "d", "aten.add", "", "", {"self": t, "other": t}, (t,), (0, 2)),
    )
    assert OpGraph("w", ops, "torch.export").depth == 4
    assert OpGraph("w", (), "torch.export").depth == 0
    assert OpGraph("w", ops[:1], "torch.export").depth == 1

"""Acceptance: the FLOPs rooftune computes from shapes equal torch.utils.flop_counter's count of a
real eager run, model by model and kind by kind."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from rooftune.costs import costs_of
from rooftune.workload import capture, load_workload

MODELS = ["resnet50", "mobilenet_v2", "inception_v3", "vgg16", "googlenet", "squeezenet1_0"]
COUNTED_KINDS = {"conv", "linear", "matmul"}


@pytest.mark.parametrize("name", MODELS)
def test_flops_equal_flop_counter(name: str) -> None:
    wl = load_workload(name, batch=1)
    graph = capture(wl)
    assert graph.capture == "torch.export", graph.capture_note
    costs = costs_of(graph)
    assert len(costs) == len(graph.ops)

    unknown = sorted({op.target for op, c in zip(graph.ops, costs, strict=True) if c.kind == "unknown"})
    assert unknown == []
    unreadable = [(op.target, c.formula) for op, c in zip(graph.ops, costs, strict=True) if c.flops is None or c.bytes is None]
    assert unreadable == []

    by_kind: dict[str, float] = defaultdict(float)
    for c in costs:
        assert c.flops is not None
        by_kind[c.kind] += c.flops
    ours = sum(by_kind[k] for k in COUNTED_KINDS)

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        wl.module(*wl.inputs)
    total = counter.get_total_flops()
    assert total > 0
    assert ours == total

    per_op: dict[str, int] = defaultdict(int)
    for op, n in counter.get_flop_counts()["Global"].items():
        per_op[str(op).split(".")[1]] += n  # aten.convolution.default -> convolution
    assert set(per_op) <= {"convolution", "addmm", "mm"}
    assert by_kind["conv"] == per_op["convolution"]
    assert by_kind["linear"] == per_op["addmm"] + per_op["mm"]
    assert by_kind["matmul"] == 0  # these CNNs have no bare matrix products

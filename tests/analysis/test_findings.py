"""The top opportunities with alike ops taken together."""

from __future__ import annotations

import json

import pytest

from rooftune.analysis.findings import group_reason, module_pattern, opportunity_groups


def op(index: int, module: str, headroom: float, efficiency: float, shape: int = 768, target: str = "aten.linear") -> dict:
    return {"index": index, "name": f"linear_{index}", "target": target, "kind": "linear", "module": module,
            "shapes": {"input": [50, shape], "weight": [3072, shape]}, "dtype": "float32", "bound": "compute",
            "time_s": 2 * headroom, "headroom_s": headroom, "efficiency": efficiency,
            "reason": f"linear 50x{shape}->3072, compute-bound at {efficiency:.0%} of roof: try bf16/int8 where native"}


def test_a_repeated_layer_is_one_line_with_its_summed_headroom() -> None:
    blocks = [op(i, f"encoder.layers.encoder_layer_{i}.mlp.0", 1.5e-3 + i * 1e-5, 0.39 + i / 100) for i in range(4)]
    conv = {**op(9, "conv_proj", 4.3e-3, 0.19, target="aten.conv2d"), "kind": "conv", "reason": "32x32 conv stride 32, compute-bound at 19% of roof: x"}
    odd = op(7, "head", 1e-3, 0.5, shape=512)  # other shapes: not alike
    none = {**op(8, "x", 0.0, 0.9), "headroom_s": None}  # no headroom: never listed
    groups = opportunity_groups([*blocks, conv, odd, none], 10)
    assert [g["count"] for g in groups] == [4, 1, 1]
    g = groups[0]
    assert g["headroom_s"] == pytest.approx(sum(b["headroom_s"] for b in blocks))  # 6.1 ms > the conv's 4.3
    assert g["time_s"] == pytest.approx(sum(b["time_s"] for b in blocks))
    assert g["ops"] == [3, 2, 1, 0] and g["name"] == "linear_3"  # largest headroom first
    assert g["module"] == "encoder.layers.*.mlp.0"
    assert "compute-bound at 39-42% of roof: try bf16" in g["reason"]
    assert groups[1]["ops"] == [9] and "at 19% of roof" in groups[1]["reason"]
    assert len(opportunity_groups([*blocks, conv, odd], 2)) == 2
    json.dumps(groups)  # plain data for --json


def test_module_patterns_and_reasons() -> None:
    assert module_pattern(["layer1.0.conv2", "layer1.1.conv2", "layer1.2.conv2"]) == "layer1.*.conv2"
    assert module_pattern(["layer1.0.conv2", "layer2.0.conv2"]) == "*.0.conv2"
    assert module_pattern(["a.b", "a.b.c"]) == "a.b (+1)"
    assert module_pattern(["layer1.0.conv3", "layer1.0.downsample.0", "layer1.1.conv3", "layer1.2.conv3"]) == \
        "layer1.*.conv3 (+1)"
    assert module_pattern(["", ""]) == "-" and module_pattern(["only"]) == "only"
    assert group_reason(["x at 40% of roof: y"], [0.4, 0.4]) == "x at 40% of roof: y"
    assert group_reason(["no cost formula"], [None]) == "no cost formula"


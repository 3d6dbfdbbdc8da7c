"""int8 sensitivity per layer on the user's data, beside each layer's roofline position, and the
mixed plan that keeps the fewest layers at higher precision within the budget."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from rooftune.analysis.sensitivity import MIN_INT8_GAIN, layer_sensitivity
from rooftune.workload.data import DataSpec, load_samples, split
from tests.workload import digits


def _split(tmp_path: Path, example: tuple[torch.Tensor, ...], **kw):
    spec = DataSpec(str(digits.write_npz(tmp_path / "d.npz")), **kw)
    return split(load_samples(spec, example), spec), spec


def test_the_layer_that_breaks_the_metric_ranks_first_and_the_plan_keeps_it(tmp_path: Path) -> None:
    model, example = digits.sensitive()
    parts, spec = _split(tmp_path, example)
    s = layer_sensitivity(model, parts, spec)
    assert [r.name for r in s.layers] == ["out", "hidden"]
    out, hidden = s.layers
    assert out.drop > 50 and out.drop_interval[0] > 40  # every real feature rounds to zero
    assert abs(hidden.drop) <= 2
    assert s.uniform_drop > spec.max_drop and s.kept == ("out",) and s.mixed_drop <= spec.max_drop
    assert s.samples == 256 and "simulated" in s.notes[0]
    # the model's weights are as they were
    with torch.no_grad():
        assert torch.equal(model(example[0]), digits.sensitive()[0](example[0]))


def test_a_layer_the_roofline_says_gains_little_stays_at_higher_precision_whatever_its_drop(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1, groups=4), nn.Flatten(),
                          nn.Linear(256, 10), nn.Linear(10, 10)).eval()
    example = (torch.zeros(1, 1, 8, 8),)
    parts, spec = _split(tmp_path, example)
    op = lambda module, t, flops, nbytes, bound: SimpleNamespace(  # noqa: E731
        module=module, time_s=t, flops=flops, moved_bytes=nbytes, level="L1", bound=bound)
    analysis = SimpleNamespace(batch=1, roofs={"peak": {"gemm_int8": 1e12}, "bandwidth": {"L1": 1e11}, "dispatch_s": 1e-6},
                               ops=[op("0", 1e-3, 1e8, 1e4, "compute"), op("1", 1e-4, 1e5, 1e5, "memory-L1"),
                                    op("3", 1.1e-4, 1e5, 4e7, "memory-L1"), op("4", 2e-6, 200, 800, "overhead")])
    s = layer_sensitivity(model, parts, spec, analysis)
    by = {r.name: r for r in s.layers}
    assert by["0"].keep == "int8" and by["0"].int8_gain == pytest.approx(1e-3 / 1e-4)
    assert by["1"].keep.startswith("kept: depthwise")
    assert by["3"].int8_gain < MIN_INT8_GAIN and "expected int8 gain" in by["3"].keep
    assert by["4"].keep.startswith("kept: dispatch-bound")
    assert by["0"].time_s == 1e-3 and by["0"].bound == "compute"

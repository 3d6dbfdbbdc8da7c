"""benchmarks/tune_suite.py's summary: a figure just under a target must not print as met, and
the two headlines (over the best peer as shipped, fp32 over the best fp32 peer) are each judged."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _suite():  # the script, loaded from its file (benchmarks/ is not a package)
    spec = importlib.util.spec_from_file_location("tune_suite", ROOT / "benchmarks" / "tune_suite.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(model: str, shipped: float, fp32: float, precision: str = "fp32") -> dict:
    heads = {"best_peer_as_shipped": {"peer": "openvino-default", "peer_precision": "bf16", "ratio": shipped},
             "best_fp32_peer": {"peer": "onnxruntime-default", "peer_precision": "fp32", "ratio": fp32}}
    return {"model": model, "speedup": {"vanilla": {"ratio": 2.5}, "pytorch-launcher": {"ratio": 2.1}},
            "vs_best_peer": shipped, "vs_best_fp32_peer": fp32, "headlines": heads, "guideline_vs_best": 1.02,
            "precision": precision, "guard": {"cosine": 0.9991, "min_cosine": None, "top1": 1.0, "inputs": None},
            "reduced_trials": []}


def test_a_geomean_just_under_the_target_reads_not_met_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    suite = _suite()
    rows = [_row("a", 1.2, 1.047), _row("b", 1.2, 1.047)]
    assert suite.summarize(rows, "fp32", str(tmp_path / "s.json")) == 1
    out = capsys.readouterr().out
    assert "fp32 over the best fp32 peer           1.047x geomean (target >= 1.05: not met)" in out
    assert (tmp_path / "s.json").is_file()  # written before the summary is printed
    assert suite.summarize([_row("a", 1.2, 1.06)], "fp32", None) == 0


def test_a_model_below_the_peer_as_shipped_fails_the_default_run(capsys: pytest.CaptureFixture) -> None:
    suite = _suite()
    assert suite.summarize([_row("resnet50", 0.98, 1.2, "bf16"), _row("lstm", 1.3, 1.1)], "default", None) == 1
    out = capsys.readouterr().out
    assert "worst model 0.980x (target >= 1.0: not met)" in out
    assert "resnet50       best bf16, guard: cosine 0.9991, top-1 100.0%; fastest peer as shipped openvino-default (bf16)" in out


def test_the_int8_run_is_judged_over_the_peer_as_shipped(capsys: pytest.CaptureFixture) -> None:
    suite = _suite()
    assert suite.summarize([_row("resnet50", 1.6, 1.1, "int8")], "int8", None) == 0
    assert "int8 target >= 1.5 geomean: met" in capsys.readouterr().out
    assert suite.summarize([_row("resnet50", 1.4, 1.1, "int8")], "int8", None) == 1

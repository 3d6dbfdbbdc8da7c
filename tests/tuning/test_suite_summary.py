"""benchmarks/tune_suite.py's summary: a figure just under a target must not print as met."""

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


def _row(model: str, peer: float, precision: str = "fp32") -> dict:
    return {"model": model, "speedup": {"vanilla": {"ratio": 2.5}, "pytorch-launcher": {"ratio": 2.1}},
            "vs_best_peer": peer, "guideline_vs_best": 1.02, "precision": precision,
            "guard": {"cosine": 1.0, "min_cosine": None, "top1": 1.0, "inputs": None}, "reduced_trials": []}


def test_a_geomean_just_under_the_target_reads_not_met_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    suite = _suite()
    rows = [_row("a", 1.047), _row("b", 1.047)]
    assert suite.summarize(rows, (), str(tmp_path / "s.json")) == 1
    out = capsys.readouterr().out
    assert "over the best peer    1.047x (target >= 1.05: not met)" in out
    assert "over vanilla          2.500x (target >= 2.3: met)" in out
    assert (tmp_path / "s.json").is_file()  # written before the summary is printed
    assert suite.summarize([_row("a", 1.06)], (), None) == 0


def test_a_bf16_best_is_reported_by_bf16s_check_on_the_reference_input(capsys: pytest.CaptureFixture) -> None:
    suite = _suite()
    assert suite.summarize([_row("lstm", 1.6, "bf16")], ("bf16",), None) == 0
    out = capsys.readouterr().out
    assert "lstm           bf16 check: cosine 1.0000, top-1 100.0% on the reference input" in out
    assert "(the int8 target >= 1.5: met)" in out

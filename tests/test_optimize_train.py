"""optimize(..., train=True): the analysis of a training step in the report, the selection skipped
with its reason, the command that reproduces the run carrying --train."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rooftune.errors import InvalidArgument
from rooftune.pipeline import optimize
from tests.test_optimize import store_with_ceilings

CNN = "tests.analysis.tiny_models:small_cnn"


def test_optimize_analyses_a_training_step_and_skips_the_selection(tmp_path: Path) -> None:
    db = store_with_ceilings(tmp_path / "r.db")
    r = optimize(CNN, train=True, out=tmp_path / "out", store=str(db), steps=("machine", "analyze", "select"),
                 budget_s=60)
    steps = {s.name: s for s in r.steps.values()}
    assert steps["analyze"].status == "ok", (steps["analyze"].message, r.notes)
    assert steps["select"].status == "skipped" and "a training step" in steps["select"].message
    assert r.objective == "throughput" and r.batch == 32 and r.train["optimizer"] == "sgd"
    assert set(r.analysis.phases_s) == {"forward", "backward", "optimizer"}
    assert "--train --optimizer sgd" in r.commands[0] and len(r.commands) == 1
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["train"]["optimizer"] == "sgd" and summary["analysis"]["phases_s"]
    assert steps["report"].status == "ok", steps["report"].message


def test_optimize_refuses_inference_only_options_with_train(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="with --train"):
        optimize(CNN, train=True, out=tmp_path / "out", runtimes=["onnxruntime"], budget_s=60)
    assert not (tmp_path / "out").exists()

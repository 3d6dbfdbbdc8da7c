"""--train on the command line: what only means something for inference is refused in one line,
nothing stored; a training option without --train is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_cli import assert_one_line_error, rooftune_in_process

CNN = "tests.analysis.tiny_models:small_cnn"


@pytest.mark.parametrize("args, fragments", [
    (["tune", CNN, "--train", "--int8"], ["int8", "fp32 or bf16 with --train"]),
    (["tune", CNN, "--train", "--runtime", "onnxruntime"], ["runtime 'onnxruntime'", "eager or compile with --train"]),
    (["optimize", CNN, "--train", "--runtime", "openvino"], ["runtime 'openvino'", "with --train"]),
    (["tune", CNN, "--train", "--validate", "tests.x:f"], ["--validate", "only without --train"]),
    (["analyze", CNN, "--train", "--batch", "1"], ["cannot train at batch 1", "--batch 2 or more"]),
    (["analyze", CNN, "--train", "--device", "cuda"], ["cpu with --train"]),
    (["analyze", CNN, "--optimizer", "adamw"], ["optimizer 'adamw'", "only with --train"]),
    (["tune", CNN, "--loss", "mse"], ["loss 'mse'", "only with --train"]),
    (["analyze", CNN, "--train", "--optimizer", "lbfgs"], ["optimizer 'lbfgs'", "sgd, adamw"]),
])
def test_train_bad_input_is_one_line(tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    db = tmp_path / "r.db"
    assert_one_line_error(rooftune_in_process(*args, db=db), *fragments)
    assert not db.exists() or db.stat().st_size == 0 or "analyze" in args

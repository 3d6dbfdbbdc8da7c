"""JSON read from a file is parsed within bounds: nested past any parser's stack, or holding an
integer too long for Python to read, it is refused (or passed over) in words, never a
RecursionError or a ValueError of Python's own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rooftune.fileio import MAX_JSON_DEPTH, parse_json

DEEP = "[" * 50_000 + "]" * 50_000


@pytest.mark.parametrize("text,why", [
    (DEEP, f"nested deeper than {MAX_JSON_DEPTH} levels (allowed at most {MAX_JSON_DEPTH})"),
    ('{"a": ' * 65 + "1" + "}" * 65, "nested deeper than 64 levels"),
    ("[" * 65 + "]" * 65, "nested deeper than 64 levels"),
    ("[" + "9" * 5000 + "]", "not JSON rooftune reads (an integer of thousands of digits)"),
    ("{not json", "not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
    (b"\xff\xfe\xfa", "not JSON"),
])
def test_json_past_the_bounds_is_refused_in_words(text: str | bytes, why: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_json(text)
    assert why in str(e.value) and "\n" not in str(e.value)


def test_json_within_the_bounds_is_read() -> None:
    assert parse_json("[" * 64 + "]" * 64) is not None
    assert parse_json(b'{"a": [1, {"b": null}], "c": NaN}')["a"] == [1, {"b": None}]


def test_a_leftover_folder_with_a_marker_nested_deep_is_passed_over(tmp_path: Path) -> None:
    from rooftune.platform.processes import OWNER_FILE, remove_leftovers

    d = tmp_path / "rooftune-tune-odd"
    d.mkdir()
    (d / OWNER_FILE).write_text(DEEP)
    assert remove_leftovers(tmp_path) == [] and d.exists()


def test_a_winograd_record_nested_deep_is_no_record(tmp_path: Path) -> None:
    from rooftune.runconfig import RunConfig
    from rooftune.tuning.result import TrialResult, winograd_layers

    artifact = tmp_path / "model.onnx"
    artifact.write_bytes(b"")
    trial = TrialResult(config=RunConfig(runtime="onnxruntime", runtime_options={"conv": "winograd"}), ok=True,
                        artifact=str(artifact))
    artifact.with_suffix(".json").write_text(json.dumps({"layers": [{"chosen": True}]}))
    assert winograd_layers(trial) == [{"chosen": True}]
    artifact.with_suffix(".json").write_text('{"layers": ' + DEEP + "}")
    assert winograd_layers(trial) is None

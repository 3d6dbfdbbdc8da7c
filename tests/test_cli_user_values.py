"""What a user types reaches the terminal as typed: brackets are never read as Rich markup (a
closing tag with nothing open would end in a MarkupError traceback, ``[bold]`` restyle the line)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.test_cli import assert_one_line_error, rooftune_in_process

CLOSES_NOTHING = "net[/x]"
STYLED = "[bold]x[/bold]"


@pytest.mark.parametrize("value", [CLOSES_NOTHING, STYLED])
def test_a_model_name_is_printed_as_typed(value: str) -> None:
    proc = rooftune_in_process("analyze", value)
    assert_one_line_error(proc, f"model {value!r}")


@pytest.mark.parametrize("value", [CLOSES_NOTHING, f"{STYLED}=1"])
def test_a_model_option_is_printed_as_typed(value: str) -> None:
    proc = rooftune_in_process("analyze", "resnet18", "-o", value)
    assert_one_line_error(proc, repr(value))


@pytest.mark.parametrize("value", [CLOSES_NOTHING, STYLED])
def test_an_option_value_click_refuses_is_printed_as_typed(value: str) -> None:
    proc = rooftune_in_process("analyze", "resnet18", "--top", value)
    assert_one_line_error(proc, repr(value), "--top")


@pytest.mark.parametrize("value", [CLOSES_NOTHING, STYLED])
def test_a_db_path_is_printed_as_typed(tmp_path: Path, value: str) -> None:
    db = tmp_path / value / "store.db"
    proc = rooftune_in_process("data", "export", str(tmp_path / "rows.csv"), "--db", str(db))
    assert_one_line_error(proc, str(db))


@pytest.mark.parametrize("value", [CLOSES_NOTHING, STYLED])
def test_an_out_path_is_printed_as_typed(tmp_path: Path, value: str) -> None:
    out = tmp_path / value / "out"
    proc = rooftune_in_process("optimize", "resnet18", "--out", str(out), "--db", str(tmp_path / "r.db"))
    assert_one_line_error(proc, str(out), "parent directory does not exist")


def test_values_in_a_table_and_a_title_are_printed_as_typed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rooftune.store import Store, modules_dir

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    store = tmp_path / "[bold]s.db"
    Store(store).close()
    modules_dir().mkdir(parents=True)
    module = modules_dir() / "[red]Net-0123.pt2"
    module.write_bytes(b"pt2")
    old = time.time() - 90 * 86400
    os.utime(module, (old, old))
    from rooftune.cli import printing as cli

    monkeypatch.setattr(cli.out, "width", 2000)  # a long temporary path folds onto more lines of a cell
    proc = rooftune_in_process("data", "prune", "--db", str(store))
    assert proc.returncode == 0, proc.stderr
    flat = "".join(proc.stdout.split())
    assert "[bold]s.db" in flat and "[red]Net-0123.pt2" in flat

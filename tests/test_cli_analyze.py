"""`rooftune analyze` and `rooftune models` as a user meets them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from rooftune.store import Store
from tests.test_cli import assert_one_line_error, rooftune, rooftune_in_process

CNN = "tests.analysis.tiny_models:small_cnn"


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["resnet5O"], ["model 'resnet5O'", "did you mean resnet50"]),
        (["resnet18", "--input", "1x3xq"], ["input shape '1x3xq'", "1x3x224x224"]),
        (["resnet18", "--batch", "0"], ["batch 0", "1..4096"]),
        (["resnet18", "--threads", "0"], ["thread count 0"]),
        (["resnet18", "--format", "gif"], ["--format 'gif'", "png"]),
        (["resnet18", "--top", "0"], ["--top 0"]),
        (["resnet18", "--csv", "/no/such/dir/x.csv"], ["--csv", "directory does not exist"]),
        (["lstm", "-o", "hiden=3"], ["option of lstm 'hiden'", "hidden"]),
        (["no_such_pkg.mod:fn"], ["cannot import 'no_such_pkg.mod'"]),
        (["tests.analysis.tiny_models:not_a_module"], ["returned int, not an nn.Module"]),
        ([CNN, "--input", "1x5x5"], ["fails on input 1x5x5"]),
        (["missing.pt2"], ["model 'missing.pt2'", "no such file"]),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    db = tmp_path / "r.db"
    proc = rooftune_in_process("analyze", *args, db=db)
    assert_one_line_error(proc, *fragments)
    assert not db.exists()


def test_json_csv_figures_and_store(ceilings_db: Path, tmp_path: Path) -> None:
    csv_path = tmp_path / "ops.csv"
    plots = tmp_path / "plots"
    proc = rooftune("analyze", CNN, "--budget", "0.5", "--threads", "1", "--json", "--csv", str(csv_path),
                    "--plot-dir", str(plots), "--format", "svg", db=ceilings_db)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["model"] == CNN and d["batch"] == 1 and d["threads"] == 1
    assert {"end_to_end_s", "lower_bound_s", "flops", "bytes", "unattributed_s", "ops"} <= set(d)
    assert d["flops"] == pytest.approx(2 * 8 * 32 * 32 * 27 + 2 * 8 * 32 * 32 * 9 + 160 + sum(
        o["flops"] for o in d["ops"] if o["kind"] not in ("conv", "linear")))
    rows = list(csv.DictReader(csv_path.open()))
    assert [r["name"] for r in rows] == [o["name"] for o in d["ops"]]
    names = sorted(p.name for p in plots.iterdir())
    stem = "tests_analysis_tiny_models_small_cnn_b1_t1"
    assert names == [f"{stem}_roofline.svg", f"{stem}_time_roofline.svg"]
    with Store(ceilings_db) as s:
        assert s.count("analyses") == 1


def test_table_output_names_the_opportunities(ceilings_db: Path) -> None:
    proc = rooftune("analyze", CNN, "--budget", "0.3", "--top", "3", db=ceilings_db)
    assert proc.returncode == 0, proc.stderr
    assert "Top 3 ops by time" in proc.stdout
    assert "Top opportunities" in proc.stdout
    assert "end-to-end" in proc.stdout and "lower bound" in proc.stdout


def test_models_lists_builtins_and_the_zoo() -> None:
    proc = rooftune("models")
    assert proc.returncode == 0
    assert "lstm" in proc.stdout and "transformer-encoder" in proc.stdout and "resnet50" in proc.stdout


#: A model whose layers are named with an escape sequence and with Rich markup.
ODD_NAMES = """
import torch
from torch import nn


def build():
    net = nn.Sequential()
    net.add_module("\\x1b[31mevil", nn.Linear(4, 4))
    net.add_module("[red]x[/red]", nn.ReLU())
    net.add_module("[link=https://example]l[/link]", nn.Linear(4, 2))
    return net.eval(), torch.ones(1, 4)
"""


def test_layer_names_are_shown_literally_never_obeyed(ceilings_db: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An escape sequence in a layer's name is printed escaped (as an error message shows a
    value), Rich markup in it as the characters it is."""
    (tmp_path / "rt_odd_layer_names.py").write_text(ODD_NAMES)
    monkeypatch.chdir(tmp_path)
    proc = rooftune_in_process("analyze", "rt_odd_layer_names:build", "--budget", "0.3", "--threads", "1",
                               db=ceilings_db)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr
    for name in ("\\x1b[31mevil", "[red]x[/red]", "[link=https://example]l[/link]"):
        # an opportunity's line (a table cell may be cut short to fit the width: "\x1b[31me…")
        assert f"({name})" in proc.stdout


def test_what_is_printed_shows_control_characters_escaped() -> None:
    import io

    from rich.text import Text

    from rooftune.cli.printing import Table, _Console, labelled, visible

    assert visible("conv\x1b[2J\r\u200b\tx\nnext") == "conv\\x1b[2J\\r\\u200b\\tx\nnext"
    assert visible("résumé [b]") == "résumé [b]"
    console = _Console(file=io.StringIO(), width=200, color_system=None)
    table = Table(title="\x1b]0;T\x07")
    table.add_column("op")
    table.add_row("\x1b[31mred")
    table.add_row(Text.assemble(("\x1b[1m", "bold"), "tail"))
    console.print(table)
    console.print("[bold]plain[/bold] \x1b[5m")
    labelled(console, "error", "red", "model '\x1b[31m'")
    printed = console.file.getvalue()
    assert "\x1b" not in printed
    for shown in ("\\x1b]0;T\\x07", "\\x1b[31mred", "\\x1b[1mtail", "plain \\x1b[5m", "error: model '\\x1b[31m'"):
        assert shown in printed

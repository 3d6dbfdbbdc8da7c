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

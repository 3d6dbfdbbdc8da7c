"""analyze() end to end on small models with made-up ceilings: accounting, JSON, CSV, store, figures."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from rooftune.analysis import Analysis, analyze, write_csv
from rooftune.errors import InvalidArgument, WorkloadError
from rooftune.platform import current_platform
from rooftune.report import plot_analysis
from rooftune.store import Store

CNN = "tests.analysis.tiny_models:small_cnn"
REQUIRED = {"model", "batch", "end_to_end_s", "lower_bound_s", "flops", "bytes", "unattributed_s", "ops"}
OP_REQUIRED = {"name", "kind", "shapes", "flops", "bytes", "time_s", "bound", "efficiency", "headroom_s"}


@pytest.fixture(scope="module")
def cnn_analysis(tmp_path_factory: pytest.TempPathFactory) -> tuple[Analysis, Path]:
    from rooftune.store import Store
    from tests.conftest import make_ceilings

    db = tmp_path_factory.mktemp("a") / "r.db"
    platform = current_platform()
    c = make_ceilings(platform)
    with Store(db) as s:
        s.save_ceilings(platform, c.to_dict(), quick=False, threads=c.threads)
    [a] = analyze(CNN, budget_s=0.5, db=str(db), threads=1)
    return a, db


def test_every_op_is_timed_costed_and_placed(cnn_analysis: tuple[Analysis, Path]) -> None:
    a, _ = cnn_analysis
    assert a.capture == "torch.export" and a.capture_note == ""
    kinds = [o.kind for o in a.ops]
    assert kinds.count("conv") == 2 and kinds.count("linear") == 1 and "norm" in kinds
    assert all(o.time_s > 0 for o in a.ops)
    assert a.runs >= 10  # MIN_RUNS
    assert a.end_to_end_s > 0 and a.ops_median_sum_s == pytest.approx(math.fsum(o.time_s for o in a.ops))
    assert a.ops_sum_s > 0 and a.unattributed_s == pytest.approx(a.end_to_end_s - a.ops_sum_s)
    assert a.accounting_ci[0] <= a.accounting_ratio <= a.accounting_ci[1]
    assert a.lower_bound_s == pytest.approx(math.fsum(o.lower_bound_s for o in a.ops))
    # Conv 1: 2 * 8 * 32 * 32 * 3 * 3 * 3; depthwise: 2 * 8 * 32 * 32 * 1 * 3 * 3; linear 2 * 8 * 10.
    convs = [o.flops for o in a.ops if o.kind == "conv"]
    assert convs == [2 * 8 * 32 * 32 * 27, 2 * 8 * 32 * 32 * 9]
    assert next(o.flops for o in a.ops if o.kind == "linear") == 2 * 8 * 10
    for o in a.ops:
        assert o.lower_bound_s >= 2e-6  # never below the dispatch floor of the made-up ceilings
        assert o.bound in {"compute", "overhead", "memory-L1", "memory-L2", "memory-L3", "memory-DRAM"}
    assert a.roofs["peak_flops"]["fp32"] == 100e9  # 1 thread of the made-up ceilings


def test_json_has_the_documented_fields_and_round_trips(cnn_analysis: tuple[Analysis, Path]) -> None:
    a, _ = cnn_analysis
    d = json.loads(json.dumps(a.to_dict()))
    assert REQUIRED <= set(d)
    assert all(OP_REQUIRED <= set(o) for o in d["ops"])
    assert d["model"] == "tests.analysis.tiny_models:small_cnn" and d["batch"] == 1
    assert Analysis.from_dict(d).to_dict() == d
    assert [o["index"] for o in d["opportunities"]] == sorted(
        (o["index"] for o in d["ops"] if o["headroom_s"] and o["headroom_s"] > 0),
        key=lambda i: -d["ops"][i]["headroom_s"],
    )[: len(d["opportunities"])]
    # the same headrooms with alike ops together: every op with headroom in one group at most
    grouped = [i for g in d["opportunity_groups"] for i in g["ops"]]
    assert len(grouped) == len(set(grouped)) and d["opportunity_groups"]
    for g in d["opportunity_groups"]:
        assert g["count"] == len(g["ops"]) and g["headroom_s"] == pytest.approx(sum(d["ops"][i]["headroom_s"] for i in g["ops"]))


def test_analysis_is_stored_with_its_platform(cnn_analysis: tuple[Analysis, Path]) -> None:
    a, db = cnn_analysis
    with Store(db) as s:
        rows = s.analyses(current_platform().id)
    assert len(rows) == 1 and rows[0]["model"] == a.model and rows[0]["ops"] == a.to_dict()["ops"]


def test_csv_has_one_row_per_op(cnn_analysis: tuple[Analysis, Path], tmp_path: Path) -> None:
    a, _ = cnn_analysis
    path = write_csv([a], tmp_path / "ops.csv")
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == len(a.ops)
    assert rows[0]["name"] == a.ops[0].name and float(rows[0]["time_s"]) == a.ops[0].time_s
    assert json.loads(rows[0]["shapes"])["inputs"][0] == [1, 3, 32, 32]


def test_hooks_fallback_is_said_in_the_result(ceilings_db: Path) -> None:
    [a] = analyze("tests.analysis.tiny_models:branchy", budget_s=0.3, db=str(ceilings_db), save=False)
    assert a.capture == "module hooks"
    assert "torch.export failed" in a.capture_note
    assert any("torch.export failed" in w for w in a.warnings)
    assert [o.target for o in a.ops] == ["aten.linear"]  # the branch taken; relu is functional, unseen


def test_trajectory_over_batch_and_threads_and_its_figures(ceilings_db: Path, tmp_path: Path) -> None:
    usable = current_platform().usable_cores
    threads = [1, 2] if usable >= 2 else [1]
    out = analyze(CNN, batch=[1, 4], threads=threads, budget_s=0.3, db=str(ceilings_db))
    assert [(a.batch, a.threads) for a in out] == [(b, t) for b in (1, 4) for t in threads]
    assert out[-1].input_shapes == ((4, 3, 32, 32),)
    assert out[-1].flops == pytest.approx(4 * out[0].flops)
    with Store(ceilings_db) as s:
        assert s.count("analyses") == len(out)
    files = plot_analysis(out, tmp_path, "png")
    assert len(files) == 2 * len(out) + 1
    for f in files:
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f.stat().st_size > 10_000


def test_bad_input_fails_before_anything_is_stored(ceilings_db: Path) -> None:
    with pytest.raises(InvalidArgument, match="thread count 0"):
        analyze(CNN, threads=0, db=str(ceilings_db))
    with pytest.raises(InvalidArgument, match="budget"):
        analyze(CNN, budget_s=-1, db=str(ceilings_db))
    with pytest.raises(WorkloadError, match="not an nn.Module"):
        analyze("tests.analysis.tiny_models:not_a_module", db=str(ceilings_db))
    with pytest.raises(WorkloadError, match="fails on input 1x5x5"):
        analyze(CNN, inputs=[(1, 5, 5)], db=str(ceilings_db))
    with Store(ceilings_db) as s:
        assert s.count("analyses") == 0

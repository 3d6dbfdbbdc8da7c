"""`rooftune data prune`: lists what was unused for N days, removes it only with --apply, and
never touches ceilings, profiled rows or a study still in use."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from sqlalchemy import update

from rooftune.errors import InvalidArgument
from rooftune.platform import current_platform
from rooftune.store import Store, modules_dir, prune
from rooftune.store.schema import AnalysisRow, TrialRow
from tests.conftest import make_ceilings
from tests.test_cli import assert_one_line_error, rooftune_in_process

DAY = 86400.0


def _age(path: Path, days: float) -> None:
    t = time.time() - days * DAY
    os.utime(path, (t, t))


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data folder (XDG_DATA_HOME) with an old and a fresh exported module and a transferred
    model, and a store with old and recent rows of every kind; returns the store's path."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    folder = modules_dir()
    folder.mkdir(parents=True)
    for name, days in (("Old-aaaa.pt2", 60), ("Fresh-bbbb.pt2", 1)):
        (folder / name).write_bytes(b"x" * 1000)
        _age(folder / name, days)
    model = folder.parent / "perfmodel-p.pkl"
    model.write_bytes(b"model")
    _age(model, 400)

    db = tmp_path / "r.db"
    platform = current_platform()
    old = time.time() - 60 * DAY
    with Store(db) as s:
        c = make_ceilings(platform)
        s.save_ceilings(platform, c.to_dict(), quick=False, threads=c.threads)
        s.save_profiles(platform, [{"spec_key": "k", "spec": {}, "primitive": "p", "threads": 1, "status": "ok",
                                    "median_s": 1e-3, "created_at": old}])
        for study, key in (("idle", "a"), ("idle", "b"), ("busy", "a"), ("busy", "b")):
            s.save_trial(platform, study_key=study, config_key=key, status="ok", config={"runtime": "eager"},
                         result={"latency_s": 0.01})
        s.save_analysis(platform, {"ops": [1, 2, 3]}, model="resnet18", batch=1, threads=1)
        s.save_analysis(platform, {"ops": [1]}, model="lstm", batch=1, threads=1)
        with s.transaction() as t:  # a study is in use while any trial of it is recent
            t.execute(update(TrialRow).where(TrialRow.study_key == "idle").values(created_at=old))
            t.execute(update(TrialRow).where(TrialRow.study_key == "busy", TrialRow.config_key == "a")
                      .values(created_at=old))
            t.execute(update(AnalysisRow).where(AnalysisRow.model == "resnet18").values(created_at=old))
    return db


def test_a_dry_run_lists_what_is_unused_and_removes_nothing(data: Path) -> None:
    with Store(data) as s:
        r = prune(s, 30)
        assert [(i.kind, Path(i.name).name if i.kind == "module" else i.name, i.rows) for i in r.items] == [
            ("module", "Old-aaaa.pt2", 0), ("study", "idle", 2), ("analyses", "resnet18", 1)]
        assert not r.applied and r.rows == 3
        assert r.items[0].size_bytes == 1000 and all(i.size_bytes > 0 for i in r.items)
        assert (s.count("trials"), s.count("analyses")) == (4, 2)
    assert (modules_dir() / "Old-aaaa.pt2").exists()


def test_apply_removes_them_and_nothing_else(data: Path) -> None:
    with Store(data) as s:
        r = prune(s, 30, apply=True)
        assert r.applied and r.rows == 3
        assert [t["config_key"] for t in s.trials("busy")] == ["a", "b"] and not s.trials("idle")
        assert s.count("analyses") == 1 and s.analyses(model="lstm")
        assert (s.count("ceilings"), s.count("profiles"), s.count("platforms")) == (1, 1, 1)
        assert not prune(s, 30).items
    assert sorted(p.name for p in modules_dir().iterdir()) == ["Fresh-bbbb.pt2"]
    assert (modules_dir().parent / "perfmodel-p.pkl").exists()
    with Store(data) as s:  # what is kept is reached in its turn
        assert {i.kind for i in prune(s, 0.5, now=time.time() + DAY).items} == {"module", "study", "analyses"}


def test_the_command_lists_then_applies(data: Path) -> None:
    dry = rooftune_in_process("data", "prune", "--db", str(data))
    assert dry.returncode == 0, dry.stderr
    assert "Old-aaaa.pt2" in "".join(dry.stdout.split()) and "Fresh-bbbb" not in dry.stdout
    assert "would remove 3 item(s): 3 store rows" in dry.stdout and "--apply removes them" in dry.stdout
    assert (modules_dir() / "Old-aaaa.pt2").exists()

    done = rooftune_in_process("data", "prune", "--db", str(data), "--apply", "--older-than", "30")
    assert done.returncode == 0, done.stderr
    assert "removed 3 item(s): 3 store rows" in done.stdout
    assert not (modules_dir() / "Old-aaaa.pt2").exists()
    again = rooftune_in_process("data", "prune", "--db", str(data))
    assert "would remove 0 item(s)" in again.stdout


@pytest.mark.parametrize("days", ["0", "-3", "nan"])
def test_a_horizon_that_is_not_a_positive_number_of_days_is_refused(data: Path, days: str) -> None:
    assert_one_line_error(rooftune_in_process("data", "prune", "--db", str(data), "--older-than", days), "--older-than")
    with Store(data) as s, pytest.raises(InvalidArgument, match="older_than_days"):
        prune(s, float(days))


def test_a_store_that_does_not_exist_is_not_created(tmp_path: Path) -> None:
    proc = rooftune_in_process("data", "prune", "--db", str(tmp_path / "none.db"))
    assert_one_line_error(proc, "no store at")
    assert not (tmp_path / "none.db").exists()

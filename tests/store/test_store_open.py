"""Opening a store: schema migration, and every file that must be refused untouched."""

from __future__ import annotations

import os
import random
import re
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from rooftune.errors import StoreError
from rooftune.platform import Platform
from rooftune.store import MIGRATIONS, SCHEMA_VERSION, Store
from rooftune.store.schema import CeilingsRow, PlatformRow, SchemaInfo


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def schema_rows(path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT key, value FROM schema_info ORDER BY key").fetchall()


# --------------------------------------------------------------------------- migration


def build_version_1(path: Path, platform: Platform) -> None:
    """A database as rooftune schema version 1 left it: no measurements table."""
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        MIGRATIONS[1](conn)
        conn.execute(SchemaInfo.__table__.insert().values(key="schema_version", value="1"))
        conn.execute(
            PlatformRow.__table__.insert().values(
                id=platform.id, cpu_model=platform.cpu_model, created_at=1.0, fingerprint=platform.to_dict()
            )
        )
        conn.execute(
            CeilingsRow.__table__.insert().values(
                platform_id=platform.id,
                created_at=1.0,
                quick=False,
                threads="0,1",
                rooftune_version="0.0.9",
                data={"from": "v1"},
            )
        )
    engine.dispose()


def test_version_1_database_is_upgraded(tmp_path: Path, fake_platform: Platform) -> None:
    path = tmp_path / "old.db"
    build_version_1(path, fake_platform)
    assert tables(path) == {"schema_info", "platforms", "ceilings"}
    with Store(path) as s:
        assert s.schema_version() == SCHEMA_VERSION == 10
        assert s.platforms() == [fake_platform]  # old rows survive
        assert s.load_ceilings(fake_platform.id, threads=[0, 1]) == {"from": "v1"}
        new = {"label": "new", "samples": [1.0, 2.0, 3.0]}
        s.save_ceilings(fake_platform, {"from": "v2"}, quick=True, threads=[0], measurements=[new])
        assert s.count("measurements") == 1
        s.save_analysis(fake_platform, {"model": "m"}, model="m", batch=1, threads=1)
        assert [a["model"] for a in s.analyses(fake_platform.id)] == ["m"]
    assert tables(path) == {"schema_info", "platforms", "ceilings", "measurements", "analyses", "trials", "profiles",
                            "fleet_runs", "sweep_points"}
    assert schema_rows(path) == [("schema_version", str(SCHEMA_VERSION))]


def test_reopening_a_current_database_changes_nothing(tmp_path: Path, fake_platform: Platform) -> None:
    path = tmp_path / "r.db"
    with Store(path) as s:
        s.save_ceilings(fake_platform, {"x": 1}, quick=False, threads=[0])
    with Store(path) as s:
        assert s.schema_version() == SCHEMA_VERSION
        assert (s.count("platforms"), s.count("ceilings")) == (1, 1)
    assert schema_rows(path) == [("schema_version", str(SCHEMA_VERSION))]


def test_empty_file_becomes_a_store(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.write_bytes(b"")  # SQLite treats an empty file as an empty database
    with Store(path) as s:
        assert s.schema_version() == SCHEMA_VERSION


# --------------------------------------------------------------------------- refused files


@pytest.mark.parametrize("version,fragments", [
    ("99", ["schema version 99", f"newer than this rooftune supports ({SCHEMA_VERSION})"]),
    ("abc", ["has schema version 'abc', not a number"]),
])
def test_a_newer_or_damaged_schema_is_refused_untouched(tmp_path: Path, version: str, fragments: list[str]) -> None:
    path = tmp_path / "other.db"
    Store(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE schema_info SET value = ? WHERE key = 'schema_version'", (version,))
    db.close()
    before = path.read_bytes()
    with pytest.raises(StoreError) as exc:
        Store(path)
    assert all(f in str(exc.value) for f in fragments)
    assert path.read_bytes() == before
    assert schema_rows(path) == [("schema_version", version)]


def test_corrupt_file_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"
    path.write_bytes(random.Random(0).randbytes(8192))
    before = path.read_bytes()
    with pytest.raises(StoreError, match="is not a SQLite database"):
        Store(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corrupt.db"]


def test_text_file_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("rooftune results\n" * 200)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not a SQLite database"):
        Store(path)
    assert path.read_bytes() == before


def _foreign_database(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO users (name) VALUES ('ada')")
    db.close()


def test_unrelated_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    _foreign_database(path)
    with pytest.raises(StoreError, match="is not a rooftune database \\(it has tables users\\)"):
        Store(path)
    assert tables(path) == {"users"}
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT name FROM users").fetchall() == [("ada",)]


def test_unrelated_sqlite_database_bytes_are_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    _foreign_database(path)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not a rooftune database"):
        Store(path)
    assert path.read_bytes() == before


# --------------------------------------------------------------------------- unusable locations


def test_parent_is_a_file(tmp_path: Path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    with pytest.raises(StoreError, match=re.escape(f"database directory '{blocker}' is a file")):
        Store(blocker / "x.db")
    assert blocker.read_text() == "x"


def test_a_chosen_directory_that_does_not_exist_is_refused_not_created(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "mistyped" / "dir"
    with pytest.raises(StoreError, match=re.escape(f"database directory '{missing}' does not exist")):
        Store(missing / "x.db")
    monkeypatch.setenv("ROOFTUNE_DB", str(missing / "env.db"))
    with pytest.raises(StoreError, match=re.escape(f"database directory '{missing}' does not exist")):
        Store()
    assert list(tmp_path.iterdir()) == []


def test_the_default_directory_is_created_or_refused_in_one_line(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROOFTUNE_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    with Store() as s:
        assert s.schema_version() == SCHEMA_VERSION
    assert (tmp_path / "data" / "rooftune" / "rooftune.db").is_file()
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    monkeypatch.setenv("XDG_DATA_HOME", str(blocker / "sub"))
    expected = f"cannot create the database directory '{blocker / 'sub' / 'rooftune'}'"
    with pytest.raises(StoreError, match=re.escape(expected)):
        Store()
    assert blocker.read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_directory(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(StoreError, match=re.escape(f"database directory '{locked}' is not writable")):
            Store(locked / "x.db")
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o700)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_unreadable_database_file(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    Store(path).close()
    path.chmod(0o200)
    try:
        with pytest.raises(StoreError, match="is not readable and writable by this user"):
            Store(path)
    finally:
        path.chmod(0o600)


def test_version_5_profiles_gain_pass_medians_and_probe_readings(tmp_path: Path, fake_platform: Platform) -> None:
    path = tmp_path / "v5.db"
    row = {"spec_key": "k" * 16, "spec": {}, "primitive": "p", "threads": 1, "status": "ok", "median_s": 0.002,
           "iqr_s": 0.0001, "repetitions": 6, "reason": "", "warnings": [], "sources": ["m"]}
    with Store(path) as s:
        s.save_profiles(fake_platform, [row])
    with sqlite3.connect(path) as db:  # as schema 5 left it: no pass_medians column
        db.execute("ALTER TABLE profiles DROP COLUMN pass_medians")
        db.execute("ALTER TABLE profiles DROP COLUMN pass_canary")
        db.execute("ALTER TABLE profiles DROP COLUMN fastest_s")
        db.execute("UPDATE schema_info SET value = '5' WHERE key = 'schema_version'")
    with Store(path) as s:
        assert s.schema_version() == SCHEMA_VERSION == 10
        [old] = s.profiles()
        assert old["median_s"] == 0.002 and old["pass_medians"] == [0.002]  # a stored row counts as one pass
        assert old["pass_canary"] is None and old["fastest_s"] is None  # timed without the probe, samples not kept
        s.update_profiles(fake_platform.id, [{**old, "median_s": 0.001, "pass_medians": [0.002, 0.001],
                                              "pass_canary": [None, 1e-4], "fastest_s": 0.0009}])
        assert s.profiles()[0]["pass_medians"] == [0.002, 0.001] and s.profiles()[0]["pass_canary"] == [None, 1e-4]
        assert s.profiles()[0]["fastest_s"] == 0.0009
        with pytest.raises(StoreError, match="no profiled row"):  # all or nothing
            s.update_profiles(fake_platform.id, [{**old, "median_s": 0.0005}, {**old, "primitive": "missing"}])
        assert s.profiles()[0]["median_s"] == 0.001
    with sqlite3.connect(path) as db:
        assert {"pass_medians", "pass_canary", "fastest_s"} <= {r[1] for r in db.execute("PRAGMA table_info(profiles)")}

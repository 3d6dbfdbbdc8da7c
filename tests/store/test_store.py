"""The store: round trips, which ceilings are returned, transactions and SQLite settings; every
test that takes ``db_url`` or ``store`` runs on SQLite and on PostgreSQL (tests/store/conftest.py)."""

from __future__ import annotations

import itertools
import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import text

from rooftune.bench import Measurement, Method, Policy
from rooftune.errors import StoreError
from rooftune.platform import Platform
from rooftune.store import DB_ENV, SCHEMA_VERSION, Store, default_db_path, resolve_url
from rooftune.store.schema import PlatformRow

CEILINGS = {
    "peak_flops": {"fp32": 1.2345e12, "bf16": 2.5e12},
    "bandwidth_bytes_s": {"L1d": 5.0e11, "L2": 2.5e11, "L3": 1.0e11, "dram": 2.0e10},
    "dispatch_s": 3.2e-6,
}


def measurement(label: str, samples: tuple[float, ...]) -> dict:
    m = Measurement(
        label=label,
        samples=samples,
        number=10,
        method=Method(policy=Policy(), stop_reason="stable", warmup_samples=3),
        params={"dtype": "fp32"},
        platform_id="p",
        host="h",
        started_at=1700000000.5,
    )
    return m.to_dict()


@pytest.fixture
def fake_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """created_at = 1, 2, 3 ... in save order, so "newest" does not depend on clock resolution."""
    counter = itertools.count(1)
    monkeypatch.setattr("rooftune.store.store.time", SimpleNamespace(time=lambda: float(next(counter))))


def sql(store: Store, query: str) -> list[tuple]:
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(query)).all()]


@pytest.fixture
def store(db_url: str, fake_platform: Platform):
    with Store(db_url) as s:
        s.save_platform(fake_platform)
        yield s


@pytest.fixture
def other_platform(fake_root, collect_on) -> Platform:
    return collect_on(fake_root("intel_spr"))


# --------------------------------------------------------------------------- round trip


def test_new_store_has_current_schema(db_url: str) -> None:
    with Store(db_url) as s:
        assert s.schema_version() == SCHEMA_VERSION == 10
        assert s.url == (db_url if "://" in db_url else f"sqlite:///{db_url}")
        assert (s.count("platforms"), s.count("ceilings"), s.count("measurements")) == (0, 0, 0)


def test_ceilings_and_measurements_round_trip(db_url: str, fake_platform: Platform) -> None:
    path = db_url
    m1 = measurement("peak_fp32", (3.0e-3, 1.0e-3, 2.0e-3))
    m2 = measurement("stream_triad", (5.0e-4,))
    with Store(path) as s:
        assert s.save_platform(fake_platform) == fake_platform.id
        cid = s.save_ceilings(
            fake_platform,
            CEILINGS,
            quick=False,
            threads=[1, 0],
            measurements=[m1, m2],
            rooftune_version="0.1.0",
        )
        assert s.load_ceilings(fake_platform.id, threads=[0, 1]) == CEILINGS
    # Everything is on disk: a fresh Store sees it.
    with Store(path) as s:
        assert s.schema_version() == SCHEMA_VERSION
        assert s.platforms() == [fake_platform]
        assert s.load_ceilings(fake_platform.id, threads=(0, 1)) == CEILINGS
        assert s.measurements() == [m1, m2]
        assert s.measurements(platform_id=fake_platform.id, label="stream_triad") == [m2]
        assert s.measurements(platform_id="0000000000000000") == []
        assert Measurement.from_dict(s.measurements(label="peak_fp32")[0]) == Measurement.from_dict(m1)
        assert (s.count("platforms"), s.count("ceilings"), s.count("measurements")) == (1, 1, 2)
        row = sql(s, "SELECT platform_id, quick, threads, rooftune_version FROM ceilings")[0]
        assert row == (fake_platform.id, False, "0,1", "0.1.0")
        rows = sql(s, "SELECT label, ceilings_id, median_s FROM measurements ORDER BY id")
        assert rows == [("peak_fp32", cid, 2.0e-3), ("stream_triad", cid, 5.0e-4)]


def test_save_platform_is_idempotent(store: Store, fake_platform: Platform, other_platform: Platform) -> None:
    store.save_platform(fake_platform)
    store.save_platform(other_platform)
    assert store.count("platforms") == 2
    assert {p.id for p in store.platforms()} == {fake_platform.id, other_platform.id}


# --------------------------------------------------------------------------- which ceilings load


def test_full_run_is_preferred_over_a_newer_quick_one(
    store: Store, fake_platform: Platform, fake_time: None
) -> None:
    pid = fake_platform.id
    store.save_ceilings(fake_platform, {"run": "full"}, quick=False, threads=[0, 1])
    store.save_ceilings(fake_platform, {"run": "quick"}, quick=True, threads=[0, 1])
    assert store.load_ceilings(pid, threads=[0, 1]) == {"run": "full"}
    assert store.load_ceilings(pid, threads=[0, 1], allow_quick=False) == {"run": "full"}


def test_newest_full_run_wins(store: Store, fake_platform: Platform, fake_time: None) -> None:
    for run in ("full-1", "full-2"):
        store.save_ceilings(fake_platform, {"run": run}, quick=False, threads=[0])
    store.save_ceilings(fake_platform, {"run": "quick-3"}, quick=True, threads=[0])
    assert store.load_ceilings(fake_platform.id, threads=[0]) == {"run": "full-2"}


def test_quick_only_is_returned_unless_disallowed(
    store: Store, fake_platform: Platform, fake_time: None
) -> None:
    store.save_ceilings(fake_platform, {"run": "quick-1"}, quick=True, threads=[0])
    store.save_ceilings(fake_platform, {"run": "quick-2"}, quick=True, threads=[0])
    assert store.load_ceilings(fake_platform.id, threads=[0]) == {"run": "quick-2"}
    assert store.load_ceilings(fake_platform.id, threads=[0], allow_quick=False) is None


def test_threads_key_is_order_insensitive_but_exact(store: Store, fake_platform: Platform) -> None:
    store.save_ceilings(fake_platform, {"threads": "1,2"}, quick=False, threads=(2, 1))
    store.save_ceilings(fake_platform, {"threads": "2,10"}, quick=False, threads=[10, 2])
    pid = fake_platform.id
    assert store.load_ceilings(pid, threads=[1, 2]) == {"threads": "1,2"}
    assert store.load_ceilings(pid, threads=(2, 1)) == {"threads": "1,2"}
    assert store.load_ceilings(pid, threads=[2, 10]) == {"threads": "2,10"}
    assert store.load_ceilings(pid, threads=[1]) is None
    assert store.load_ceilings(pid, threads=[1, 2, 3]) is None


def test_ceilings_are_per_platform(store: Store, fake_platform: Platform, other_platform: Platform) -> None:
    store.save_platform(other_platform)
    store.save_ceilings(fake_platform, {"on": "amd"}, quick=False, threads=[0])
    store.save_ceilings(other_platform, {"on": "intel"}, quick=False, threads=[0])
    assert store.load_ceilings(fake_platform.id, threads=[0]) == {"on": "amd"}
    assert store.load_ceilings(other_platform.id, threads=[0]) == {"on": "intel"}
    assert store.load_ceilings("0000000000000000", threads=[0]) is None


# --------------------------------------------------------------------------- SQLite settings


def test_database_is_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    Store(path).close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_foreign_keys_are_enforced(store: Store) -> None:
    from rooftune.store.schema import CeilingsRow

    with pytest.raises(StoreError, match="FOREIGN KEY constraint failed|violates foreign key constraint"):
        with store.transaction() as s:
            s.add(
                CeilingsRow(
                    platform_id="nope", created_at=0.0, quick=False, threads="0", rooftune_version="", data={}
                )
            )
    assert store.count("ceilings") == 0


# --------------------------------------------------------------------------- transactions


def test_interrupted_transaction_writes_nothing(store: Store) -> None:
    before = store.count("platforms")
    with pytest.raises(RuntimeError, match="interrupted"):
        with store.transaction() as s:
            s.add(PlatformRow(id="deadbeefdeadbeef", cpu_model="x", created_at=0.0, fingerprint={}))
            s.flush()  # the INSERT has reached the database
            raise RuntimeError("interrupted")
    assert store.count("platforms") == before


def test_database_errors_become_store_errors(store: Store, fake_platform: Platform) -> None:
    with pytest.raises(StoreError, match="UNIQUE constraint failed: platforms.id|duplicate key value violates unique"):
        with store.transaction() as s:
            s.add(PlatformRow(id=fake_platform.id, cpu_model="dup", created_at=0.0, fingerprint={}))
    assert store.count("platforms") == 1


def test_failed_save_ceilings_leaves_no_partial_rows(store: Store, fake_platform: Platform) -> None:
    good = measurement("ok", (1.0,))
    bad = {"label": "broken"}  # no "samples": KeyError after the ceilings row was flushed
    with pytest.raises(KeyError, match="samples"):
        store.save_ceilings(fake_platform, CEILINGS, quick=False, threads=[0], measurements=[good, bad])
    assert (store.count("ceilings"), store.count("measurements")) == (0, 0)
    assert store.load_ceilings(fake_platform.id, threads=[0]) is None


def test_save_ceilings_saves_a_new_platform(db_url: str, fake_platform: Platform) -> None:
    # The platform row must be inserted before the ceilings row that refers to it.
    with Store(db_url) as s:
        s.save_ceilings(fake_platform, CEILINGS, quick=False, threads=[0, 1])
        assert (s.count("platforms"), s.count("ceilings")) == (1, 1)
        assert s.platforms() == [fake_platform]


def test_failed_save_ceilings_does_not_save_the_new_platform(db_url: str, fake_platform: Platform) -> None:
    with Store(db_url) as s:
        with pytest.raises(KeyError, match="samples"):
            s.save_ceilings(fake_platform, CEILINGS, quick=False, threads=[0], measurements=[{"label": "x"}])
        assert (s.count("platforms"), s.count("ceilings"), s.count("measurements")) == (0, 0, 0)


def test_stored_median_is_the_median(store: Store, fake_platform: Platform) -> None:
    m = measurement("even", (4.0, 1.0, 3.0, 2.0))
    store.save_ceilings(fake_platform, CEILINGS, quick=False, threads=[0], measurements=[m])
    ((median_s,),) = sql(store, "SELECT median_s FROM measurements")
    assert median_s == Measurement.from_dict(m).median == 2.5


# --------------------------------------------------------------------------- locating the database


def test_resolve_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv(DB_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert resolve_url(tmp_path / "a.db") == f"sqlite:///{tmp_path}/a.db"
    assert resolve_url("~/b.db") == f"sqlite:///{tmp_path}/b.db"
    assert resolve_url("postgresql://host/db") == "postgresql://host/db"
    assert default_db_path() == tmp_path / "data" / "rooftune" / "rooftune.db"
    assert resolve_url() == f"sqlite:///{tmp_path}/data/rooftune/rooftune.db"
    monkeypatch.setenv(DB_ENV, str(tmp_path / "env.db"))
    assert resolve_url() == f"sqlite:///{tmp_path}/env.db"
    assert resolve_url(tmp_path / "explicit.db") == f"sqlite:///{tmp_path}/explicit.db"


def test_default_store_uses_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DB_ENV, str(tmp_path / "env.db"))
    with Store() as s:
        assert s.schema_version() == SCHEMA_VERSION
    assert (tmp_path / "env.db").is_file()


def test_in_memory_store(fake_platform: Platform) -> None:
    with Store("sqlite://") as s:
        s.save_platform(fake_platform)
        s.save_ceilings(fake_platform, {"x": 1}, quick=True, threads=[0])
        assert s.load_ceilings(fake_platform.id, threads=[0]) == {"x": 1}


def test_bad_urls_are_store_errors() -> None:
    with pytest.raises(StoreError, match="invalid database URL '://nowhere'"):
        Store("://nowhere")
    with pytest.raises(StoreError, match="cannot use database URL 'nosuchdialect://host/db'"):
        Store("nosuchdialect://host/db")


def test_platform_fingerprint_is_stored_as_json(store: Store, fake_platform: Platform) -> None:
    ((fp,),) = sql(store, "SELECT CAST(fingerprint AS TEXT) FROM platforms")
    assert json.loads(fp) == json.loads(json.dumps(fake_platform.to_dict()))


def test_a_json_column_holds_strict_json(store: Store, fake_platform: Platform) -> None:
    """NaN and infinities in any JSON column are stored as null (no notes: a row reads back with
    its keys), where SQLite's JSON functions and PostgreSQL refuse NaN and Infinity."""
    import math

    def refuse(token: str) -> object:
        raise ValueError(token)

    store.save_analysis(fake_platform, {"ratio": math.nan, "ci": [1.0, math.inf], "low": -math.inf},
                        model="m", batch=1, threads=1)
    [(raw,)] = sql(store, "SELECT CAST(data AS TEXT) FROM analyses")
    assert json.loads(raw, parse_constant=refuse) == {"ratio": None, "ci": [1.0, None], "low": None}

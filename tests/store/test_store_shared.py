"""A store that several machines share: concurrent writers without lost or duplicate rows,
trials unique per study and configuration, migrations and refusals, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from rooftune.errors import StoreError
from rooftune.platform import Platform
from rooftune.store import SCHEMA_VERSION, Store
from tests import pg

WRITER = r"""
import json, os, sys, time
from pathlib import Path
from rooftune.platform import Platform
from rooftune.store import Store

url, platform_file, go, first, count = sys.argv[1:]
platform = Platform.from_dict(json.loads(Path(platform_file).read_text()))
deadline = time.monotonic() + 60
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit("never told to go")
    time.sleep(0.001)
added = 0
with Store(url) as store:
    for i in range(int(first), int(first) + int(count), 10):
        rows = [{"spec_key": f"s{j:05d}", "spec": {"j": j}, "primitive": "p", "threads": 1, "status": "ok",
                 "median_s": 1e-3, "iqr_s": 0.0, "repetitions": 1, "sources": [f"w{first}"]}
                for j in range(i, i + 10)]
        added += store.save_profiles(platform, rows)
print(added)
"""


def sql(store: Store, query: str) -> list[tuple]:
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(query)).all()]


def test_concurrent_writers_of_overlapping_rows_lose_none_and_store_none_twice(
        db_url: str, fake_platform: Platform, tmp_path: Path) -> None:
    """Four processes store 60 rows each, rows 30..119 by two of them: each of the 150 distinct
    rows is stored once, and the writers' counts of added rows sum to 150."""
    Store(db_url).close()  # created before, so the writers race on rows, not on the schema
    platform_file = tmp_path / "platform.json"
    platform_file.write_text(json.dumps(fake_platform.to_dict()))
    go = tmp_path / "go"
    firsts = [0, 30, 60, 90]  # each writer stores rows first..first+59
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, db_url, str(platform_file), str(go), str(f), "60"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for f in firsts]
    time.sleep(0.5)
    go.touch()
    results = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
    with Store(db_url) as s:
        keys = sql(s, "SELECT spec_key, count(*) FROM profiles GROUP BY spec_key")
        assert sorted(k for k, _ in keys) == [f"s{j:05d}" for j in range(150)]
        assert all(n == 1 for _, n in keys)
        assert sum(int(out) for out, _ in results) == 150
        assert s.count("platforms") == 1


def test_a_trial_is_stored_once_per_study_and_configuration(db_url: str, fake_platform: Platform) -> None:
    with Store(db_url) as s:
        first = s.save_trial(fake_platform, study_key="st", config_key="c1", status="ok", config={"a": 1},
                             result={"t": 1.0})
        again = s.save_trial(fake_platform, study_key="st", config_key="c1", status="ok", config={"a": 1},
                             result={"t": 2.0})
        other = s.save_trial(fake_platform, study_key="st2", config_key="c1", status="ok", config={"a": 1},
                             result={"t": 3.0})
        assert first == again != other
        assert [t["result"] for t in s.trials("st")] == [{"t": 1.0}]


def test_trials_from_threads_at_once_are_stored_once(db_url: str, fake_platform: Platform) -> None:
    with Store(db_url) as s:
        s.save_platform(fake_platform)
        ids: list[int] = []
        errors: list[BaseException] = []

        def write() -> None:
            try:
                for i in range(10):
                    ids.append(s.save_trial(fake_platform, study_key="st", config_key=f"c{i}", status="ok",
                                            config={}, result={}))
            except BaseException as exc:  # noqa: BLE001 (reported below)
                errors.append(exc)

        threads = [threading.Thread(target=write) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert len(s.trials("st")) == 10 and len(set(ids)) == 10


def test_a_version_8_store_with_duplicate_trials_is_upgraded(db_url: str, fake_platform: Platform) -> None:
    with Store(db_url) as s:
        s.save_trial(fake_platform, study_key="st", config_key="c", status="ok", config={}, result={"n": 1})
        with s.engine.begin() as conn:
            conn.execute(text("DROP INDEX uq_trial"))
            conn.execute(text("DROP TABLE fleet_runs"))
            conn.execute(text("INSERT INTO trials (platform_id, study_key, config_key, created_at, status, config, "
                              "result) SELECT platform_id, study_key, config_key, created_at, status, config, "
                              "result FROM trials"))
            conn.execute(text("UPDATE schema_info SET value = '8' WHERE key = 'schema_version'"))
        assert len(s.trials("st")) == 2
    with Store(db_url) as s:
        assert s.schema_version() == SCHEMA_VERSION
        assert [t["result"] for t in s.trials("st")] == [{"n": 1}]
        assert s.count("fleet_runs") == 0


def test_a_store_of_a_newer_schema_is_refused_untouched(db_url: str) -> None:
    with Store(db_url) as s, s.engine.begin() as conn:
        conn.execute(text("UPDATE schema_info SET value = '99' WHERE key = 'schema_version'"))
    with pytest.raises(StoreError, match=f"schema version 99, newer than this rooftune supports \\({SCHEMA_VERSION}\\)"):
        Store(db_url)
    engine = create_engine(db_url if "://" in db_url else f"sqlite:///{db_url}")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT key, value FROM schema_info")).all() == [("schema_version", "99")]
        assert "fleet_runs" in inspect(conn).get_table_names()
    engine.dispose()


def test_a_server_that_does_not_answer_is_named_within_10_s() -> None:
    """A port that accepts connections and never speaks: the connect timeout ends the wait."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(StoreError) as e:
            Store(f"postgresql+psycopg://alice:pw-secret@127.0.0.1:{port}/rooftune")
        assert time.monotonic() - t0 < 10
    message = str(e.value)
    assert "\n" not in message and "pw-secret" not in message and f"alice:***@127.0.0.1:{port}" in message


def test_a_plain_postgresql_url_uses_psycopg(pg_server: pg.Server, fake_platform: Platform) -> None:
    url = pg_server.new_database().replace("postgresql+psycopg://", "postgresql://")
    with Store(url) as s:
        s.save_platform(fake_platform)
        assert s.url == url and s.engine.dialect.driver == "psycopg" and s.count("platforms") == 1

"""Two processes writing one store at once: every write lands, none fails."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from rooftune.platform import Platform

WRITER = r"""
import json, os, sys, time
from pathlib import Path
from rooftune.platform import Platform
from rooftune.store import Store

db, platform_file, ready, go, tag = sys.argv[1:]
platform = Platform.from_dict(json.loads(Path(platform_file).read_text()))
Path(ready).touch()
deadline = time.monotonic() + 60
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit("never told to go")
    time.sleep(0.001)
# Both writers open the (not yet existing) database at the same moment, then write.
with Store(db) as store:
    for i in range(30):
        store.save_ceilings(
            platform,
            {"writer": tag, "i": i},
            quick=bool(i % 2),
            threads=[0, 1],
            measurements=[{"label": f"{tag}-{i}", "samples": [1.0, 2.0, 3.0]}],
        )
print("done", tag)
"""


def test_two_writers_at_once(tmp_path: Path, fake_platform: Platform) -> None:
    db = tmp_path / "shared.db"
    platform_file = tmp_path / "platform.json"
    platform_file.write_text(json.dumps(fake_platform.to_dict()))
    go = tmp_path / "go"
    procs = []
    for tag in ("a", "b"):
        ready = tmp_path / f"ready-{tag}"
        cmd = [sys.executable, "-c", WRITER, str(db), str(platform_file), str(ready), str(go), tag]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append((ready, proc))
    try:
        deadline = time.monotonic() + 60
        while not all(ready.exists() for ready, _ in procs):
            assert all(p.poll() is None for _, p in procs), "a writer exited before starting"
            assert time.monotonic() < deadline, "writers did not start"
            time.sleep(0.01)
        go.touch()
        results = [p.communicate(timeout=120) for _, p in procs]
    finally:
        for _, p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for (_, p), (_, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
        assert "Traceback" not in err
    assert [out.strip() for out, _ in results] == ["done a", "done b"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM ceilings").fetchone()[0] == 60
        assert conn.execute("SELECT count(*) FROM measurements").fetchone()[0] == 60
        assert conn.execute("SELECT count(*) FROM platforms").fetchone()[0] == 1
        rows = conn.execute("SELECT json_extract(data, '$.writer'), count(*) FROM ceilings GROUP BY 1")
        per_writer = dict(rows.fetchall())
        assert per_writer == {"a": 30, "b": 30}
        # Every measurement points at the ceilings row of its own write.
        mismatched = conn.execute(
            "SELECT count(*) FROM measurements m JOIN ceilings c ON m.ceilings_id = c.id "
            "WHERE m.label != json_extract(c.data, '$.writer') || '-' || json_extract(c.data, '$.i')"
        ).fetchone()[0]
        assert mismatched == 0


OPENER = r"""
import os, sys, time
from pathlib import Path
from rooftune.store import Store

db, ready, go = sys.argv[1:]
Path(ready).touch()
deadline = time.monotonic() + 60
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit("never told to go")
    time.sleep(0.0005)
Store(db).close()
"""


def test_processes_creating_one_store_at_the_same_moment_all_open_it(tmp_path: Path) -> None:
    """Creating the store switches it to WAL, which SQLite refuses at once (no busy timeout) while
    another connection holds the file: seen as 'database is locked' in one open of ~60."""
    for round_ in range(3):
        db, go = tmp_path / f"s{round_}.db", tmp_path / f"go{round_}"
        readies = [tmp_path / f"ready{round_}-{i}" for i in range(4)]
        procs = [subprocess.Popen([sys.executable, "-c", OPENER, str(db), str(r), str(go)],
                                  stderr=subprocess.PIPE, text=True) for r in readies]
        deadline = time.monotonic() + 120
        while not all(r.exists() for r in readies):
            assert all(p.poll() is None for p in procs) and time.monotonic() < deadline, "an opener did not start"
            time.sleep(0.01)
        go.touch()
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"

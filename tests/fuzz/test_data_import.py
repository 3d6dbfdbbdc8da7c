"""`rooftune data import`: rows as a dataset file may hold them, from a real export's row with any
field (or any field of its platform fingerprint or spec) set to anything JSON or a CSV cell can
hold: random types, nesting, huge numbers, NaN, negatives. Checked, they are rows the store can
keep or a one-line InvalidArgument; imported, they are stored or the store is left exactly as it
was."""

from __future__ import annotations

import copy
import json
import math
import random
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rooftune.errors import InvalidArgument, RooftuneError
from rooftune.platform.fingerprint_check import fingerprint_problem
from rooftune.primitives import ConvSpec
from rooftune.profiling.dataset import (
    COLUMNS,
    JSON_COLUMNS,
    MAX_SECONDS,
    MAX_THREADS,
    OPTIONAL_COLUMNS,
    check_rows,
    import_profiles,
)
from rooftune.store import Store

SPEC = ConvSpec(1, 8, 12, 12, 16, 3, 3, padding=1)
#: A fingerprint as a real machine's export carries it (rooftune.platform.Platform.to_dict).
FINGERPRINT: dict[str, Any] = {
    "id": "24479ff201992cc0", "arch": "x86_64", "vendor": "AuthenticAMD", "cpu_model": "AMD EPYC 9R45",
    "microarchitecture": "zen5", "family": 26, "model": 2, "stepping": 1, "isa": ["avx2", "avx512f", "fma"],
    "effective_isa": ["avx2", "avx512f", "fma"], "isa_cap": None, "physical_cores": 2, "logical_cores": 2,
    "sockets": 1, "affinity": [0, 1], "cpu_quota": None, "usable_cores": 2,
    "caches": [{"name": "L1d", "level": 1, "kind": "Data", "size_bytes": 49152, "instances": [[0], [1]], "line_bytes": 64},
               {"name": "L2", "level": 2, "kind": "Unified", "size_bytes": 1048576, "instances": [[0], [1]],
                "line_bytes": 64}],
    "numa_nodes": 1, "openmp": {"name": "gnu", "library": "libgomp.so.1", "path": "/usr/lib/libgomp.so.1"},
    "library_versions": {"python": "3.11", "torch": "2.5.0"}, "kernel_env": {}, "hostname": "node",
}
#: A row as `data export` writes it to CSV (every cell text).
ROW: dict[str, Any] = {
    "platform_id": FINGERPRINT["id"], "platform": json.dumps(FINGERPRINT, sort_keys=True), "spec_key": SPEC.key(),
    "spec": json.dumps(SPEC.to_dict(), sort_keys=True), "primitive": "pytorch-default", "threads": "1",
    "status": "ok", "median_s": "0.001", "iqr_s": "1e-05", "repetitions": "12", "reason": "", "warnings": "[]",
    "sources": '["t"]', "created_at": "1700000000.0", "pass_medians": "[0.001]", "pass_canary": "[0.002]",
    "fastest_s": "0.0009",
}
assert check_rows([ROW], "good.csv")  # the template itself imports

#: Values that sit at an edge of what a field allows, or past every edge.
EDGES: list[Any] = [None, True, False, 0, 1, -1, 2, 4096, 4097, 8192, 2**31, 2**63, 10**30, -(10**40), 0.0, -0.0, 1e-300,
                    1e30, -1e30, 3600.0, 3600.5, float("nan"), float("inf"), float("-inf"), "", "lots", "1e30", "nan",
                    "-5", "0x10", "1_000", " 7 ", "\n", "\x00", "é", "Data", "ok", "pytorch-default", [], {}]
#: Fingerprint fields (of those its id is hashed from) another machine has.
OTHER_MACHINES: list[dict[str, Any]] = [{"cpu_model": "Another CPU"}, {"usable_cores": 1}, {"arch": "aarch64"},
                                        {"caches": FINGERPRINT["caches"][:1]}, {"numa_nodes": 2}]
#: Text that no JSON reader should recurse into: nested deeper than any parser's stack.
deep = st.integers(65, 2000).map(lambda n: "[" * n + "]" * n)


def any_value(rnd: random.Random, depth: int = 0) -> Any:
    """A value JSON can hold (and NaN, infinities), nested up to three levels."""
    kind = rnd.random()
    if kind < 0.45 or depth >= 3:
        return rnd.choice(EDGES)
    if kind < 0.6:
        return rnd.choice([rnd.randint(-(2**70), 2**70), rnd.uniform(-1e6, 1e6), rnd.random() * 10.0 ** rnd.randint(-320, 308)])
    if kind < 0.7:
        return "".join(chr(rnd.choice([rnd.randint(32, 126), rnd.randint(0, 0x2FFF)])) for _ in range(rnd.randint(0, 8)))
    if kind < 0.85:
        return [any_value(rnd, depth + 1) for _ in range(rnd.randint(0, 4))]
    return {rnd.choice(["id", "level", "size_bytes", "N", "x", ""]): any_value(rnd, depth + 1) for _ in range(rnd.randint(0, 4))}


def cell(value: Any, rnd: random.Random) -> Any:
    """``value`` as a CSV cell (text: JSON, or Python's str) or as parquet gives it (the value)."""
    how = rnd.random()
    if how < 0.3:
        return value
    if how < 0.4:
        return "[" * rnd.randint(65, 3000) + "]" * rnd.randint(0, 3000)  # nested past any bound (or cut short)
    return value if isinstance(value, str) else json.dumps(value) if how < 0.8 else str(value)


@st.composite
def rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    """One to three copies of the template row, each with a few fields changed: a field of its
    fingerprint, of a cache level of it or of its spec (or a new key), then a column. Which and
    to what come from one drawn seed, which keeps an example cheap to draw."""
    rnd = random.Random(draw(st.integers(0, 2**32)))
    out = []
    for _ in range(rnd.randint(1, 3)):
        row = dict(ROW)
        docs = {"platform": copy.deepcopy(FINGERPRINT), "spec": SPEC.to_dict()}
        for _ in range(rnd.choice([0, 1, 1, 2, 3])):
            where, value = rnd.choice(["platform", "platform", "spec", "cache", "column", "machine"]), any_value(rnd)
            if where == "machine":  # another machine under the template's id: what the store holds refuses it
                docs["platform"].update(rnd.choice(OTHER_MACHINES))
                continue
            if where == "column":
                row[rnd.choice(COLUMNS + OPTIONAL_COLUMNS)] = cell(value, rnd)
                continue
            caches = docs["platform"].get("caches")
            target = (caches[rnd.randrange(len(caches))] if where == "cache" and isinstance(caches, list) and caches
                      and all(isinstance(c, dict) for c in caches) else docs["spec" if where == "spec" else "platform"])
            keys = sorted(target) + ["", "surprise"]
            target[rnd.choice(keys)] = value
        for column, doc in docs.items():
            if row[column] == ROW[column]:  # (a column set whole stays as set)
                row[column] = json.dumps(doc)
        if row["spec_key"] == ROW["spec_key"]:  # the key of what the spec now says, where it says anything
            try:
                row["spec_key"] = ConvSpec.from_dict(json.loads(row["spec"])).key()
            except Exception:  # noqa: BLE001 (a spec that says nothing keeps the template's key)
                pass
        out.append(row)
    return out


def check_or_refuse(raw: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The rows checked, or None where they were refused in one line."""
    try:
        checked = check_rows(raw, "fuzz.csv")
    except InvalidArgument as e:
        message = str(e)
        assert "\n" not in message and "\r" not in message and "fuzz.csv" in message, message
        assert "nothing imported" in message
        return None
    for r in checked:  # what the store is given is what its schema holds
        assert fingerprint_problem(r["platform"]) is None
        assert isinstance(r["threads"], int) and 1 <= r["threads"] <= MAX_THREADS
        for key in ("median_s", "iqr_s", "fastest_s"):
            assert r[key] is None or (math.isfinite(r[key]) and 0 <= r[key] <= MAX_SECONDS)
        assert all(0 < v <= MAX_SECONDS for v in r["pass_medians"])
        assert all(isinstance(v, str) for v in r["warnings"] + r["sources"])
        ConvSpec.from_dict(r["spec"])
    return checked


@given(rows())
def test_any_row_is_checked_or_refused_in_one_line(raw: list[dict[str, Any]]) -> None:
    check_or_refuse(raw)


@given(st.sampled_from(JSON_COLUMNS), deep, st.booleans())
def test_json_nested_without_end_is_refused_in_one_line(column: str, text: str, as_bytes: bool) -> None:
    with pytest.raises(InvalidArgument, match=f"row 2: {column} is nested deeper than 64 levels"):
        check_rows([{**ROW, column: text.encode() if as_bytes else text}], "fuzz.csv")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, sqlite3.Connection]]:
    """A store on SQLite holding the template's platform and row, and a second connection to it."""
    path = tmp_path_factory.mktemp("fuzz-import") / "store.db"
    with Store(path) as s:
        import_profiles(s, "good.csv", check_rows([ROW], "good.csv"))
        conn = sqlite3.connect(path)
        try:
            yield s, conn
        finally:
            conn.close()


def snapshot(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """What the store holds, as another connection sees it: SQLite's data_version changes with
    every commit of another connection (a rolled-back transaction leaves it), and the row counts."""
    return (conn.execute("PRAGMA data_version").fetchone()[0],
            conn.execute("SELECT count(*) FROM platforms").fetchone()[0],
            conn.execute("SELECT count(*) FROM profiles").fetchone()[0])


@given(rows())
def test_an_import_stores_the_rows_or_leaves_the_store_as_it_was(
        store: tuple[Store, sqlite3.Connection], raw: list[dict[str, Any]]) -> None:
    s, conn = store
    before = snapshot(conn)
    try:
        import_profiles(s, "fuzz.csv", check_rows(raw, "fuzz.csv"))
    except RooftuneError as e:
        assert "\n" not in str(e)
        assert snapshot(conn) == before

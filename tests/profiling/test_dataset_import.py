"""`rooftune data import` of files that no export wrote: JSON nested without end, fingerprints and
figures no machine has. Each is refused in one line naming the row, the field, the value and what
is allowed, and the store is left exactly as it was."""

from __future__ import annotations

import csv
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rooftune.errors import InvalidArgument
from rooftune.platform import Platform
from rooftune.primitives import ConvSpec
from rooftune.profiling import export_profiles, import_profiles, read_profiles
from rooftune.store import Store
from tests.conftest import BUILDERS, collect_fake
from tests.test_cli import assert_one_line_error, rooftune_in_process

SPECS = [ConvSpec(1, 8, 12, 12, 16, 3, 3, padding=1), ConvSpec(1, 16, 8, 8, 8, 1, 1)]


def profiled_rows(platform: Platform) -> list[dict[str, Any]]:
    """Rows as a campaign stores them, without timing anything."""
    rows = []
    for i, spec in enumerate(SPECS):
        for primitive, status in (("pytorch-default", "ok"), ("winograd-f2x2", "unsupported")):
            ok = status == "ok"
            rows.append({"spec_key": spec.key(), "spec": spec.to_dict(), "primitive": primitive, "threads": 1,
                         "status": status, "median_s": 1e-3 * (i + 1) if ok else None, "iqr_s": 1e-5 if ok else None,
                         "repetitions": 12 if ok else 0, "reason": "" if ok else "1x1 kernel",
                         "warnings": [], "sources": ["t"], "pass_medians": [1e-3 * (i + 1)] if ok else [],
                         "pass_canary": [2e-3] if ok else None, "fastest_s": 0.9e-3 * (i + 1) if ok else None})
    return rows


def write_rows(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def dump(db: Path) -> list[str]:
    """Everything the SQLite store holds, as SQL."""
    with sqlite3.connect(db) as conn:
        return list(conn.iterdump())


@pytest.fixture
def exported(tmp_path: Path, fake_platform: Platform) -> tuple[list[dict[str, str]], Path]:
    """The rows of a real export (CSV) and a store that holds other rows already."""
    with Store(tmp_path / "source.db") as s:
        s.save_profiles(fake_platform, profiled_rows(fake_platform))
        export_profiles(s, tmp_path / "good.csv")
    target = tmp_path / "target.db"
    with Store(target) as s:
        s.save_profiles(fake_platform, profiled_rows(fake_platform)[:1])
    return list(csv.DictReader((tmp_path / "good.csv").open())), target


def refused(tmp_path: Path, target: Path, rows: list[dict[str, str]], *fragments: str) -> None:
    """The file of ``rows`` is refused by the API and the command alike, the store untouched."""
    path = write_rows(tmp_path / "bad.csv", rows)
    before = dump(target)
    with Store(target) as s, pytest.raises(InvalidArgument) as e:
        import_profiles(s, path)
    message = str(e.value)
    assert "\n" not in message and "nothing imported" in message
    for fragment in fragments:
        assert fragment in message
    proc = rooftune_in_process("data", "import", str(path), "--db", str(target))
    assert_one_line_error(proc, *fragments)
    assert dump(target) == before


def test_a_real_export_imports(exported: tuple[list[dict[str, str]], Path], tmp_path: Path) -> None:
    lines, target = exported
    with Store(target) as s:
        assert import_profiles(s, write_rows(tmp_path / "again.csv", lines)) == {"rows": 4, "added": 3, "platforms": 1}


@pytest.mark.parametrize("column", ["platform", "spec", "warnings", "sources", "pass_medians", "pass_canary"])
def test_json_nested_without_end_is_refused_in_one_line(
        exported: tuple[list[dict[str, str]], Path], tmp_path: Path, column: str) -> None:
    lines, target = exported
    lines[1][column] = "[" * 50_000 + "]" * 50_000
    refused(tmp_path, target, lines, f"row 3: {column} is nested deeper than 64 levels (allowed at most 64)")


def test_json_a_few_levels_too_deep_is_refused_too(exported: tuple[list[dict[str, str]], Path], tmp_path: Path) -> None:
    lines, target = exported
    lines[0]["warnings"] = "[" * 65 + "]" * 65  # within what Python's parser reads
    refused(tmp_path, target, lines, "row 2: warnings is nested deeper than 64 levels")
    lines[0]["warnings"] = "[" + "9" * 5000 + "]"  # more digits than Python converts to an int
    refused(tmp_path, target, lines, "row 2: warnings is not JSON rooftune reads")


def _fingerprint(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, str]], None]:
    def edit(row: dict[str, str]) -> None:
        fp = json.loads(row["platform"])
        change(fp)
        row["platform"] = json.dumps(fp)
    return edit


def _spec(**fields: Any) -> Callable[[dict[str, str]], None]:
    def edit(row: dict[str, str]) -> None:
        spec = {**json.loads(row["spec"]), **fields}
        row["spec"] = json.dumps(spec)
        try:
            row["spec_key"] = ConvSpec.from_dict(spec).key()  # the key of what the spec says
        except (InvalidArgument, TypeError):
            pass
    return edit


def _set(**values: str) -> Callable[[dict[str, str]], None]:
    return lambda row: row.update(values)


NONSENSE = [
    (_fingerprint(lambda fp: fp.update(caches=["notadict", 5])),
     "the platform fingerprint caches[0] 'notadict': allowed an object with the fields name, level"),
    (_fingerprint(lambda fp: fp["caches"][1].update(size_bytes=-5)),
     "the platform fingerprint caches[1].size_bytes -5: allowed an integer in 1..1099511627776"),
    (_fingerprint(lambda fp: fp["caches"][0].update(size_bytes=2**80)), "caches[0].size_bytes 1208925819614629174706176"),
    (_fingerprint(lambda fp: fp.update(usable_cores="lots")),
     "the platform fingerprint usable_cores 'lots': allowed an integer in 1..8192"),
    (_fingerprint(lambda fp: fp.update(usable_cores=True)), "usable_cores True: allowed an integer"),
    (_fingerprint(lambda fp: fp.update(physical_cores=0)), "physical_cores 0: allowed an integer in 1..8192"),
    (_fingerprint(lambda fp: fp.update(cpu_quota=float("nan"))), "cpu_quota nan: allowed a number of CPUs"),
    (_fingerprint(lambda fp: fp.update(affinity=[0, -1])), "affinity[1] -1: allowed an integer in 0..8191"),
    (_fingerprint(lambda fp: fp.update(openmp={"name": 5})), "openmp.'name' 5: allowed a text"),
    (_fingerprint(lambda fp: fp["caches"][0].update(kind="Sideways")), "caches[0].kind 'Sideways': allowed one of Data"),
    (_fingerprint(lambda fp: fp["caches"][0].pop("level")), "caches[0] {"),
    (_fingerprint(lambda fp: fp.update(surprise=1)), "the platform fingerprint field 'surprise' 1: allowed the fields"),
    (_fingerprint(lambda fp: fp.update(cpu_model="x" * 300)), "cpu_model 'xxx"),
    (_fingerprint(lambda fp: fp.update(id="p1")), "the platform fingerprint id 'p1': allowed 16 hex digits"),
    (_set(platform="[1, 2]"), "the platform fingerprint [1, 2]: allowed an object"),
    (_spec(N=10**30), "bad spec (N 1000000000000000000000000000000: allowed at most 2147483647)"),
    (_spec(N=1e30), "bad spec (invalid N 1e+30: allowed an integer >= 1)"),
    (_spec(N=2**20, C=2**20), "bad spec (its input of 1048576x1048576x"),
    (_spec(dilation=[2**40, 1], R=1), "bad spec (dilation 1099511627776"),
    (_set(median_s="1e30"), "median_s 1e+30: a row's median is a positive finite median_s of at most 3600 s"),
    (_set(median_s="nan"), "median_s nan"),
    (_set(iqr_s="1e300"), "iqr_s 1e+300 is not a finite number >= 0 (at most 3600)"),
    (_set(repetitions="1e30"), "repetitions '1e30' is not a whole number >= 0 (at most 2147483647)"),
    (_set(created_at="1e30"), "created_at 1e+30 is not a finite time in 0..4102444800"),
    (_set(pass_medians="[0.001, 1e30]"), "pass_medians is not a list of at most 1000 times in seconds"),
    (_set(warnings=json.dumps(["x"] * 1001)), "warnings is not a list of strings (at most 1000"),
]


@pytest.mark.parametrize("edit,fragment", NONSENSE, ids=[f"{i}" for i in range(len(NONSENSE))])
def test_nonsense_is_refused_naming_row_field_and_value(
        exported: tuple[list[dict[str, str]], Path], tmp_path: Path, edit: Callable[[dict[str, str]], None],
        fragment: str) -> None:
    lines, target = exported
    ok = next(i for i, r in enumerate(lines) if r["status"] == "ok" and i > 0)
    edit(lines[ok])
    refused(tmp_path, target, lines, f"row {ok + 2}: ", fragment)


def test_rows_of_one_platform_that_disagree_about_it_are_refused(
        exported: tuple[list[dict[str, str]], Path], tmp_path: Path) -> None:
    lines, target = exported
    _fingerprint(lambda fp: fp["caches"][0].update(size_bytes=fp["caches"][0]["size_bytes"] * 2))(lines[2])
    refused(tmp_path, target, lines, f"row 4: platform {lines[2]['platform_id']} has another caches than in row 2")


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_recorded_machine_has_a_fingerprint_that_may_be_stored(fake_root: Callable[..., Path], name: str) -> None:
    from rooftune.platform.fingerprint_check import fingerprint_problem

    assert fingerprint_problem(collect_fake(fake_root(name)).to_dict()) is None


def test_this_machine_has_a_fingerprint_that_may_be_stored() -> None:
    from rooftune.platform import current_platform
    from rooftune.platform.fingerprint_check import fingerprint_problem

    assert fingerprint_problem(current_platform().to_dict()) is None


def test_a_parquet_file_is_checked_alike(exported: tuple[list[dict[str, str]], Path], tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    lines, target = exported
    lines[1]["platform"] = json.dumps({**json.loads(lines[1]["platform"]), "numa_nodes": -1})
    table = pa.table({k: [r[k] for r in lines] for k in lines[0]})
    pq.write_table(table, tmp_path / "bad.parquet")
    with pytest.raises(InvalidArgument, match=r"row 2: the platform fingerprint numa_nodes -1: allowed an integer"):
        read_profiles(tmp_path / "bad.parquet")


def test_an_import_that_fails_half_way_stores_nothing(
        exported: tuple[list[dict[str, str]], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows of two platforms: the second platform's insert fails, and the first's rows (and its
    platform) are not kept either."""
    from rooftune.errors import StoreError

    lines, target = exported
    other = [dict(r) for r in lines]
    for r in other:
        fp = {**json.loads(r["platform"]), "cpu_model": "Another CPU"}
        fp["id"] = r["platform_id"] = "0123456789abcdef"
        r["platform"] = json.dumps(fp)
    path = write_rows(tmp_path / "two.csv", [*lines, *other])
    calls = []
    real = Store._insert_new_rows

    def fail_second(session: Any, rows: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise StoreError("disk full")
        return real(session, rows)

    monkeypatch.setattr(Store, "_insert_new_rows", staticmethod(fail_second))
    before = dump(target)
    with Store(target) as s, pytest.raises(StoreError, match="disk full"):
        import_profiles(s, path)
    assert len(calls) == 2 and dump(target) == before

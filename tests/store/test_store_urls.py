"""A --db that no store can be at is refused in one line naming it (its secrets hidden) and what is
allowed, before anything connects: a port that is no number or out of range, a URL without its
'//', a SQLite URL with a host, a driver that is not installed, a control character."""

from __future__ import annotations

from pathlib import Path

import pytest

from rooftune.errors import StoreError
from rooftune.store import Store
from rooftune.store.urls import parse_url, resolve_url
from tests.test_cli import assert_one_line_error, rooftune_in_process

BAD = [
    ("postgresql://u:x@127.0.0.1:notaport/db", "'postgresql://u:***@127.0.0.1:notaport/db': its port is not a number; "
     "allowed a port in 1..65535"),
    ("postgresql://u@h:1:2/db", "'postgresql://u@h:1:2/db': its port is not a number"),
    ("postgresql://[::1/db", "its port is not a number"),
    ("postgresql://u@h:/db", "its port is not a number"),
    ("postgresql://u@h:99999/db", "port 99999 is out of range; allowed a port in 1..65535"),
    ("postgresql://u@h:0/db", "port 0 is out of range"),
    ("postgresql://u@h:99999999999999999999999/db", "port 99999999999999999999999 is out of range"),
    ("sqlite:", "'sqlite:': a URL needs '://' after its scheme"),
    ("sqlite:relative.db", "'sqlite:relative.db': a URL needs '://' after its scheme"),
    ("PostgreSQL+psycopg:db", "a URL needs '://' after its scheme"),
    ("sqlite://relative.db", "'sqlite://relative.db': a SQLite URL names no host; allowed sqlite:///relative/path.db"),
    ("sqlite://h/x.db", "a SQLite URL names no host"),
    ("nosuch+drv://h/db", "SQLAlchemy has no database or driver 'nosuch+drv' installed; allowed a file path"),
    ("postgresql+nosuch://h/db", "no database or driver 'postgresql+nosuch'"),
    ("pöstgres://h/db", "no database or driver"),
    ("://", "'://': not a file path or a URL"),
    ("sqlite:////tmp/a\x00b.db", "'sqlite:////tmp/a\\x00b.db': it holds a control character"),
    ("/tmp/a\nb.db", "'/tmp/a\\nb.db': it holds a control character"),
    ("postgresql://u:pw\x00@h/db", "'postgresql://u:***@h/db': it holds a control character"),
]


@pytest.mark.parametrize("url,fragment", BAD)
def test_a_url_no_store_can_be_at_is_refused_in_one_line(url: str, fragment: str) -> None:
    with pytest.raises(StoreError) as e:
        Store(url)
    assert "\n" not in str(e.value) and fragment in str(e.value)


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "sqlite:////tmp/x.db?mode=ro",
                                 "postgresql://u:p@db.example:5432/rt?sslmode=require", "postgresql://[::1]:5432/db",
                                 "postgresql+psycopg://h/db"])
def test_a_url_a_store_can_be_at_parses_without_connecting(url: str) -> None:
    assert parse_url(resolve_url(url)).drivername.startswith(url.split(":")[0])


@pytest.mark.parametrize("command", [["data", "export", "{out}"], ["data", "import", "{csv}"], ["data", "prune"],
                                     ["fleet", "status"]])
@pytest.mark.parametrize("url,fragment", [
    ("postgresql://u:x@127.0.0.1:notaport/db", "'postgresql://u:***@127.0.0.1:notaport/db': its port is not a number"),
    ("sqlite:rooftune.db", "a URL needs '://' after its scheme"),
])
def test_the_commands_refuse_it_in_one_line(tmp_path: Path, command: list[str], url: str, fragment: str) -> None:
    from rooftune.platform import current_platform
    from rooftune.profiling import export_profiles
    from tests.profiling.test_dataset_import import profiled_rows

    csv = tmp_path / "rows.csv"
    if "{csv}" in command:
        with Store(tmp_path / "source.db") as s:
            s.save_profiles(current_platform(), profiled_rows(current_platform()))
            export_profiles(s, csv)
    proc = rooftune_in_process(*[a.format(out=tmp_path / "out.csv", csv=csv) for a in command], "--db", url)
    assert_one_line_error(proc, fragment)
    assert "x@127" not in proc.stderr


def test_a_fleet_refuses_it_before_asking_the_cluster() -> None:
    from rooftune.fleet import check_shareable

    with pytest.raises(StoreError, match="'postgresql://u:\\*\\*\\*@127.0.0.1:notaport/db': its port is not a number"):
        check_shareable("postgresql://u:x@127.0.0.1:notaport/db")
    # nothing listens on port 1: had the cluster been asked, the error would name it
    proc = rooftune_in_process("tune", "resnet18", "--cluster", "127.0.0.1:1", "--db", "postgresql://u:x@127.0.0.1:notaport/db")
    assert_one_line_error(proc, "its port is not a number")


@pytest.mark.parametrize("name", ["a?b.db", "100%41.db", "x?password=y.db", "é #1.db"])
def test_a_file_path_names_the_file_it_names(tmp_path: Path, name: str) -> None:
    with Store(tmp_path / name) as s:
        s.count("profiles")
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".db"] == [name]

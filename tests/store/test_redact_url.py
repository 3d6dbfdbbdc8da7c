"""A database URL's password never reaches a message, summary.json or report.html."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rooftune.errors import StoreError
from rooftune.pipeline import STEPS, OptimizeResult, Step, _commands, _write_outputs
from rooftune.store import Store, redact_url
from tests.test_cli import assert_one_line_error, rooftune_in_process

SECRET = "s3cr3t-pw"
#: Nothing listens on port 1 of the loopback: a driver, when installed, is refused at once.
PG_URL = f"postgresql://alice:{SECRET}@127.0.0.1:1/rooftune"


@pytest.mark.parametrize("url,shown", [
    (PG_URL, "postgresql://alice:***@127.0.0.1:1/rooftune"),
    ("postgresql+psycopg://bob:p%40ss@db.example:5432/rt?sslmode=require",
     "postgresql+psycopg://bob:***@db.example:5432/rt?sslmode=require"),
    ("postgresql://carol:p@ss@db/rt", "postgresql://carol:***@db/rt"),  # an '@' left unencoded
    ("not a url://dave:hunter2@somewhere", "not a url://dave:***@somewhere"),  # SQLAlchemy cannot parse it
    ("postgresql://erin@db/rt", "postgresql://erin@db/rt"),
    ("sqlite:////tmp/rooftune.db", "sqlite:////tmp/rooftune.db"),
    ("/home/frank/rooftune.db", "/home/frank/rooftune.db"),
])
def test_the_password_is_masked_and_the_rest_kept(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_a_store_that_cannot_connect_fails_fast_without_the_password() -> None:
    t0 = time.monotonic()
    with pytest.raises(StoreError) as e:
        Store(PG_URL)
    assert time.monotonic() - t0 < 10
    assert SECRET not in str(e.value) and "alice:***@127.0.0.1" in str(e.value)


def test_the_commands_error_line_hides_the_password(tmp_path: Path) -> None:
    proc = rooftune_in_process("data", "export", str(tmp_path / "rows.csv"), "--db", PG_URL)
    assert_one_line_error(proc, "alice:***@127.0.0.1")
    assert SECRET not in proc.stderr + proc.stdout


def test_summary_and_report_carry_the_url_without_its_password(tmp_path: Path) -> None:
    r = OptimizeResult(model="resnet18", batch=1, objective="latency", budget_s=60.0, out=tmp_path,
                       steps={s: Step(s, "skipped") for s in STEPS})
    r.commands = _commands(r, PG_URL)
    _write_outputs(r, set())
    summary = (tmp_path / "summary.json").read_text()
    report = (tmp_path / "report.html").read_text()
    assert SECRET not in summary and SECRET not in report
    assert any("--db 'postgresql://alice:***@127.0.0.1:1/rooftune'" in c for c in json.loads(summary)["commands"])
    assert "alice:***@127.0.0.1" in report


QUERY = "s3cr3t-q"


@pytest.mark.parametrize("url,shown", [
    (f"postgresql://u@127.0.0.1:1/db?password={QUERY}", "postgresql://u@127.0.0.1:1/db?password=***"),
    (f"postgresql://u@h/db?sslmode=require&PASSWORD={QUERY}&application_name=rt",
     "postgresql://u@h/db?sslmode=require&PASSWORD=***&application_name=rt"),
    (f"postgresql://u@h/db?Password={QUERY}", "postgresql://u@h/db?Password=***"),
    (f"postgresql://u@h/db?pass%77ord={QUERY}", "postgresql://u@h/db?pass%77ord=***"),  # SQLAlchemy decodes it
    (f"postgresql://u@h/db?pass%2577ord={QUERY}", "postgresql://u@h/db?pass%2577ord=***"),  # encoded twice
    (f"postgresql://u@h/db?password={QUERY}&password={QUERY}2", "postgresql://u@h/db?password=***&password=***"),
    (f"postgresql://u@h/db?+password+={QUERY}", "postgresql://u@h/db?+password+=***"),
    (f"postgresql://u@h/db?ssl%20password={QUERY}", "postgresql://u@h/db?ssl%20password=***"),
    (f"postgresql://u@h/db?sslpassword={QUERY}", "postgresql://u@h/db?sslpassword=***"),
    (f"postgresql://u@h/db?api_key={QUERY}&access-token={QUERY}&SECRET={QUERY}&auth={QUERY}",
     "postgresql://u@h/db?api_key=***&access-token=***&SECRET=***&auth=***"),
    (f"postgresql://u@h/db?password={QUERY}%26more", "postgresql://u@h/db?password=***"),
    # names of files, not secrets: they say which file a connection used
    ("postgresql://u@h/db?passfile=/home/u/.pgpass&sslkey=/home/u/k.pem&sslcert=/home/u/c.pem",
     "postgresql://u@h/db?passfile=/home/u/.pgpass&sslkey=/home/u/k.pem&sslcert=/home/u/c.pem"),
    (f"sqlite:////tmp/x.db?password={QUERY}", "sqlite:////tmp/x.db?password=***"),
    (f"/tmp/x.db?password={QUERY}", "/tmp/x.db?password=***"),  # read as a URL once resolved
    (f"postgresql://a@b:{QUERY}@h/db", "postgresql://a@b:***@h/db"),  # a user with an '@' in it
    (f"postgresql://alice:{QUERY}/db", "postgresql://alice:***/db"),  # '@host' left out: read as a port
    (f"postgresql://u:{QUERY}@h/db?password={QUERY}", "postgresql://u:***@h/db?password=***"),
    ("postgresql://h:5432/db?x=1", "postgresql://h:5432/db?x=1"),
])
def test_every_secret_in_the_query_is_masked(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert QUERY not in redact_url(url)


def test_a_store_error_line_never_shows_a_query_password() -> None:
    with pytest.raises(StoreError) as e:
        Store(f"postgresql://alice@127.0.0.1:1/rooftune?password={QUERY}")
    assert QUERY not in str(e.value) and "?password=***" in str(e.value)


@pytest.mark.parametrize("args", [["data", "export", "{out}"], ["data", "prune"], ["fleet", "status"]])
def test_the_commands_error_line_hides_a_query_password(tmp_path: Path, args: list[str]) -> None:
    url = f"postgresql://alice@127.0.0.1:1/rooftune?sslmode=disable&PassWord={QUERY}"
    proc = rooftune_in_process(*[a.format(out=tmp_path / "rows.csv") for a in args], "--db", url)
    assert_one_line_error(proc, "?sslmode=disable&PassWord=***")
    assert QUERY not in proc.stderr + proc.stdout


def test_a_repeated_db_option_hides_a_query_password() -> None:
    proc = rooftune_in_process("machine", "--db", f"postgresql://u@host/db?password={QUERY}", "--db=b.db")
    assert_one_line_error(proc, "--db given twice", "postgresql://u@host/db?password=***, b.db")
    assert QUERY not in proc.stderr


def test_summary_and_report_carry_a_sqlite_url_without_its_query_password(tmp_path: Path) -> None:
    r = OptimizeResult(model="resnet18", batch=1, objective="latency", budget_s=60.0, out=tmp_path,
                       steps={s: Step(s, "skipped") for s in STEPS})
    r.commands = _commands(r, f"sqlite:///{tmp_path}/x.db?password={QUERY}")
    _write_outputs(r, set())
    summary = (tmp_path / "summary.json").read_text()
    report = (tmp_path / "report.html").read_text()
    assert QUERY not in summary and QUERY not in report
    assert any(f"--db 'sqlite:///{tmp_path}/x.db?password=***'" in c for c in json.loads(summary)["commands"])


def test_a_usage_error_quoting_an_unexpected_url_hides_its_secrets() -> None:
    proc = rooftune_in_process("machine", "show", "postgresql://u:s3cr3tpw@127.0.0.1:1/db?password=hunter22")
    assert proc.returncode == 2 and "unexpected extra argument" in proc.stderr
    assert "s3cr3tpw" not in proc.stderr and "hunter22" not in proc.stderr and "u:***@" in proc.stderr

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
    _write_outputs(r)
    summary = (tmp_path / "summary.json").read_text()
    report = (tmp_path / "report.html").read_text()
    assert SECRET not in summary and SECRET not in report
    assert any("--db 'postgresql://alice:***@127.0.0.1:1/rooftune'" in c for c in json.loads(summary)["commands"])
    assert "alice:***@127.0.0.1" in report

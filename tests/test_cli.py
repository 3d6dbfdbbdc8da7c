"""The command line as a user meets it: exit codes, one-line errors, JSON, figures, the store."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest


def rooftune(*args: str, db: Path | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rooftune.cli", *args]
    if db is not None:
        cmd += ["--db", str(db)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def rooftune_in_process(*args: str, db: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The command line's entry point called in this process, as :func:`rooftune` runs it in a
    new one: the same exit code and output, without the 2-5 s of a fresh interpreter importing
    torch. For the many bad-input cases; :func:`test_each_command_refuses_bad_input_in_its_own_process`
    checks the real process once per command."""
    import contextlib
    import io

    from rooftune import cli

    argv = [*args, *(["--db", str(db)] if db is not None else [])]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    text = " ".join(lines)
    assert text.startswith("error: ")
    for f in fragments:
        assert f in text


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["--threads", "0"], ["thread count 0", "allowed 1.."]),
        (["--threads", "999"], ["thread count 999", "allowed 1.."]),
        (["--threads", "two"], ["thread count 'two'", "integers"]),
        (["--precision", "fp16"], ["precision 'fp16'", "fp32, fp64, bf16, int8"]),
        (["--plot", "roof.gif"], ["--plot 'roof.gif'", ".png"]),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    db = tmp_path / "r.db"
    proc = rooftune_in_process("machine", *args, db=db)
    assert_one_line_error(proc, *fragments)
    assert not db.exists()


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["machine", "--threads", "0"], ["thread count 0", "allowed 1.."]),
        (["analyze", "resnet5O"], ["model 'resnet5O'", "did you mean resnet50"]),
        (["tune", "resnet18", "--objective", "speed"], ["objective 'speed'", "latency, throughput"]),
        (["optimize", "resnet18", "--budget", "10"], ["budget 10", ">= 60"]),
    ],
)
def test_each_command_refuses_bad_input_in_its_own_process(tmp_path: Path, args: list[str],
                                                           fragments: list[str]) -> None:
    db = tmp_path / "r.db"
    proc = rooftune(*args, db=db)
    assert_one_line_error(proc, *fragments)
    assert not db.exists()


def test_a_usage_error_is_the_usage_and_one_error_line(tmp_path: Path) -> None:
    """An unknown option is the parser's usage error (exit 2, no traceback, one line saying where
    the options are listed), whichever click typer brings (its own vendored copy from typer 0.25 on)."""
    db = tmp_path / "r.db"
    proc = rooftune_in_process("machine", "--bogus", db=db)
    assert_one_line_error(proc, "no such option '--bogus'", "(see rooftune machine --help)")
    assert not db.exists()


def test_corrupt_database_is_refused_untouched(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    db.write_bytes(b"this is not sqlite" * 64)
    before = db.read_bytes()
    proc = rooftune("machine", "--quick", "--threads", "1", db=db)
    assert_one_line_error(proc, "not a SQLite database")
    assert db.read_bytes() == before


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    from rooftune.store import Store

    db = tmp_path / "r.db"
    Store(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE schema_info SET value='42' WHERE key='schema_version'")
    proc = rooftune("machine", "--quick", "--threads", "1", db=db)
    assert_one_line_error(proc, "schema version 42", "newer")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM ceilings").fetchone()[0] == 0


def test_unwritable_database_location(tmp_path: Path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    proc = rooftune("machine", "--quick", db=blocker / "r.db")
    assert_one_line_error(proc, "database directory")


def test_a_database_directory_that_does_not_exist_is_refused_not_made(tmp_path: Path) -> None:
    proc = rooftune_in_process("machine", "--quick", db=tmp_path / "mistyped" / "r.db")
    assert_one_line_error(proc, f"database directory '{tmp_path / 'mistyped'}' does not exist")
    assert not (tmp_path / "mistyped").exists()


def test_h_is_help_at_every_level() -> None:
    for args in (["-h"], ["data", "-h"], ["tune", "-h"]):
        proc = rooftune_in_process(*args)
        assert proc.returncode == 0 and proc.stderr == ""
        assert f"Usage: rooftune {' '.join(args[:-1])}".strip() in proc.stdout


def test_a_group_without_its_command_prints_its_help_and_one_error_line() -> None:
    for args in ([], ["data"]):
        proc = rooftune_in_process(*args)
        assert_one_line_error(proc, "give a command, one of those listed above")
        assert "Commands" in proc.stdout


def test_quick_json_figures_and_reuse(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    roof, sweep = tmp_path / "roof.png", tmp_path / "sweep.svg"
    proc = rooftune(
        "machine", "--quick", "--threads", "1", "--json", "--plot", str(roof), "--plot-sweep", str(sweep), db=db
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # the progress went to stderr, as lines
    assert re.search(r"^0:\d\d \w", proc.stderr, re.M), proc.stderr
    assert {"id", "cpu_model", "usable_cores", "isa"} <= set(data["platform"])
    for key in ("fp32", "fp64", "gemm_fp32"):
        assert data["peak_flops"][key] > 0
    assert data["peak_flops"]["per_thread"]["fp32"]["1"] == data["peak_flops"]["fp32"]
    assert {"L1", "DRAM"} <= set(data["bandwidth"])
    assert data["dispatch_overhead_s"] > 0
    assert data["from_store"] is False
    assert roof.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in sweep.read_text()

    again = rooftune("machine", "--quick", "--threads", "1", "--json", db=db)
    assert again.returncode == 0, again.stderr
    cached = json.loads(again.stdout)
    assert cached["from_store"] is True
    assert cached["peak_flops"] == data["peak_flops"]

    table = rooftune("machine", "--quick", "--threads", "1", db=db)
    assert table.returncode == 0
    assert "Peak compute" in table.stdout and "DRAM" in table.stdout
    assert data["platform"]["id"] in table.stdout


def test_progress_to_a_file_or_pipe_is_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where stderr is not a terminal (a log, CI), a step is one line when it starts and one more
    every 30 s while it goes on, led by the time since the start; nothing is wrapped. A spinner's
    message comes with the first step, so input refused before any step stays one line."""
    import io

    from rich.console import Console

    from rooftune.cli import printing as cli

    buf = io.StringIO()
    monkeypatch.setattr(cli, "err", Console(file=buf, width=40))
    now = [100.0]
    with cli._Lines("loading", clock=lambda: now[0]):
        pass  # no step began (input refused before any): nothing
    assert buf.getvalue() == ""
    lines = cli._Lines("loading", clock=lambda: now[0])
    with lines:
        lines.update("tune: search", 0, 240)
        now[0] += 10
        lines.update("tune: search", 10, 240)  # the same step within 30 s: no line
        now[0] += 25
        lines.update("tune: search", 35, 240)
        lines.update("tune: the best against every baseline, interleaved", 0, 1)
        now[0] += 61
        lines.update("tune: the best against every baseline, interleaved", 1, 1)
    assert buf.getvalue().splitlines() == [
        "0:00 loading", "0:00 tune: search (0/240)", "0:35 tune: search (35/240)",
        "0:35 tune: the best against every baseline, interleaved",
        "1:36 tune: the best against every baseline, interleaved"]
    buf.truncate(0), buf.seek(0)
    with cli._Lines("fitting mlp on 48 specs", clock=lambda: now[0], at_once=True):  # a step with no steps inside
        pass
    assert buf.getvalue() == "0:00 fitting mlp on 48 specs\n"
    context, update = cli.progress_reporter()
    assert isinstance(context, cli._Lines) and update == context.update
    assert isinstance(cli.status_display("fitting"), cli._Lines)


def test_many_thread_counts_print_one_row_per_count(fake_platform, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from rich.console import Console

    from rooftune.cli import machine as cli
    from tests.conftest import make_ceilings

    c = make_ceilings(fake_platform)
    per = {"fp32": {t: 100e9 * t for t in (1, 2, 4, 8, 16)}, "gemm_fp32": {t: 80e9 * t for t in (1, 2, 4, 8, 16)}}
    c = replace(c, threads=(1, 2, 4, 8, 16), peak_flops_per_thread=per)
    console = Console(width=80, record=True)
    monkeypatch.setattr(cli, "out", console)
    cli._print_ceilings(c)
    text = console.export_text()
    assert any("threads" in line and "fp32" in line and "gemm_fp32" in line for line in text.splitlines())
    assert all(len(line) <= 80 for line in text.splitlines())
    rows = [line for line in text.splitlines() if line.startswith("│") and line.split("│")[1].strip().isdigit()]
    assert [line.split("│")[1].strip() for line in rows[:5]] == ["1", "2", "4", "8", "16"]
    assert "1.6 T" in rows[4] and "1.3 T" in rows[4]  # fp32 and gemm_fp32 on 16 threads


def test_stdout_to_a_file_or_pipe_is_wide_and_tables_fold() -> None:
    """Output to a file or a pipe is PLAIN_WIDTH columns (Rich would take 80), COLUMNS still
    decides; a table on a narrow console folds a long cell instead of cutting it short."""
    import io
    import os

    from rich.console import Console

    from rooftune.cli import printing as cli

    code = "from rooftune.cli import printing as cli; print(cli.out.width)"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    piped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert int(piped.stdout) == cli.PLAIN_WIDTH
    narrow = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**env, "COLUMNS": "100"}, check=True)
    assert int(narrow.stdout) == 100
    buf = io.StringIO()
    t = cli.Table()
    for col in ("name", "configuration", "best is"):
        t.add_column(col)
    t.add_row("pytorch-launcher", "onnxruntime, 2 instances, 1x1 threads, batch 8, graph_optimization=all",
              "2.92x (2.84-3.02)")
    Console(file=buf, width=40).print(t)
    text = buf.getvalue()
    assert "…" not in text
    # each column's pieces, read row line by row line, give its cells back whole (spaces aside)
    rows = [line.split("│")[1:-1] for line in text.splitlines() if line.startswith("│")]
    columns = ["".join(r[i] for r in rows).replace(" ", "") for i in range(3)]
    assert columns == ["pytorch-launcher", "onnxruntime,2instances,1x1threads,batch8,graph_optimization=all",
                       "2.92x(2.84-3.02)"]


class _ClickError(Exception):
    """A usage error as click's versions raise it: a message, the option, the command path."""

    def __init__(self, message: str, opts: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = type("P", (), {"opts": opts})() if opts else None
        self.ctx = type("C", (), {"command_path": "rooftune analyze"})()

    def format_message(self) -> str:
        return self.message


@pytest.mark.parametrize("message", [
    "Invalid value for '--budget': 'abc' is not a valid float.",  # click 8.5.1, under typer 0.24.2
    "Invalid value for '--budget': Input should be a valid number",  # the click typer vendors
])
def test_a_bad_value_reads_alike_whichever_click_worded_it(message: str) -> None:
    from rooftune.cli.main import usage_line

    line = usage_line(_ClickError(message, ["--budget"]), ["analyze", "resnet18", "--budget", "abc"])
    assert line.startswith("invalid value for '--budget' 'abc': ")
    assert line.count("'abc'") == 1 and line.endswith("(see rooftune analyze --help)")


@pytest.mark.parametrize("message", ["No such option: --bogus", "No such option '--bogus'."])
def test_an_unknown_option_reads_alike_whichever_click_worded_it(message: str) -> None:
    from rooftune.cli.main import usage_line

    assert usage_line(_ClickError(message), ["--bogus"]) == "no such option '--bogus' (see rooftune analyze --help)"

"""The test server's programs are found whatever PATH holds (tests/pg.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests import pg


def program(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_programs_are_found_with_a_path_that_lacks_the_sbin_folders(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    if os.access("/usr/sbin/runuser", os.X_OK):  # as on Debian and most distributions
        assert pg._bin("runuser") == "/usr/sbin/runuser"
    runuser = program(tmp_path / "sbin" / "runuser")
    monkeypatch.setattr(pg, "SYSTEM_DIRS", (str(tmp_path / "sbin"),))
    assert pg._bin("runuser") == str(runuser)
    assert pg._bin("no-such-program-xyz") is None


def test_the_newest_installed_server_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(pg, "SYSTEM_DIRS", ())
    monkeypatch.setattr(pg, "POSTGRES_DIRS", str(tmp_path / "postgresql" / "*" / "bin"))
    for version in ("9.6", "16", "15"):
        program(tmp_path / "postgresql" / version / "bin" / "initdb")
    assert pg._bin("initdb") == str(tmp_path / "postgresql" / "16" / "bin" / "initdb")
    program(tmp_path / "postgresql" / "9.6" / "bin" / "pg_ctl")  # only an older one has it
    assert pg._bin("pg_ctl") == str(tmp_path / "postgresql" / "9.6" / "bin" / "pg_ctl")

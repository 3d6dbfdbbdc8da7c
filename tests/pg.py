"""A throw-away PostgreSQL server for the tests: ``initdb`` into a temporary folder, ``pg_ctl``
on a free loopback port, one fresh database per test, stopped at the end.

Debian's ``postgresql`` package puts ``initdb`` and ``pg_ctl`` in /usr/lib/postgresql/N/bin (not on
PATH); PostgreSQL refuses to run as root, so as root they run as the ``postgres`` user the
package creates. Where none of that exists the tests that need a server are skipped with the reason.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: Seconds the server gets to start or stop.
PG_START_S = 60


#: Where the programs are looked for besides PATH: a PATH without the sbin folders (a user's
#: account, a minimal container) still finds runuser, and Debian's packages the servers.
SYSTEM_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
POSTGRES_DIRS = "/usr/lib/postgresql/*/bin"


def _version(folder: str) -> tuple[int, ...]:
    """/usr/lib/postgresql/16/bin -> (16,): the newest server is the highest number, not the last
    name in sorted order (9.6 after 16)."""
    parts = Path(folder).parent.name.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else ()


def _bin(name: str) -> str | None:
    """``name`` on PATH, else in SYSTEM_DIRS, else in the newest of POSTGRES_DIRS; None where none."""
    found = shutil.which(name) or shutil.which(name, path=os.pathsep.join(SYSTEM_DIRS))
    if found:
        return found
    servers = sorted(glob.glob(POSTGRES_DIRS), key=_version)
    for folder in reversed(servers):
        found = shutil.which(name, path=folder)
        if found:
            return found
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unavailable() -> str | None:
    """Why a server cannot be started here, or None."""
    if _bin("initdb") is None or _bin("pg_ctl") is None:
        return "PostgreSQL is not installed (initdb/pg_ctl not found; apt-get install postgresql)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed"
    if os.geteuid() == 0:
        import pwd

        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run the server as"
        if _bin("runuser") is None:
            return "running as root and runuser (util-linux), to run the server as postgres, is not found"
    return None


class Server:
    """A running server; ``url(db)`` is the SQLAlchemy URL of one of its databases."""

    def __init__(self, port: int) -> None:
        self.port = port

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh empty database's URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True) as c:
            c.execute(f"CREATE DATABASE {name}")
        return self.url(name)


@contextmanager
def server() -> Iterator[Server]:
    """Start a server in a temporary folder, stop it (and remove the folder) at the end."""
    base = Path(tempfile.mkdtemp(prefix="rooftune-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        as_user = [str(_bin("runuser")), "-u", "postgres", "--"]
    data, port = base / "data", _free_port()
    run = {"check": True, "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "timeout": PG_START_S}
    try:
        subprocess.run([*as_user, str(_bin("initdb")), "-D", str(data), "-A", "trust", "-U", "postgres",
                        "-E", "UTF8", "--no-sync"], **run)  # type: ignore[call-overload]
        options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        subprocess.run([*as_user, str(_bin("pg_ctl")), "-D", str(data), "-o", options, "-l", str(base / "log"),
                        "-w", "-t", str(PG_START_S), "start"], **run)  # type: ignore[call-overload]
        try:
            yield Server(port)
        finally:
            subprocess.run([*as_user, str(_bin("pg_ctl")), "-D", str(data), "-m", "immediate", "-w", "stop"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=PG_START_S, check=False)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _fixture() -> Any:
    import pytest

    @pytest.fixture(scope="session")
    def pg_server() -> Iterator[Server]:
        """A PostgreSQL server for this test process (one per xdist worker), or the test skipped
        with the reason."""
        reason = unavailable()
        if reason:
            pytest.skip(reason)
        with server() as s:
            yield s

    return pg_server


#: The session fixture; a conftest imports it to offer it to its tests.
pg_server = _fixture()

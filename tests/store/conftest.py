"""The store's tests run on SQLite and on a real PostgreSQL server (:mod:`tests.pg`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import pg

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[pg.Server]:
    reason = pg.unavailable()
    if reason:
        pytest.skip(reason)
    with pg.server() as server:
        yield server


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty store's address: a SQLite file, or a fresh database on the test server."""
    if request.param == "sqlite":
        return str(tmp_path / "r.db")
    server: pg.Server = request.getfixturevalue("pg_server")
    return server.new_database()

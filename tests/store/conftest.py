"""The store's tests run on SQLite and on a real PostgreSQL server (:mod:`tests.pg`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import pg
from tests.pg import pg_server  # noqa: F401 (the fixture, offered to these tests)

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty store's address: a SQLite file, or a fresh database on the test server."""
    if request.param == "sqlite":
        return str(tmp_path / "r.db")
    server: pg.Server = request.getfixturevalue("pg_server")
    return server.new_database()

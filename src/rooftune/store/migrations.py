"""Schema versions and the steps between them.

Each step creates what its version introduced; a step never edits an earlier step, so a database
written by any earlier rooftune upgrades through the same path.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection

from rooftune.store.schema import Base


def _create(*tables: str) -> Callable[[Connection], None]:
    def step(conn: Connection) -> None:
        for name in tables:
            Base.metadata.tables[name].create(conn, checkfirst=True)

    return step


#: version -> step that brings a database from version-1 to version.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {
    1: _create("schema_info", "platforms", "ceilings"),
    2: _create("measurements"),
    3: _create("analyses"),
    4: _create("trials"),
    5: _create("profiles"),
}

SCHEMA_VERSION = max(MIGRATIONS)

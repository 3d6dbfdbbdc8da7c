"""Schema versions and the steps between them.

Each step creates what its version introduced; a step never edits an earlier step, so a database
written by any earlier rooftune upgrades through the same path.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection, inspect

from rooftune.store.schema import Base


def _create(*tables: str) -> Callable[[Connection], None]:
    def step(conn: Connection) -> None:
        for name in tables:
            Base.metadata.tables[name].create(conn, checkfirst=True)

    return step


def _add_columns(table: str, *columns: str) -> Callable[[Connection], None]:
    """Add ``columns`` (as the current schema declares them) to ``table`` where they are missing: a
    table created by an earlier step from the current metadata already has them."""

    def step(conn: Connection) -> None:
        have = {c["name"] for c in inspect(conn).get_columns(table)}
        for name in columns:
            if name in have:
                continue
            column = Base.metadata.tables[table].c[name]
            kind = column.type.compile(dialect=conn.dialect)
            conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")

    return step


def _unique_trials(conn: Connection) -> None:
    """Trials unique per (study, configuration): duplicates an older rooftune may have stored (two
    processes resuming one study) are dropped, the first kept, before the index is built."""
    conn.exec_driver_sql(
        "DELETE FROM trials WHERE id NOT IN (SELECT min(id) FROM trials GROUP BY study_key, config_key)"
    )
    conn.exec_driver_sql("CREATE UNIQUE INDEX IF NOT EXISTS uq_trial ON trials (study_key, config_key)")


def _steps(*steps: Callable[[Connection], None]) -> Callable[[Connection], None]:
    def step(conn: Connection) -> None:
        for one in steps:
            one(conn)

    return step


#: version -> step that brings a database from version-1 to version.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {
    1: _create("schema_info", "platforms", "ceilings"),
    2: _create("measurements"),
    3: _create("analyses"),
    4: _create("trials"),
    5: _create("profiles"),
    6: _add_columns("profiles", "pass_medians"),
    7: _add_columns("profiles", "pass_canary"),
    8: _add_columns("profiles", "fastest_s"),
    9: _create("sweep_points"),
    10: _steps(_unique_trials, _create("fleet_runs")),
}

SCHEMA_VERSION = max(MIGRATIONS)


def pending(current: int) -> list[int]:
    """The steps a database at version ``current`` still needs, in order."""
    return sorted(v for v in MIGRATIONS if v > current)

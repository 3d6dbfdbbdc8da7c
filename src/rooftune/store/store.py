"""The store: SQLAlchemy over SQLite by default, PostgreSQL (``postgresql+psycopg://``) for a
store that several machines share, any SQLAlchemy URL otherwise.

Every write is one transaction. On SQLite the database runs in WAL mode and every transaction
starts with ``BEGIN IMMEDIATE`` (SQLAlchemy's documented pysqlite recipe), so two processes
writing at once queue on the lock instead of failing half-way. On PostgreSQL writers do not
queue: rows that two writers may both add (a platform, a profiled row, a study's trial) are
inserted with ``INSERT ... ON CONFLICT DO NOTHING`` against the table's unique key, so the first
writer's row stays and the second adds nothing, without a check-then-insert race; readers see
the last committed state and never wait for a writer.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from sqlalchemy import Engine, Table, create_engine, event, inspect, select, update
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session

from rooftune.errors import StoreError, one_line
from rooftune.fileio import json_text
from rooftune.platform import Platform
from rooftune.platform.gpu import GpuDevice
from rooftune.store.fleet_rows import CLAIMED, FleetRows
from rooftune.store.migrations import MIGRATIONS, SCHEMA_VERSION, pending
from rooftune.store.profile_rows import ProfileRows
from rooftune.store.schema import (
    AnalysisRow,
    CeilingsRow,
    FleetRunRow,
    MeasurementRow,
    PlatformRow,
    ProfileRow,
    SchemaInfo,
    SweepPointRow,
    TrialRow,
)
from rooftune.store.sweep_rows import SweepRows
from rooftune.store.urls import (
    ALLOWED,
    DB_ENV,
    HIDDEN,
    data_dir,
    default_db_path,
    modules_dir,
    parse_url,
    redact_url,
    resolve_url,
    url_secrets,
)
from rooftune.store.values import finite

#: How long a writer waits for another process's transaction before giving up (ms). Ceilings
#: runs write once at the end, so 30 s is far longer than any lock is held.
SQLITE_BUSY_TIMEOUT_MS = 30_000
#: Seconds a connection to a database server may take before it is given up (libpq's
#: connect_timeout, per address tried): an unreachable server is named within 10 s. A URL's own
#: ``connect_timeout`` wins.
CONNECT_TIMEOUT_S = 5
#: Lock that serializes the schema check and migrations of processes opening one PostgreSQL store
#: at the same moment (a transaction-level advisory lock: released at commit).
PG_MIGRATION_LOCK = 0x726F6F66


def _column_json(value: Any) -> str:
    """A JSON column's text: NaN and infinities as null (as :func:`rooftune.store.values.finite`
    writes a row's figures), no notes beside them, so a row reads back with the keys it had."""
    return json_text(value, notes=False)


def _check_sqlite_file(path: Path, chosen: bool = True) -> None:
    """Refuses a SQLite file path the store cannot live at. ``chosen``: the path came from --db or
    $ROOFTUNE_DB, where a directory that does not exist is refused (a mistyped directory would
    otherwise be created and an empty store opened in it, as other outputs refuse one); the
    default path's directory is created."""
    directory = path.parent
    if directory.exists() and not directory.is_dir():
        raise StoreError(
            f"database directory '{directory}' is a file, not a directory; pass --db with a writable "
            f"path or set {DB_ENV}"
        )
    if not directory.exists() and chosen:
        raise StoreError(
            f"database directory '{directory}' does not exist; create it, or pass --db with a path "
            f"in an existing directory"
        )
    if not directory.exists():
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the database directory '{directory}' ({exc.strerror}); "
                f"pass --db with a writable path or set {DB_ENV}"
            ) from None
    if path.is_dir():
        raise StoreError(f"database path '{path}' is a directory; pass --db with a file path in it, e.g. {path / 'rooftune.db'}")
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            raise StoreError(
                f"database file '{path}' is not readable and writable by this user; "
                f"fix its permissions or pass --db with another path"
            )
    if not os.access(directory, os.W_OK):
        # SQLite needs to create the -wal and -shm files next to the database.
        raise StoreError(
            f"database directory '{directory}' is not writable; pass --db with a writable path "
            f"or set {DB_ENV}"
        )


class Store(ProfileRows, FleetRows, SweepRows):
    """A rooftune database. ``Store()`` opens the default one, ``Store(url_or_path)`` any other.

    Opening creates the schema or upgrades an older one; a database written by a newer rooftune,
    a file that is not a SQLite database and a SQLite database that is not rooftune's are refused
    with :class:`StoreError`, untouched.
    """

    def __init__(self, db: str | os.PathLike[str] | None = None, create: bool = True) -> None:
        """``create=False`` (commands that only read) refuses a SQLite file that does not exist
        instead of creating an empty store there."""
        self.url = resolve_url(db)
        #: The URL as messages name it: never a secret it holds (:func:`redact_url`).
        self.display_url = redact_url(self.url)
        url = parse_url(self.url)
        self._sqlite = url.get_backend_name() == "sqlite"
        if self._sqlite and url.database and url.database != ":memory:":
            if not create and not Path(url.database).exists():
                origin = "" if db is not None or not os.environ.get(DB_ENV) else f" (from ${DB_ENV})"
                raise StoreError(f"no store at '{url.database}'{origin}: nothing was measured there yet; "
                                 f"pass --db with the store's path, or measure first (rooftune profile)")
            _check_sqlite_file(Path(url.database), chosen=db is not None or bool(os.environ.get(DB_ENV)))
        self._postgres = url.get_backend_name() == "postgresql"
        connect_args: dict[str, Any] = {}
        if self._postgres and "connect_timeout" not in url.query:
            connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
        if url.drivername == "postgresql":
            # SQLAlchemy's default PostgreSQL driver is psycopg2; rooftune installs psycopg (3)
            url = url.set(drivername="postgresql+psycopg")
        try:
            # strict JSON in every JSON column: SQLite's JSON functions and PostgreSQL refuse NaN
            self.engine: Engine = create_engine(url, connect_args=connect_args, json_serializer=_column_json)
        except ImportError as exc:
            raise StoreError(f"cannot use database URL {self.display_url!r}: {self._hide(str(exc))}; install the database's driver for "
                             f"SQLAlchemy (e.g. pip install psycopg for postgresql://)") from None
        except NoSuchModuleError:
            raise StoreError(f"cannot use database URL {self.display_url!r}: SQLAlchemy has no database or driver "
                             f"{url.drivername!r} installed; allowed {ALLOWED}") from None
        except ArgumentError as exc:
            raise StoreError(f"cannot use database URL {self.display_url!r}: {self._hide(one_line(exc))}") from None
        if self._sqlite:
            _install_sqlite_pragmas(self.engine)
        self._migrate()

    # ------------------------------------------------------------------ transactions

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session whose work is committed together at the end, or not at all."""
        session = Session(self.engine, expire_on_commit=False)
        try:
            with session.begin():
                yield session
        except SQLAlchemyError as exc:
            raise self._wrap(exc) from None
        finally:
            session.close()

    def _wrap(self, exc: SQLAlchemyError) -> StoreError:
        orig = getattr(exc, "orig", None)
        # a server's message runs over several lines (libpq adds hints); the first says what failed
        text = str(orig) if orig is not None else str(exc)
        detail = self._hide(next((line.strip() for line in text.splitlines() if line.strip()), text))
        if isinstance(orig, sqlite3.DatabaseError) and "not a database" in detail:
            return StoreError(
                f"database {self.display_url!r} is not a SQLite database (file is corrupt or of another kind); "
                f"move it away or pass --db with another path"
            )
        return StoreError(f"database {self.display_url!r}: {detail}")

    def _hide(self, text: str) -> str:
        """A driver's message with the URL's password left out, should the driver quote it."""
        text = text.replace(self.url, self.display_url)
        for secret in self._secrets:
            text = text.replace(secret, HIDDEN)
        return text

    @functools.cached_property
    def _secrets(self) -> list[str]:
        return url_secrets(self.url)

    # ------------------------------------------------------------------ schema

    def _migrate(self) -> None:
        try:
            with self.engine.begin() as conn:
                if self._postgres:
                    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({PG_MIGRATION_LOCK})")
                tables = set(inspect(conn).get_table_names())
                if tables and "schema_info" not in tables:
                    raise StoreError(
                        f"database {self.display_url!r} is not a rooftune database (it has tables "
                        f"{', '.join(sorted(tables)[:5])}); pass --db with another path"
                    )
                current = 0
                if "schema_info" in tables:
                    row = conn.execute(
                        select(SchemaInfo.value).where(SchemaInfo.key == "schema_version")
                    ).scalar_one_or_none()
                    try:
                        current = int(row) if row is not None else 0
                    except ValueError:
                        raise StoreError(
                            f"database {self.display_url!r} has schema version {row!r}, not a number: it was not "
                            "written by rooftune or is damaged; pass --db with another path"
                        ) from None
                if current > SCHEMA_VERSION:
                    raise StoreError(
                        f"database {self.display_url!r} has schema version {current}, newer than this rooftune "
                        f"supports ({SCHEMA_VERSION}); upgrade rooftune or pass --db with another path"
                    )
                for version in pending(current):
                    MIGRATIONS[version](conn)
                if current < SCHEMA_VERSION:
                    # a mapped class's __table__ is its Table; SQLAlchemy types it as the FromClause
                    # any declarative class may have
                    info = cast(Table, SchemaInfo.__table__)
                    conn.execute(info.delete().where(SchemaInfo.key == "schema_version"))
                    conn.execute(info.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
        except SQLAlchemyError as exc:
            raise self._wrap(exc) from None
        if self._sqlite:
            # Only now that the file is known to be ours: WAL changes the file header for good.
            # (journal_mode cannot change inside a transaction, so it goes on the raw connection.)
            # Switching needs the file to itself, and SQLite reports a busy file at once here
            # rather than through the busy timeout: a second process opening the store at the same
            # moment waits for the first (which switches it; then there is nothing to do).
            raw = self.engine.raw_connection()
            deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
            try:
                dbapi: Any = raw.driver_connection
                while True:
                    try:
                        if str(dbapi.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                            dbapi.execute("PRAGMA journal_mode=WAL")
                        break
                    except sqlite3.OperationalError as exc:
                        if "locked" not in str(exc) or time.monotonic() > deadline:
                            raise StoreError(f"cannot open {self.display_url!r}: {self._hide(str(exc))}") from None
                        time.sleep(0.02)
            finally:
                raw.close()

    def schema_version(self) -> int:
        with self.transaction() as s:
            return int(s.get_one(SchemaInfo, "schema_version").value)

    # ------------------------------------------------------------------ platforms

    @staticmethod
    def _insert_new(session: Session, model: Any, values: Mapping[str, Any], keys: Sequence[str]) -> bool:
        """Insert ``values`` into ``model``'s table unless a row with the same ``keys`` (a unique
        key of the table) is there; whether it was inserted. One statement on SQLite and
        PostgreSQL (``ON CONFLICT DO NOTHING``), so two writers never both insert it nor fail."""
        table = cast(Table, model.__table__)
        name = session.get_bind().dialect.name
        if name in ("postgresql", "sqlite"):
            insert = pg_dialect.insert if name == "postgresql" else sqlite_dialect.insert
            # RETURNING says whether it was inserted (a driver's rowcount is not reliable here)
            done = session.execute(insert(table).values(**values).on_conflict_do_nothing(index_elements=list(keys))
                                   .returning(table.c[keys[0]]))
            return done.first() is not None
        found = session.execute(select(*[table.c[k] for k in keys])
                                .where(*[table.c[k] == values[k] for k in keys])).first()
        if found is None:
            session.execute(table.insert().values(**values))
        return found is None

    #: Profiled rows per INSERT statement: 50 rows of 17 values stay within SQLite's oldest limit of
    #: 999 bound parameters; one statement per row costs a round trip each on a database server.
    _ROWS_PER_INSERT = 50

    @classmethod
    def _insert_new_rows(cls, session: Session, rows: Sequence[dict[str, Any]]) -> set[tuple[str, str, int]]:
        """Insert profiled ``rows`` (one platform's, none stored when read) but those another writer
        stored since; the (spec_key, primitive, threads) of those inserted."""
        table = cast(Table, ProfileRow.__table__)
        name = session.get_bind().dialect.name
        keys = ["platform_id", "spec_key", "primitive", "threads"]
        if name not in ("postgresql", "sqlite"):
            return {(r["spec_key"], r["primitive"], int(r["threads"])) for r in rows
                    if cls._insert_new(session, ProfileRow, r, keys)}
        insert = pg_dialect.insert if name == "postgresql" else sqlite_dialect.insert
        inserted: set[tuple[str, str, int]] = set()
        columns = [c.name for c in table.columns if c.name != "id"]
        for i in range(0, len(rows), cls._ROWS_PER_INSERT):
            chunk = [{c: r.get(c, table.c[c].default.arg if table.c[c].default is not None else None) for c in columns}
                     for r in rows[i:i + cls._ROWS_PER_INSERT]]
            done = session.execute(insert(table).values(chunk).on_conflict_do_nothing(index_elements=keys)
                                   .returning(table.c.spec_key, table.c.primitive, table.c.threads))
            inserted.update((a, b, int(c)) for a, b, c in done.all())
        return inserted

    @classmethod
    def _upsert_platform(cls, session: Session, platform: Platform | GpuDevice) -> None:
        session.flush()  # (so that the statement below sees what the session added before)
        cls._insert_new(session, PlatformRow, {"id": platform.id, "cpu_model": platform.cpu_model,
                                               "created_at": time.time(), "fingerprint": platform.to_dict()}, ["id"])

    def save_platform(self, platform: Platform) -> str:
        with self.transaction() as s:
            self._upsert_platform(s, platform)
        return platform.id

    def platforms(self) -> list[Platform]:
        with self.transaction() as s:
            rows = s.scalars(select(PlatformRow).order_by(PlatformRow.created_at)).all()
            # CUDA devices (rooftune.platform.gpu) share the table; they are not CPU platforms
            return [Platform.from_dict(r.fingerprint) for r in rows if r.fingerprint.get("kind") != "cuda"]

    # ------------------------------------------------------------------ ceilings

    def save_ceilings(
        self,
        platform: Platform | GpuDevice,
        data: Mapping[str, Any],
        *,
        quick: bool,
        threads: Sequence[int],
        measurements: Sequence[Mapping[str, Any]] = (),
        rooftune_version: str = "",
    ) -> int:
        """Store a ceilings result and the measurements behind it in one transaction; returns its id."""
        with self.transaction() as s:
            self._upsert_platform(s, platform)
            row = CeilingsRow(
                platform_id=platform.id,
                created_at=time.time(),
                quick=quick,
                threads=",".join(str(t) for t in sorted(threads)),
                rooftune_version=rooftune_version,
                data=dict(data),
            )
            s.add(row)
            s.flush()
            for m in measurements:
                s.add(
                    MeasurementRow(
                        platform_id=platform.id,
                        ceilings_id=row.id,
                        label=str(m["label"]),
                        median_s=float(statistics.median(m["samples"])),
                        started_at=float(m.get("started_at", 0.0)),
                        data=dict(m),
                    )
                )
            return row.id

    def load_ceilings(
        self, platform_id: str, *, threads: Sequence[int], allow_quick: bool = True
    ) -> dict[str, Any] | None:
        """The newest ceilings of ``platform_id`` measured on exactly ``threads``; a full run is
        preferred over a quick one, and a quick one is returned only when ``allow_quick``."""
        key = ",".join(str(t) for t in sorted(threads))
        with self.transaction() as s:
            q = (
                select(CeilingsRow)
                .where(CeilingsRow.platform_id == platform_id, CeilingsRow.threads == key)
                .order_by(CeilingsRow.quick.asc(), CeilingsRow.created_at.desc())
            )
            if not allow_quick:
                q = q.where(CeilingsRow.quick.is_(False))
            row = s.scalars(q.limit(1)).first()
            return dict(row.data) if row is not None else None

    def ceilings_history(self, platform_id: str, *, threads: Sequence[int], quick: bool,
                         limit: int = 20) -> list[dict[str, Any]]:
        """Up to ``limit`` stored ceilings of ``platform_id`` on exactly ``threads`` with the same
        ``quick`` flag (runs of the same effort), newest first."""
        key = ",".join(str(t) for t in sorted(threads))
        with self.transaction() as s:
            q = (
                select(CeilingsRow)
                .where(CeilingsRow.platform_id == platform_id, CeilingsRow.threads == key,
                       CeilingsRow.quick.is_(quick))
                .order_by(CeilingsRow.created_at.desc())
                .limit(limit)
            )
            return [dict(r.data) for r in s.scalars(q).all()]

    def measurements(self, platform_id: str | None = None, label: str | None = None) -> list[dict[str, Any]]:
        with self.transaction() as s:
            q = select(MeasurementRow).order_by(MeasurementRow.id)
            if platform_id:
                q = q.where(MeasurementRow.platform_id == platform_id)
            if label:
                q = q.where(MeasurementRow.label == label)
            return [dict(r.data) for r in s.scalars(q).all()]

    # ------------------------------------------------------------------ analyses

    def save_analysis(
        self, platform: Platform | GpuDevice, data: Mapping[str, Any], *, model: str, batch: int, threads: int,
        rooftune_version: str = "",
    ) -> int:
        """Store one model analysis (its JSON form) in one transaction; returns its id."""
        with self.transaction() as s:
            self._upsert_platform(s, platform)
            row = AnalysisRow(
                platform_id=platform.id, created_at=time.time(), model=model, batch=batch,
                threads=threads, rooftune_version=rooftune_version, data=dict(data),
            )
            s.add(row)
            s.flush()
            return row.id

    def analyses(self, platform_id: str | None = None, model: str | None = None) -> list[dict[str, Any]]:
        """Stored analyses, oldest first, each its JSON form with ``id`` and ``created_at`` added."""
        with self.transaction() as s:
            q = select(AnalysisRow).order_by(AnalysisRow.id)
            if platform_id:
                q = q.where(AnalysisRow.platform_id == platform_id)
            if model:
                q = q.where(AnalysisRow.model == model)
            return [{**dict(r.data), "id": r.id, "created_at": r.created_at} for r in s.scalars(q).all()]

    # ------------------------------------------------------------------ tuning trials

    def save_trial(
        self, platform: Platform, *, study_key: str, config_key: str, status: str,
        config: Mapping[str, Any], result: Mapping[str, Any],
    ) -> int:
        """Store one trial of a tuning study in its own transaction (so an interrupted study
        keeps every trial it finished); returns its id."""
        with self.transaction() as s:
            self._upsert_platform(s, platform)
            values = {"platform_id": platform.id, "study_key": study_key, "config_key": config_key,
                      "created_at": time.time(), "status": status, "config": finite(dict(config)),
                      "result": finite(dict(result))}
            # a configuration another node of the study stored first keeps its row; a claim on it
            # (a node of the study about to run it, rooftune.store.fleet_rows) gives way to the result
            if not self._insert_new(s, TrialRow, values, ["study_key", "config_key"]):
                s.execute(update(TrialRow).where(TrialRow.study_key == study_key, TrialRow.config_key == config_key,
                                                 TrialRow.status == CLAIMED).values(**values))
            return int(s.scalars(select(TrialRow.id).where(TrialRow.study_key == study_key,
                                                           TrialRow.config_key == config_key)).one())

    def trials(self, study_key: str) -> list[dict[str, Any]]:
        """The trials of a study, oldest first: ``config_key``, ``status``, ``config``, ``result``
        (claims of trials not run yet left out)."""
        with self.transaction() as s:
            q = select(TrialRow).where(TrialRow.study_key == study_key, TrialRow.status != CLAIMED).order_by(TrialRow.id)
            return [{"config_key": r.config_key, "status": r.status, "config": dict(r.config),
                     "result": dict(r.result), "created_at": r.created_at, "id": r.id} for r in s.scalars(q).all()]

    def fingerprints(self) -> dict[str, dict[str, Any]]:
        """Every stored platform's fingerprint as stored (JSON), by id."""
        with self.transaction() as s:
            return {r.id: {**dict(r.fingerprint), "id": r.id} for r in s.scalars(select(PlatformRow)).all()}

    def count(self, table: str) -> int:
        from sqlalchemy import func

        model = {
            "platforms": PlatformRow, "ceilings": CeilingsRow, "measurements": MeasurementRow,
            "analyses": AnalysisRow, "trials": TrialRow, "profiles": ProfileRow, "fleet_runs": FleetRunRow,
            "sweep_points": SweepPointRow,
        }[table]
        with self.transaction() as s:
            return int(s.scalar(select(func.count()).select_from(model)) or 0)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_store(store: str | os.PathLike[str] | Store | None) -> Store:
    """The one way in to a store: ``store`` itself where it is a :class:`Store` (the caller's, which
    the caller closes), else a store opened at that URL or file path (None: the default store,
    :func:`resolve_url`), which whoever asked for it closes."""
    return store if isinstance(store, Store) else Store(store)


def _install_sqlite_pragmas(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves (below)
        cur = dbapi_connection.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cur.execute("PRAGMA foreign_keys=ON")
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


__all__ = ["DB_ENV", "Store", "data_dir", "default_db_path", "modules_dir", "open_store", "redact_url",
           "resolve_url"]

"""The store: SQLAlchemy over SQLite by default, any SQLAlchemy URL otherwise.

Every write is one transaction. On SQLite the database runs in WAL mode and every transaction
starts with ``BEGIN IMMEDIATE`` (SQLAlchemy's documented pysqlite recipe), so two processes
writing at once queue on the lock instead of failing half-way.
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from sqlalchemy import Engine, Table, create_engine, event, inspect, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session

from rooftune.errors import StoreError
from rooftune.platform import Platform
from rooftune.platform.gpu import GpuDevice
from rooftune.store.migrations import MIGRATIONS, SCHEMA_VERSION
from rooftune.store.schema import (
    AnalysisRow,
    CeilingsRow,
    MeasurementRow,
    PlatformRow,
    ProfileRow,
    SchemaInfo,
    SweepPointRow,
    TrialRow,
)

#: Environment variable that names the store when --db is not given.
DB_ENV = "ROOFTUNE_DB"
#: How long a writer waits for another process's transaction before giving up (ms). Ceilings
#: runs write once at the end, so 30 s is far longer than any lock is held.
SQLITE_BUSY_TIMEOUT_MS = 30_000


def data_dir() -> Path:
    """rooftune's folder in the user data directory (platformdirs: ``$XDG_DATA_HOME/rooftune``,
    by default ``~/.local/share/rooftune`` on Linux): the default store, the modules exported for
    studies, the performance models transferred to this machine."""
    from platformdirs import user_data_dir

    return Path(user_data_dir("rooftune", appauthor=False))


def default_db_path() -> Path:
    return data_dir() / "rooftune.db"


def modules_dir() -> Path:
    """Where a module given to ``tune`` without ``save`` is exported (a .pt2 file per module)."""
    return data_dir() / "modules"


def resolve_url(db: str | os.PathLike[str] | None = None) -> str:
    """``db`` (a URL or a file path), else $ROOFTUNE_DB, else the file in the user's data directory."""
    if db is not None and not str(db).strip():
        raise StoreError(f"--db is empty; pass a file path or an SQLAlchemy URL, or leave it out for {default_db_path()}")
    value = str(db) if db is not None else os.environ.get(DB_ENV) or str(default_db_path())
    if "://" in value:
        return value
    return f"sqlite:///{Path(value).expanduser().absolute()}"


#: What stands for a password wherever a database URL is printed or written.
HIDDEN = "***"
#: ``scheme://user:password@rest``, the password running to the last '@': a password with an
#: unencoded '@' in it is hidden whole (with more than it, where a query holds an '@' too).
_CREDENTIALS = re.compile(r"^(?P<head>[^:/?#]+://[^:/@?#]*):(?P<password>.*)@(?P<rest>[^@]*)$", re.DOTALL)


def redact_url(url: str | os.PathLike[str]) -> str:
    """``url`` as it may be shown or written anywhere: its password replaced by ``***``
    (``postgresql://user:***@host/db``); a file path or a URL without a password as given."""
    text = str(url)
    try:
        parsed = make_url(text)
    except (ArgumentError, ValueError):
        parsed = None
    if parsed is not None and parsed.password is not None and text.count("@") == 1:
        return parsed.render_as_string(hide_password=True)
    m = _CREDENTIALS.match(text)  # unparsable, or an '@' that SQLAlchemy may read otherwise
    return f"{m['head']}:{HIDDEN}@{m['rest']}" if m else text


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


class Store:
    """A rooftune database. ``Store()`` opens the default one, ``Store(url_or_path)`` any other.

    Opening creates the schema or upgrades an older one; a database written by a newer rooftune,
    a file that is not a SQLite database and a SQLite database that is not rooftune's are refused
    with :class:`StoreError`, untouched.
    """

    def __init__(self, db: str | os.PathLike[str] | None = None, create: bool = True) -> None:
        """``create=False`` (commands that only read) refuses a SQLite file that does not exist
        instead of creating an empty store there."""
        self.url = resolve_url(db)
        #: The URL as messages name it: never its password.
        self.display_url = redact_url(self.url)
        try:
            url = make_url(self.url)
        except ArgumentError:
            raise StoreError(
                f"invalid database URL {self.display_url!r}: expected a file path or an SQLAlchemy URL "
                f"such as sqlite:///path/to/rooftune.db or postgresql://host/db"
            ) from None
        self._sqlite = url.get_backend_name() == "sqlite"
        if self._sqlite and url.database and url.database != ":memory:":
            if not create and not Path(url.database).exists():
                origin = "" if db is not None or not os.environ.get(DB_ENV) else f" (from ${DB_ENV})"
                raise StoreError(f"no store at '{url.database}'{origin}: nothing was measured there yet; "
                                 f"pass --db with the store's path, or measure first (rooftune profile)")
            _check_sqlite_file(Path(url.database), chosen=db is not None or bool(os.environ.get(DB_ENV)))
        try:
            self.engine: Engine = create_engine(self.url)
        except ImportError as exc:
            raise StoreError(f"cannot use database URL {self.display_url!r}: {self._hide(str(exc))}; install the database's driver for "
                             f"SQLAlchemy (e.g. pip install psycopg for postgresql://)") from None
        except ArgumentError as exc:
            raise StoreError(f"cannot use database URL {self.display_url!r}: {self._hide(str(exc))}") from None
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
        detail = self._hide(str(orig) if orig is not None else str(exc).splitlines()[0])
        if isinstance(orig, sqlite3.DatabaseError) and "not a database" in detail:
            return StoreError(
                f"database {self.display_url!r} is not a SQLite database (file is corrupt or of another kind); "
                f"move it away or pass --db with another path"
            )
        return StoreError(f"database {self.display_url!r}: {detail}")

    def _hide(self, text: str) -> str:
        """A driver's message with the URL's password left out, should the driver quote it."""
        text = text.replace(self.url, self.display_url)
        m = _CREDENTIALS.match(self.url)
        try:
            decoded = make_url(self.url).password  # a driver quotes it decoded (%40 as '@')
        except (ArgumentError, ValueError):
            decoded = None
        for secret in sorted({m["password"] if m else "", str(decoded or "")} - {""}, key=len, reverse=True):
            text = text.replace(secret, HIDDEN)
        return text

    # ------------------------------------------------------------------ schema

    def _migrate(self) -> None:
        try:
            with self.engine.begin() as conn:
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
                for version in range(current + 1, SCHEMA_VERSION + 1):
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
    def _upsert_platform(session: Session, platform: Platform | GpuDevice) -> None:
        if session.get(PlatformRow, platform.id) is None:
            session.add(
                PlatformRow(
                    id=platform.id,
                    cpu_model=platform.cpu_model,
                    created_at=time.time(),
                    fingerprint=platform.to_dict(),
                )
            )
            session.flush()  # rows that refer to it are inserted after it

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
            row = TrialRow(platform_id=platform.id, study_key=study_key, config_key=config_key,
                           created_at=time.time(), status=status, config=_finite(dict(config)),
                           result=_finite(dict(result)))
            s.add(row)
            s.flush()
            return row.id

    def trials(self, study_key: str) -> list[dict[str, Any]]:
        """The trials of a study, oldest first: ``config_key``, ``status``, ``config``, ``result``."""
        with self.transaction() as s:
            q = select(TrialRow).where(TrialRow.study_key == study_key).order_by(TrialRow.id)
            return [{"config_key": r.config_key, "status": r.status, "config": dict(r.config),
                     "result": dict(r.result), "created_at": r.created_at} for r in s.scalars(q).all()]

    # ------------------------------------------------------------------ profiles

    _PROFILE_FIELDS = ("spec_key", "spec", "primitive", "threads", "status", "median_s", "iqr_s", "repetitions",
                       "reason", "warnings", "sources", "pass_medians", "pass_canary", "fastest_s")

    def save_profiles(self, platform: Platform | Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> int:
        """Store profiled rows of one platform in one transaction; a row whose (platform, spec,
        primitive, threads) is already stored keeps its figures and gains the networks the new
        row names as its sources. Returns how many were added."""
        return self.save_profile_groups([(platform, rows)])

    def save_profile_groups(self, groups: Sequence[tuple[Platform | Mapping[str, Any], Sequence[Mapping[str, Any]]]]) -> int:
        """Rows of several platforms (a platform may be a stored fingerprint, as a dataset file
        carries it) in one transaction: all are stored or none."""
        added = 0
        with self.transaction() as s:
            for platform, rows in groups:
                if isinstance(platform, Platform):
                    pid = platform.id
                    self._upsert_platform(s, platform)
                else:
                    pid = str(platform["id"])
                    if s.get(PlatformRow, pid) is None:
                        s.add(PlatformRow(id=pid, cpu_model=str(platform.get("cpu_model", "")), created_at=time.time(),
                                          fingerprint=dict(platform)))
                        s.flush()
                have = self._profile_keys(s, pid)
                seen_sources: dict[str, list[str]] = {}
                for r in rows:
                    k = (r["spec_key"], r["primitive"], int(r["threads"]))
                    if k in have:
                        known = seen_sources.setdefault(r["spec_key"], [])
                        known.extend(x for x in r.get("sources") or [] if x not in known)
                        continue
                    have.add(k)
                    values = _finite({f: r.get(f) for f in self._PROFILE_FIELDS})
                    values.update(warnings=list(r.get("warnings") or []), sources=list(r.get("sources") or []),
                                  repetitions=int(r.get("repetitions") or 0), reason=r.get("reason") or "",
                                  pass_medians=_pass_medians(values))
                    values["pass_canary"] = _pass_canary(values)
                    s.add(ProfileRow(platform_id=pid, created_at=float(r.get("created_at") or time.time()), **values))
                    added += 1
                self._merge_sources(s, pid, seen_sources)  # autoflush: rows added above are seen
        return added

    def add_profile_sources(self, platform_id: str, sources: Mapping[str, Sequence[str]]) -> int:
        """Record that the stored rows of these specs (spec_key -> networks) also come from these
        networks: a campaign that meets a layer already profiled for another network. Returns how
        many rows changed."""
        with self.transaction() as s:
            return self._merge_sources(s, platform_id, sources)

    @staticmethod
    def _merge_sources(s: Session, platform_id: str, sources: Mapping[str, Sequence[str]]) -> int:
        wanted = {k: list(v) for k, v in sources.items() if v}
        if not wanted:
            return 0
        changed = 0
        keys = list(wanted)
        for i in range(0, len(keys), 500):  # bounded IN lists
            q = select(ProfileRow).where(ProfileRow.platform_id == platform_id, ProfileRow.spec_key.in_(keys[i:i + 500]))
            for row in s.scalars(q):
                have = list(row.sources or [])
                new = [x for x in wanted[row.spec_key] if x not in have]
                if new:
                    row.sources = have + new  # a new list: the JSON column sees the change
                    changed += 1
        return changed

    def update_profiles(self, platform_id: str, rows: Sequence[Mapping[str, Any]]) -> int:
        """Replace the figures of stored rows (a later pass of a campaign: status, median, IQR,
        fastest sample, repetitions, reason, warnings, pass medians) in one transaction. A row not stored is an
        error and nothing is changed. Returns how many were updated."""
        with self.transaction() as s:
            for r in rows:
                q = select(ProfileRow).where(ProfileRow.platform_id == platform_id,
                                             ProfileRow.spec_key == r["spec_key"],
                                             ProfileRow.primitive == r["primitive"],
                                             ProfileRow.threads == int(r["threads"]))
                row = s.scalars(q).one_or_none()
                if row is None:
                    raise StoreError(f"no profiled row {r['spec_key']}/{r['primitive']}/{r['threads']} on platform "
                                     f"{platform_id} to update; nothing was changed")
                values = _finite({f: r.get(f) for f in ("status", "median_s", "iqr_s", "fastest_s")})
                row.status, row.median_s, row.iqr_s = values["status"], values["median_s"], values["iqr_s"]
                row.fastest_s = values["fastest_s"]
                row.repetitions = int(r.get("repetitions") or 0)
                row.reason = r.get("reason") or ""
                row.warnings = list(r.get("warnings") or [])
                row.pass_medians = _pass_medians(values | {"pass_medians": r.get("pass_medians")})
                row.pass_canary = _pass_canary({"pass_medians": row.pass_medians, "pass_canary": r.get("pass_canary")})
        return len(rows)

    @staticmethod
    def _profile_keys(s: Session, platform_id: str) -> set[tuple[str, str, int]]:
        q = select(ProfileRow.spec_key, ProfileRow.primitive, ProfileRow.threads).where(ProfileRow.platform_id == platform_id)
        return {(a, b, int(c)) for a, b, c in s.execute(q).all()}

    def profile_keys(self, platform_id: str) -> set[tuple[str, str, int]]:
        """(spec_key, primitive, threads) already profiled on a platform: what a campaign skips."""
        with self.transaction() as s:
            return self._profile_keys(s, platform_id)

    def profiles(self, platform_id: str | None = None) -> list[dict[str, Any]]:
        """Profiled rows (of one platform, or all), oldest first, with ``platform_id``."""
        with self.transaction() as s:
            q = select(ProfileRow).order_by(ProfileRow.id)
            if platform_id:
                q = q.where(ProfileRow.platform_id == platform_id)
            out = []
            for r in s.scalars(q).all():
                row = {"platform_id": r.platform_id, "created_at": r.created_at,
                       **{f: getattr(r, f) for f in self._PROFILE_FIELDS}}
                row["pass_medians"] = _pass_medians(row)
                row["pass_canary"] = _pass_canary(row)
                out.append(row)
            return out

    def profiled_platforms(self) -> dict[str, int]:
        """Profiled rows per platform id, for the platforms that have any."""
        from sqlalchemy import func

        with self.transaction() as s:
            q = select(ProfileRow.platform_id, func.count()).group_by(ProfileRow.platform_id)
            return {pid: int(n) for pid, n in s.execute(q).all()}

    def fingerprints(self) -> dict[str, dict[str, Any]]:
        """Every stored platform's fingerprint as stored (JSON), by id."""
        with self.transaction() as s:
            return {r.id: {**dict(r.fingerprint), "id": r.id} for r in s.scalars(select(PlatformRow)).all()}

    def count(self, table: str) -> int:
        from sqlalchemy import func

        model = {
            "platforms": PlatformRow, "ceilings": CeilingsRow, "measurements": MeasurementRow,
            "analyses": AnalysisRow, "trials": TrialRow, "profiles": ProfileRow,
            "sweep_points": SweepPointRow,
        }[table]
        with self.transaction() as s:
            return int(s.scalar(select(func.count()).select_from(model)) or 0)

    # ------------------------------------------------------------------ sweep points

    def save_sweep_point(self, platform: Platform | GpuDevice, point: Mapping[str, Any]) -> bool:
        """Store one sweep point (its ``to_dict``) in its own transaction, so an interrupted sweep
        keeps every point it finished; a key already stored on the platform is kept as it is.
        Returns whether it was added."""
        with self.transaction() as s:
            self._upsert_platform(s, platform)
            q = select(SweepPointRow.id).where(SweepPointRow.platform_id == platform.id,
                                               SweepPointRow.point_key == point["key"])
            if s.scalar(q) is not None:
                return False
            variant = point["variant"]
            s.add(SweepPointRow(
                platform_id=platform.id, point_key=point["key"], family=point["family"], pass_name=point["pass_"],
                precision=point["precision"], params=dict(point["params"]), status=point["status"],
                variant="|".join(str(variant[k]) for k in sorted(variant)), created_at=float(point["created_at"]),
                data=_finite(dict(point))))
        return True

    def sweep_points(self, platform_id: str | None = None, family: str | None = None) -> list[dict[str, Any]]:
        """Stored sweep points (their ``to_dict``), oldest first, of one platform and family or all."""
        with self.transaction() as s:
            q = select(SweepPointRow).order_by(SweepPointRow.id)
            if platform_id:
                q = q.where(SweepPointRow.platform_id == platform_id)
            if family:
                q = q.where(SweepPointRow.family == family)
            return [dict(r.data) for r in s.scalars(q).all()]

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


__all__ = ["DB_ENV", "Store", "data_dir", "default_db_path", "modules_dir", "redact_url", "resolve_url"]


def _finite(obj: Any) -> Any:
    """NaN and infinities as null: JSON has no such numbers, and SQLite's JSON functions refuse them."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _pass_medians(row: Mapping[str, Any]) -> list[float]:
    """A profiled row's pass medians: as stored, else (a row from before passes, or an import
    without them) its one median for an ok row, none otherwise."""
    stored = row.get("pass_medians")
    if stored:
        return [float(v) for v in stored if v is not None]
    median = row.get("median_s")
    return [float(median)] if row.get("status") == "ok" and median is not None else []


def _pass_canary(row: Mapping[str, Any]) -> list[float | None] | None:
    """A profiled row's probe readings, one per pass (None for a pass taken without the probe),
    or None when the row has none (stored before the probe, or imported without it)."""
    stored = row.get("pass_canary")
    medians = row.get("pass_medians") or []
    if not stored or not medians:
        return None
    readings = [float(v) if isinstance(v, (int, float)) and v > 0 else None for v in stored][: len(medians)]
    readings += [None] * (len(medians) - len(readings))
    return readings if any(v is not None for v in readings) else None

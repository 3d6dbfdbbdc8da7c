"""The embedded store: platforms, ceilings and measurements, over SQLAlchemy (SQLite by default)."""

from __future__ import annotations

from rooftune.store.migrations import MIGRATIONS, SCHEMA_VERSION
from rooftune.store.prune import DEFAULT_OLDER_THAN_DAYS, PruneResult, Stale, prune
from rooftune.store.store import (
    DB_ENV,
    Store,
    data_dir,
    default_db_path,
    modules_dir,
    open_store,
    redact_url,
    resolve_url,
)

__all__ = [
    "DB_ENV", "DEFAULT_OLDER_THAN_DAYS", "MIGRATIONS", "SCHEMA_VERSION", "PruneResult", "Stale", "Store", "data_dir",
    "default_db_path", "modules_dir", "open_store", "prune", "redact_url", "resolve_url",
]

"""The embedded store: platforms, ceilings and measurements, over SQLAlchemy (SQLite by default)."""

from __future__ import annotations

from rooftune.store.migrations import MIGRATIONS, SCHEMA_VERSION
from rooftune.store.store import DB_ENV, Store, default_db_path, resolve_url

__all__ = ["DB_ENV", "MIGRATIONS", "SCHEMA_VERSION", "Store", "default_db_path", "resolve_url"]

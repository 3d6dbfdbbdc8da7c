"""Where the store is and how its URL may be shown: the default file in the user's data
directory, ``--db`` and $ROOFTUNE_DB resolved to an SQLAlchemy URL, and a URL with its password
hidden wherever it is printed or written."""

from __future__ import annotations

import os
import re
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from rooftune.errors import StoreError

#: Environment variable that names the store when --db is not given.
DB_ENV = "ROOFTUNE_DB"


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
CREDENTIALS = re.compile(r"^(?P<head>[^:/?#]+://[^:/@?#]*):(?P<password>.*)@(?P<rest>[^@]*)$", re.DOTALL)


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
    m = CREDENTIALS.match(text)  # unparsable, or an '@' that SQLAlchemy may read otherwise
    return f"{m['head']}:{HIDDEN}@{m['rest']}" if m else text

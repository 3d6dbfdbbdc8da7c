"""Where the store is and how its URL may be shown: the default file in the user's data
directory, ``--db`` and $ROOFTUNE_DB resolved to an SQLAlchemy URL and checked without connecting,
and a URL with its secrets (its password, a query parameter that carries one) hidden wherever it
is printed or written: :func:`redact_url` is the one function everything shown goes through."""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote, unquote_plus

from sqlalchemy.engine import URL, make_url
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


#: What --db may be, as messages say it.
ALLOWED = ("a file path, or an SQLAlchemy URL such as sqlite:////abs/path/rooftune.db or "
           "postgresql://user@host:5432/db")
#: Characters no file path or URL of a store holds: a message naming one would run over lines.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: A database URL written without its '//' ("sqlite:x.db", "postgresql:db"): not a file name
#: anyone means, and read as one it would open an empty store in the working directory.
BARE_SCHEME = re.compile(r"^(?:sqlite|postgres(?:ql)?|mysql|mariadb|oracle|mssql|cockroachdb)(?:\+[\w.]*)?:(?!//)",
                         re.IGNORECASE)
#: The largest TCP port.
MAX_PORT = 65535


def resolve_url(db: str | os.PathLike[str] | None = None) -> str:
    """``db`` (a URL or a file path), else $ROOFTUNE_DB, else the file in the user's data directory."""
    if db is not None and not str(db).strip():
        raise StoreError(f"--db is empty; pass a file path or an SQLAlchemy URL, or leave it out for {default_db_path()}")
    value = str(db) if db is not None else os.environ.get(DB_ENV) or str(default_db_path())
    if CONTROL.search(value):
        raise StoreError(f"invalid database URL or path {redact_url(value)!r}: it holds a control character; "
                         f"allowed {ALLOWED}")
    if "://" in value:
        return value
    if BARE_SCHEME.match(value):
        raise StoreError(f"invalid database URL {redact_url(value)!r}: a URL needs '://' after its scheme; allowed {ALLOWED}")
    try:
        path = Path(value).expanduser()
    except RuntimeError:  # ~name of no user (or ~ with no home directory)
        raise StoreError(f"invalid database path {redact_url(value)!r}: its '~' names no user's home directory; "
                         f"allowed {ALLOWED}") from None
    # SQLAlchemy reads a '?' as the start of a query and decodes %XX in the file's name: both
    # encoded, the file is the one named
    return "sqlite:///" + str(path.absolute()).replace("%", "%25").replace("?", "%3F")


def parse_url(url: str) -> URL:
    """``url`` (as :func:`resolve_url` gives it) parsed, without connecting; a URL no store can
    be opened at is refused in one line naming it (its secrets hidden) and what is allowed."""
    shown = redact_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreError(f"invalid database URL {shown!r}: not a file path or a URL; allowed {ALLOWED}") from None
    except ValueError:  # SQLAlchemy reads the port with int()
        raise StoreError(f"invalid database URL {shown!r}: its port is not a number; allowed a port in "
                         f"1..{MAX_PORT}, or none for the database's default") from None
    if parsed.port is not None and not 1 <= parsed.port <= MAX_PORT:
        raise StoreError(f"invalid database URL {shown!r}: port {parsed.port} is out of range; allowed a port in "
                         f"1..{MAX_PORT}, or none for the database's default")
    if parsed.get_backend_name() == "sqlite" and (parsed.host or parsed.username or parsed.port):
        # SQLAlchemy reads sqlite://name.db as an in-memory database on a host it ignores
        raise StoreError(f"invalid database URL {shown!r}: a SQLite URL names no host; allowed "
                         f"sqlite:///relative/path.db, sqlite:////absolute/path.db or sqlite:// (in memory)")
    return parsed


#: What stands for a secret wherever a database URL is printed or written.
HIDDEN = "***"
#: ``scheme://user:password@rest``: SQLAlchemy reads the user up to the first ':' or '/', the
#: password from there to an '@'. Here the password runs to the last '@': one with an unencoded
#: '@' in it is hidden whole (with more than it, where a query holds an '@' too), and text that is
#: no URL at all ("not a url://user:pw@host") loses what looks like a password.
CREDENTIALS = re.compile(r"^(?P<head>.*?://[^:/]*):(?P<password>.*)@(?P<rest>[^@]*)$", re.DOTALL)
#: ``scheme://host:word/db`` with no '@': SQLAlchemy reads ``word`` as a port, where it is most
#: likely a password whose '@host' was left out; a port that is no number is hidden with it.
BARE_PORT = re.compile(r"^(?P<head>.*?://[^:/?#@\[]*):(?P<port>[^/?#@]*)(?P<rest>(?:[/?#].*)?)$", re.DOTALL)
#: Query parameters that carry a secret: a name holding one of these words once decoded, lower
#: case, letters and digits only (``PASSWORD``, ``pass%77ord``, ``ssl_password``, ``api-key``)...
SECRET_WORDS = ("password", "passwd", "passphrase", "pwd", "secret", "token", "apikey", "accesskey", "privatekey",
                "credential", "authorization")
#: ... or one of these whole. libpq's passfile, sslkey, sslcert and sslrootcert name files (or a
#: key in an engine), not what is in them: shown, as they say which file a connection used.
SECRET_NAMES = ("pass", "key", "auth", "sig", "signature")


def secret_parameter(name: str) -> bool:
    """Whether a URL query parameter named ``name`` (as written: percent-encoded, '+' for a
    space, in any case) carries a secret."""
    for _ in range(3):  # a name encoded twice over reads as the secret's name too
        decoded = unquote_plus(name)
        if decoded == name:
            break
        name = decoded
    word = "".join(c for c in unicodedata.normalize("NFKC", name).casefold() if c.isalnum())
    return word in SECRET_NAMES or any(w in word for w in SECRET_WORDS)


def _secret_spans(text: str) -> list[tuple[int, int]]:
    """Where ``text`` holds a secret: its password (:data:`CREDENTIALS`, else a port that is no
    number, :data:`BARE_PORT`) and the value of each query parameter that carries one. The
    query is read from every '?' after the scheme's '//' (SQLAlchemy's starts at one of them)
    and split at '&' and ';' (SQLAlchemy splits at '&' only: hiding more is no leak)."""
    spans = []
    if m := CREDENTIALS.match(text):
        spans.append(m.span("password"))
    elif (p := BARE_PORT.match(text)) and p["port"] and not p["port"].isdigit():
        spans.append(p.span("port"))
    scheme = text.find("://")
    query = text.find("?", 0 if scheme < 0 else scheme + 3)
    while query >= 0:
        pos = query + 1
        for part in re.split(r"[&;]", text[pos:]):
            name, eq, value = part.partition("=")
            if eq and secret_parameter(name):
                spans.append((pos + len(name) + 1, pos + len(part)))
            pos += len(part) + 1
        query = text.find("?", query + 1)
    merged: list[tuple[int, int]] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):  # overlapping spans (a query in a password) hidden as one
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def redact_url(url: str | os.PathLike[str]) -> str:
    """``url`` as it may be shown or written anywhere: its password and the value of every query
    parameter that carries a secret (:func:`secret_parameter`) replaced by ``***``
    (``postgresql://user:***@host/db?sslmode=require&password=***``); the rest as given."""
    text = str(url)
    out, done = [], 0
    for a, b in _secret_spans(text):
        out += [text[done:a], HIDDEN]
        done = b
    return "".join(out) + text[done:]


def url_secrets(url: str | os.PathLike[str]) -> list[str]:
    """The secrets in ``url`` as written and as decoded (a driver quotes them decoded: %40 as
    '@'), longest first: for hiding them in a driver's messages, which may quote them."""
    text = str(url)
    found: set[str] = set()
    for a, b in _secret_spans(text):
        found |= {text[a:b], unquote(text[a:b]), unquote_plus(text[a:b])}
    try:
        parsed = make_url(text)
    except (ArgumentError, ValueError, TypeError):
        parsed = None
    if parsed is not None:
        found.add(parsed.password or "")
        for name, values in parsed.query.items():
            if secret_parameter(name):
                found.update([values] if isinstance(values, str) else values)
    return sorted(found - {""}, key=len, reverse=True)

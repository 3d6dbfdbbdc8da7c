"""The store a fleet's nodes share: the one rule every command with ``--cluster`` follows.

The driver opens the store first, so that it is created (or refused: a newer schema, a server that
does not answer) before any node opens it, and hands the nodes its URL. A PostgreSQL server is
shared by every node that reaches it (a node that cannot is named by its first unit's error). A
SQLite store is shared only when it is a file that every node sees: an in-memory database is
refused, and so is a file that a node does not find at the same path (a node on another host
would otherwise create a store of its own there, and its rows would never reach this one). A
relative path is handed to the nodes made absolute, as the driver reads it: a node's worker runs
in a directory of its own.

Every node runs the driver's rooftune version: the units are the driver's functions and data,
and the store's schema the driver's; a node of another version is named and refused.
"""

from __future__ import annotations

import os
from typing import Any

from rooftune.errors import ClusterError, InvalidArgument
from rooftune.fleet.executor import Executor, Node

#: What a store not shared is told to use instead.
SHARED = ("a store every node shares: --db postgresql+psycopg://USER:PASSWORD@HOST/DB, or a SQLite file on a "
          "file system every node mounts at the same path")


def _sqlite_file(url: str) -> str | None:
    """The file of a SQLite URL; "" for an in-memory database; None for another database."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    path = parsed.database or ""
    if path == ":memory:" or parsed.query.get("mode") == "memory" or path.startswith("file::memory:"):
        return ""
    return path


def _file_seen(path: str) -> bool:
    """(On a node) whether the store's file is there."""
    return os.path.isfile(path)


def check_versions(nodes: list[Node]) -> None:
    """Refuse, naming them, the nodes whose rooftune is not this one's version."""
    import rooftune

    versions = [(n, (n.fingerprint.get("library_versions") or {}).get("rooftune")) for n in nodes]
    other = sorted(f"{n.address or n.id[:12]} ({v})" for n, v in versions if v != rooftune.__version__)
    if other:
        raise ClusterError(f"node{'s' if len(other) > 1 else ''} {', '.join(other)} run{'' if len(other) > 1 else 's'} "
                           f"another rooftune than this one ({rooftune.__version__}); install the same version on "
                           "every node")


def check_shareable(db: str | None) -> None:
    """Refuse, before any cluster is asked, a store that no node could share: an in-memory
    database, or a URL no store can be at (as the store words it)."""
    from rooftune.store import redact_url, resolve_url
    from rooftune.store.urls import parse_url

    url = resolve_url(db)
    parse_url(url)
    if _sqlite_file(url) == "":
        raise InvalidArgument("--db", redact_url(url), f"an in-memory database is not shared with the nodes; use {SHARED}")


def shared_store(executor: Executor, db: str | None) -> str:
    """The URL of the store (``db``, a URL or a file path; default as everywhere) that every node
    of ``executor`` writes to, created or refused here; a store the nodes would not share is
    refused in one line (see the module's doc), as are nodes of another rooftune version."""
    from rooftune.store import Store

    check_shareable(db)
    check_versions(executor.nodes())
    with Store(db) as store:
        url, shown = store.url, store.display_url
    path = _sqlite_file(url)
    if path:
        from sqlalchemy.engine import make_url

        if not os.path.isabs(path):
            path = os.path.abspath(path)
            url = make_url(url).set(database=path).render_as_string(hide_password=False)
        nodes = {n.id: n for n in executor.nodes()}
        seen: dict[str, Any] = executor.on_each_node(_file_seen, path)
        blind = sorted(nodes[i].address or i[:12] for i, ok in seen.items() if not ok and i in nodes)
        if blind:
            raise InvalidArgument("--db", shown, f"the file is not on node{'s' if len(blind) > 1 else ''} "
                                  f"{', '.join(blind)}, which would each write a store of their own; use {SHARED}")
    return url


#: (On a node) the stores its units opened, by URL, kept open across the units its worker process
#: runs: opening one checks its schema, a round trip or more to a database server per unit.
_NODE_STORES: dict[str, Any] = {}


def node_store(url: str) -> Any:
    """(On a node) the store at ``url`` (the one :func:`shared_store` gave the units), opened once
    per worker process; one at a time (another run's is closed)."""
    from rooftune.store import Store

    store = _NODE_STORES.get(url)
    if store is None:
        for other in _NODE_STORES.values():
            other.close()
        _NODE_STORES.clear()
        store = _NODE_STORES[url] = Store(url)
    return store

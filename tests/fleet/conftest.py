"""The fleet tests' local Ray cluster (a head and two worker nodes, started once for the tests
that use it) and their shared store."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rooftune.fleet import NODE_RESOURCE
from tests import pg
from tests.pg import pg_server  # noqa: F401 (the fixture)

#: A killed node is declared dead within seconds (Ray's default health checks take tens of
#: seconds), so that the test of a killed node does not wait for it; not within one second, which
#: a live node's raylet missed beside other busy processes on 2 cores and was declared dead.
FAST_DEATH = {"health_check_period_ms": 1000, "health_check_timeout_ms": 2000, "health_check_failure_threshold": 3}
#: The repository, on the nodes' path: their units load the tests' models by name, as the
#: trials' processes do.
ROOT = str(Path(__file__).resolve().parents[2])


@contextmanager
def node_environment(extra: Mapping[str, str] = {}) -> Iterator[None]:  # noqa: B006 (read only)
    """The environment a node started within it keeps (its processes inherit this one's): the
    repository on the path, and ``extra``."""
    saved = dict(os.environ)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    os.environ.update(extra)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(autouse=True)
def _patient_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node's first task imports rooftune and torch in a fresh worker: beside other busy
    processes on 2 cores that took over the driver's 120 s for a node to say its platform."""
    from rooftune.fleet import executor

    monkeypatch.setattr(executor, "PROBE_TIMEOUT_S", 900.0)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Any]:
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    with node_environment():
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                          "_system_config": FAST_DEATH})
    try:
        with node_environment():
            for _ in range(2):
                c.add_node(num_cpus=1, resources={NODE_RESOURCE: 1})
        c.wait_for_nodes()
        yield c
    finally:
        c.shutdown()


@pytest.fixture
def shared_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The shared store: a fresh PostgreSQL database, or a SQLite file where there is no server."""
    if pg.unavailable():
        return f"sqlite:///{tmp_path / 'shared.db'}"
    server: pg.Server = request.getfixturevalue("pg_server")
    return server.new_database()


def drive(run: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """``run()`` started in a thread, as a driver the test kills a node under: the thread and
    what it ends with (``result``, or ``error`` to assert on)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = run()
        except BaseException as exc:  # noqa: BLE001 (asserted by the test)
            outcome["error"] = exc

    driver = threading.Thread(target=target)
    driver.start()
    return driver, outcome

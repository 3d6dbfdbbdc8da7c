"""``rooftune.sweep.sweep``: a sweep on this machine, or on every platform of a cluster's nodes."""

from __future__ import annotations

from typing import Any

from rooftune.sweep.cluster import sweep_on_cluster
from rooftune.sweep.run import sweep as sweep_here


def sweep(family: str, grid: Any = None, *, cluster: str | None = None, **kwargs: Any) -> Any:
    """:func:`rooftune.sweep.run.sweep` (its arguments and result) on this machine; with ``cluster``
    (a Ray head's ``HOST:PORT``) on every platform of the cluster's nodes, into the store they
    share (:mod:`rooftune.sweep.cluster`), each node's points stored under its own platform:
    returns a :class:`~rooftune.sweep.cluster.FleetSweep`, one
    :class:`~rooftune.sweep.run.SweepResult` per platform."""
    if cluster is None:
        return sweep_here(family, grid, **kwargs)
    return sweep_on_cluster(cluster, family, grid, **kwargs)

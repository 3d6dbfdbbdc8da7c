"""``rooftune fleet status``: the cluster's nodes and their platforms, what the shared store holds
per platform (profiled rows, sweep points), and the campaigns, sweeps and studies in flight."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rooftune.fleet.executor import Node, RayExecutor

#: A study counts as in flight while its newest trial is younger than this: a trial takes seconds
#: to minutes, so a study that stored none for this long has ended or was stopped.
STUDY_ACTIVE_S = 900.0
#: A fleet run whose driver has not reported for this long is shown stale: the driver refreshes
#: it after every unit, and a unit (a spec's passes) takes minutes at most.
RUN_STALE_S = 1800.0


@dataclass(frozen=True)
class FleetStatus:
    """What ``fleet status`` shows; ``nodes`` is empty when no cluster was named."""

    store: str
    cluster: str | None
    nodes: list[Node] = field(default_factory=list)
    #: platform id -> its CPU model, for every platform the store knows
    platforms: dict[str, str] = field(default_factory=dict)
    #: platform id -> profiled rows
    rows: dict[str, int] = field(default_factory=dict)
    #: platform id -> stored sweep points
    sweep_points: dict[str, int] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)
    studies: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"store": self.store, "cluster": self.cluster,
                "nodes": [{"id": n.id, "address": n.address, "platform_id": n.platform_id, "cpus": n.cpus}
                          for n in self.nodes],
                "platforms": [{"id": pid, "cpu_model": model, "profiled_rows": self.rows.get(pid, 0),
                               "sweep_points": self.sweep_points.get(pid, 0),
                               "nodes": sum(1 for n in self.nodes if n.platform_id == pid)}
                              for pid, model in self.platforms.items()],
                "campaigns_in_flight": self.runs, "studies_in_flight": self.studies}


def fleet_status(db: str | None = None, cluster: str | None = None, now: float | None = None) -> FleetStatus:
    """The fleet as the store (and the cluster, when named) sees it. The cluster is asked first, so
    an unreachable one is named before anything else is read."""
    from rooftune.store import Store

    nodes: list[Node] = []
    if cluster is not None:
        executor = RayExecutor(cluster)
        try:
            nodes = executor.nodes()
        finally:
            executor.close()
    now = time.time() if now is None else now
    with Store(db, create=False) as store:
        fingerprints = store.fingerprints()
        for n in nodes:  # a node that has stored nothing yet is still named with its CPU
            fingerprints.setdefault(n.platform_id, n.fingerprint)
        runs = store.fleet_runs(in_flight=True)
        for r in runs:
            r["stale"] = now - r["heartbeat_at"] > RUN_STALE_S
        return FleetStatus(store=store.display_url, cluster=cluster, nodes=nodes,
                           platforms={pid: str(fp.get("cpu_model", "")) for pid, fp in fingerprints.items()},
                           rows=store.profiled_platforms(), sweep_points=store.swept_platforms(), runs=runs,
                           studies=store.recent_studies(now - STUDY_ACTIVE_S))

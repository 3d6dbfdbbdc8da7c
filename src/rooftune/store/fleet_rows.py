"""What a fleet records in the shared store: its campaigns and studies in flight, and the studies
whose trials arrive. A part of :class:`rooftune.store.Store`."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select

from rooftune.store.schema import FleetRunRow, TrialRow
from rooftune.store.urls import redact_url


class FleetRows:
    """The fleet-run methods of :class:`rooftune.store.Store` (its transactions)."""

    def start_fleet_run(self, run_id: str, *, kind: str, name: str, cluster: str, nodes: Mapping[str, str],
                        planned: int) -> None:
        """Record a campaign or study that a fleet starts (``nodes``: node id -> platform id)."""
        now = time.time()
        with self.transaction() as s:
            s.add(FleetRunRow(id=run_id, kind=kind, name=name[:256], cluster=redact_url(cluster)[:256], started_at=now,
                              heartbeat_at=now, finished_at=None, planned=planned, done=0, nodes=dict(nodes),
                              status="running"))

    def update_fleet_run(self, run_id: str, *, done: int | None = None, nodes: Mapping[str, str] | None = None,
                         status: str | None = None) -> None:
        """Its progress (and the time of it); a ``status`` other than running also ends it."""
        with self.transaction() as s:
            row = s.get_one(FleetRunRow, run_id)
            row.heartbeat_at = time.time()
            if done is not None:
                row.done = done
            if nodes is not None:
                row.nodes = dict(nodes)
            if status is not None:
                row.status = status
                if status != "running":
                    row.finished_at = row.heartbeat_at

    def recent_studies(self, since: float) -> dict[str, dict[str, Any]]:
        """Studies with a trial stored at ``since`` or later: study key -> trials, newest trial's
        time and platform ids."""
        from sqlalchemy import func

        with self.transaction() as s:
            keys = select(TrialRow.study_key).where(TrialRow.created_at >= since).distinct()
            q = (select(TrialRow.study_key, TrialRow.platform_id, func.count(), func.max(TrialRow.created_at))
                 .where(TrialRow.study_key.in_(keys)).group_by(TrialRow.study_key, TrialRow.platform_id))
            out: dict[str, dict[str, Any]] = {}
            for key, pid, n, last in s.execute(q).all():
                entry = out.setdefault(key, {"trials": 0, "last_at": 0.0, "platforms": []})
                entry["trials"] += int(n)
                entry["last_at"] = max(entry["last_at"], float(last))
                entry["platforms"].append(pid)
            return out

    def fleet_runs(self, in_flight: bool = True) -> list[dict[str, Any]]:
        """Fleet runs, oldest first: those not finished, or all."""
        with self.transaction() as s:
            q = select(FleetRunRow).order_by(FleetRunRow.started_at)
            if in_flight:
                q = q.where(FleetRunRow.finished_at.is_(None))
            return [{c: getattr(r, c) for c in ("id", "kind", "name", "cluster", "started_at", "heartbeat_at",
                                                 "finished_at", "planned", "done", "status")} | {"nodes": dict(r.nodes)}
                    for r in s.scalars(q).all()]

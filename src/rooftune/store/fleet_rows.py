"""What a fleet records in the shared store: its campaigns and studies in flight, the studies
whose trials arrive, and the claims of a study's nodes on the configurations they are about to
run. A part of :class:`rooftune.store.Store`.

A claim is a trial row of status ``claimed`` under the study's unique (study, configuration) key:
the node whose insert lands runs the configuration, and its result replaces the claim
(``save_trial``); a node whose insert finds the key taken runs something else. The claim holds
who made it (``claim``: node, run, worker) and when, so that a claim whose node died does not hold
the configuration for ever: the same worker of the same run run again elsewhere takes its own
claims back (``release_claims``), and any claim older than ``stale_s`` may be taken over.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from sqlalchemy import delete, select, update

from rooftune.store.schema import FleetRunRow, TrialRow
from rooftune.store.urls import redact_url

#: The status of a trial row that is a node's claim on a configuration, not yet a result.
CLAIMED = "claimed"


class FleetRows:
    """The fleet-run methods of :class:`rooftune.store.Store` (its transactions)."""

    def claim_trial(self, platform: Any, *, study_key: str, config_key: str, config: Mapping[str, Any],
                    claim: Mapping[str, Any], stale_s: float) -> dict[str, Any]:
        """Claim a configuration of a study for the caller to run (see the module's doc): the row
        that holds the configuration now, ``mine`` True where that is the caller's claim (else
        ``status`` ``claimed`` for another node's claim, or its result), with its ``id``."""
        now = time.time()
        with self.transaction() as s:
            self._upsert_platform(s, platform)  # type: ignore[attr-defined]
            values = {"platform_id": platform.id, "study_key": study_key, "config_key": config_key,
                      "created_at": now, "status": CLAIMED, "config": dict(config), "result": dict(claim)}
            mine = self._insert_new(s, TrialRow, values, ["study_key", "config_key"])  # type: ignore[attr-defined]
            row = s.scalars(select(TrialRow).where(TrialRow.study_key == study_key,
                                                   TrialRow.config_key == config_key)).one()
            if not mine and row.status == CLAIMED and row.created_at < now - stale_s:
                # taken over only if no other node took it over since it was read
                took = s.execute(update(TrialRow).where(TrialRow.id == row.id, TrialRow.status == CLAIMED,
                                                        TrialRow.created_at == row.created_at)
                                 .values(created_at=now, result=dict(claim)))
                mine = took.rowcount == 1  # type: ignore[attr-defined]
                s.refresh(row)
            return {"id": row.id, "mine": mine, "status": row.status, "config": dict(row.config),
                    "result": dict(row.result), "created_at": row.created_at}

    def claims(self, study_key: str) -> list[dict[str, Any]]:
        """The claims of a study's configurations not stored yet, oldest first: ``id``,
        ``config_key``, ``claim`` (who made it), ``created_at``."""
        with self.transaction() as s:
            q = (select(TrialRow).where(TrialRow.study_key == study_key, TrialRow.status == CLAIMED)
                 .order_by(TrialRow.id))
            return [{"id": r.id, "config_key": r.config_key, "claim": dict(r.result), "created_at": r.created_at}
                    for r in s.scalars(q).all()]

    def release_claims(self, ids: list[int]) -> None:
        """Remove the claims of these ids (those that became results stay)."""
        if ids:
            with self.transaction() as s:
                s.execute(delete(TrialRow).where(TrialRow.id.in_(ids), TrialRow.status == CLAIMED))

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

    def fleet_run(self, run_id: str) -> dict[str, Any] | None:
        """One fleet run (as :meth:`fleet_runs` gives it), or None."""
        with self.transaction() as s:
            r = s.get(FleetRunRow, run_id)
            return None if r is None else {"id": r.id, "kind": r.kind, "done": r.done, "planned": r.planned,
                                           "status": r.status}

    def fleet_runs(self, in_flight: bool = True) -> list[dict[str, Any]]:
        """Fleet runs, oldest first: those not finished, or all."""
        with self.transaction() as s:
            q = select(FleetRunRow).order_by(FleetRunRow.started_at)
            if in_flight:
                q = q.where(FleetRunRow.finished_at.is_(None))
            return [{c: getattr(r, c) for c in ("id", "kind", "name", "cluster", "started_at", "heartbeat_at",
                                                 "finished_at", "planned", "done", "status")} | {"nodes": dict(r.nodes)}
                    for r in s.scalars(q).all()]

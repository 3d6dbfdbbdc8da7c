"""The points of kernel-family sweeps, one per (platform, point key). A part of
:class:`rooftune.store.Store`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select

from rooftune.platform import Platform
from rooftune.platform.gpu import GpuDevice
from rooftune.store.schema import SweepPointRow
from rooftune.store.values import finite


class SweepRows:
    """The sweep-point methods of :class:`rooftune.store.Store` (its transactions and inserts)."""

    def save_sweep_point(self, platform: Platform | GpuDevice, point: Mapping[str, Any]) -> bool:
        """Store one sweep point (its ``to_dict``) in its own transaction, so an interrupted sweep
        keeps every point it finished; a key already stored on the platform is kept as it is (one
        ``ON CONFLICT DO NOTHING`` insert: nodes of a fleet sweeping at once never both add it).
        Returns whether it was added."""
        variant = point["variant"]
        values = dict(
            platform_id=platform.id, point_key=point["key"], family=point["family"], pass_name=point["pass_"],
            precision=point["precision"], params=dict(point["params"]), status=point["status"],
            variant="|".join(str(variant[k]) for k in sorted(variant)), created_at=float(point["created_at"]),
            data=finite(dict(point)))
        with self.transaction() as s:
            self._upsert_platform(s, platform)
            return self._insert_new(s, SweepPointRow, values, ("platform_id", "point_key"))

    def sweep_points(self, platform_id: str | None = None, family: str | None = None,
                     key: str | None = None) -> list[dict[str, Any]]:
        """Stored sweep points (their ``to_dict``), oldest first, of one platform and family (and
        point key) or all."""
        with self.transaction() as s:
            q = select(SweepPointRow).order_by(SweepPointRow.id)
            if platform_id:
                q = q.where(SweepPointRow.platform_id == platform_id)
            if family:
                q = q.where(SweepPointRow.family == family)
            if key:
                q = q.where(SweepPointRow.point_key == key)
            return [dict(r.data) for r in s.scalars(q).all()]

    def swept_platforms(self) -> dict[str, int]:
        """Stored sweep points per platform id, for the platforms that have any."""
        from sqlalchemy import func

        with self.transaction() as s:
            q = select(SweepPointRow.platform_id, func.count()).group_by(SweepPointRow.platform_id)
            return {pid: int(n) for pid, n in s.execute(q).all()}

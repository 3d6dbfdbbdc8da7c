"""How values are written into the store's JSON columns, and how a profiled row's passes read."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def finite(obj: Any) -> Any:
    """NaN and infinities as null: JSON has no such numbers, and SQLite's JSON functions refuse them."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def pass_medians(row: Mapping[str, Any]) -> list[float]:
    """A profiled row's pass medians: as stored, else (a row from before passes, or an import
    without them) its one median for an ok row, none otherwise."""
    stored = row.get("pass_medians")
    if stored:
        return [float(v) for v in stored if v is not None]
    median = row.get("median_s")
    return [float(median)] if row.get("status") == "ok" and median is not None else []


def pass_canary(row: Mapping[str, Any]) -> list[float | None] | None:
    """A profiled row's probe readings, one per pass (None for a pass taken without the probe),
    or None when the row has none (stored before the probe, or imported without it)."""
    stored = row.get("pass_canary")
    medians = row.get("pass_medians") or []
    if not stored or not medians:
        return None
    readings = [float(v) if isinstance(v, (int, float)) and v > 0 else None for v in stored][: len(medians)]
    readings += [None] * (len(medians) - len(readings))
    return readings if any(v is not None for v in readings) else None

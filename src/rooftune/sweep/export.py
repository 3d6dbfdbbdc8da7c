"""A sweep's points as a table file: CSV, or Parquet where pyarrow is installed, each row with the
platform's fingerprint (its id, CPU or device model, and the whole fingerprint as JSON)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rooftune.errors import InvalidArgument
from rooftune.fileio import atomic_open, atomic_path, json_text
from rooftune.paths import output_file

FORMATS = (".csv", ".parquet")


def rows(points: Sequence[Any], fingerprints: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for p in points:
        fp = fingerprints.get(p.platform_id, {})
        out.append({**p.flat(), "platform_model": fp.get("cpu_model") or fp.get("name", ""),
                    "platform_fingerprint": json_text(fp, notes=False, sort_keys=True)})
    return out


def export(points: Sequence[Any], fingerprints: dict[str, dict[str, Any]], path: str | Path) -> Path:
    """Write ``points`` (SweepPoints) to ``path`` (.csv, or .parquet with pyarrow installed)."""
    target = output_file(path, "--export", FORMATS)
    table = rows(points, fingerprints)
    columns: list[str] = []
    for r in table:
        columns.extend(k for k in r if k not in columns)
    if target.suffix == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise InvalidArgument("--export", str(path), "Parquet needs pyarrow (pip install pyarrow); "
                                  "allowed without it: a .csv file") from None
        with atomic_path(target) as tmp:
            pq.write_table(pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in table]), str(tmp))
        return target
    with atomic_open(target, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(table)
    return target

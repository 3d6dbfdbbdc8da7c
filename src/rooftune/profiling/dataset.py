"""Profiled data as files: `rooftune data export FILE.csv|FILE.parquet` and `rooftune data import
FILE`. Every row carries its platform's id and full fingerprint, so data profiled on one machine
can train a model used on another. An import checks every row first and stores all or nothing."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rooftune.errors import InvalidArgument
from rooftune.primitives.spec import ConvSpec

COLUMNS = ("platform_id", "platform", "spec_key", "spec", "primitive", "threads", "status", "median_s", "iqr_s",
           "repetitions", "reason", "warnings", "sources", "created_at")
#: Written by this version, optional on import (files exported before campaigns had passes, or the
#: machine-speed probe, lack them).
OPTIONAL_COLUMNS = ("pass_medians", "pass_canary", "fastest_s")
JSON_COLUMNS = ("platform", "spec", "warnings", "sources", "pass_medians", "pass_canary")
STATUSES = ("ok", "unsupported", "failed")
FORMATS = (".csv", ".parquet")


def _format(path: str | Path) -> str:
    if not str(path).strip():
        raise InvalidArgument("dataset file", str(path), f"give a file name ending in {' or '.join(FORMATS)}")
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise InvalidArgument("dataset file", str(path), f"allowed a name ending in {' or '.join(FORMATS)}")
    return suffix


def check_export_path(path: str | Path) -> str:
    """Refuses a dataset file name rooftune cannot write (its format from the ending)."""
    from rooftune.paths import output_file

    fmt = _format(path)
    output_file(Path(path), "dataset file")
    return fmt


def export_profiles(store: Any, path: str | Path, platform_id: str | None = None) -> int:
    """Write the store's profiled rows (of one platform, or all) to ``path``; returns the count.
    Written to a temporary name and renamed, so a failed export leaves no partial file."""
    fmt = check_export_path(path)
    p = Path(path)
    if platform_id is not None and platform_id not in (profiled := store.profiled_platforms()):
        raise InvalidArgument("--platform", platform_id, "has no profiled rows in this store"
                              + (f" (platforms with rows: {', '.join(sorted(profiled))})" if profiled else ""))
    fps = store.fingerprints()
    rows = store.profiles(platform_id)
    if not rows:
        raise InvalidArgument("store", store.display_url, "has no profiled rows; nothing written (run rooftune profile first)")
    records = [{**r, "platform": fps.get(r["platform_id"], {"id": r["platform_id"]})} for r in rows]
    from rooftune.fileio import atomic_path

    with atomic_path(p) as tmp:
        if fmt == ".csv":
            with tmp.open("w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=COLUMNS + OPTIONAL_COLUMNS)
                w.writeheader()
                for r in records:
                    w.writerow({k: json.dumps(r[k], sort_keys=True) if k in JSON_COLUMNS else
                                ("" if r[k] is None else r[k]) for k in COLUMNS + OPTIONAL_COLUMNS})
        else:
            pa, pq = _arrow()
            table = pa.table({k: [json.dumps(r[k], sort_keys=True) if k in JSON_COLUMNS else r[k] for r in records]
                              for k in COLUMNS + OPTIONAL_COLUMNS})
            pq.write_table(table, tmp)
    return len(records)


def _arrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise InvalidArgument("dataset file", "*.parquet", "parquet needs pyarrow (pip install pyarrow); or use .csv") from None
    return pa, pq


def read_profiles(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a dataset file, checked: the columns, every row's platform, spec (its key must match
    its fields), status and figures. The first problem is a one-line error naming the row."""
    fmt = _format(path)
    p = Path(path)
    if p.is_dir():
        raise InvalidArgument("dataset file", str(p), "a directory, not a file")
    if not p.is_file():
        raise InvalidArgument("dataset file", str(p), "no such file")
    try:
        if fmt == ".csv":
            with p.open(newline="") as f:
                reader = csv.DictReader(f)
                header = tuple(reader.fieldnames or ())
                raw = list(reader)
        else:
            _, pq = _arrow()
            table = pq.read_table(p)
            header = tuple(table.column_names)
            raw = table.to_pylist()
    except InvalidArgument:
        raise
    except Exception as exc:
        raise InvalidArgument("dataset file", str(p), f"cannot be read as {fmt[1:]} ({type(exc).__name__})") from None
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise InvalidArgument("dataset file", str(p), f"not a rooftune dataset: missing column(s) {', '.join(missing)}")
    if fmt == ".csv":
        for i, r in enumerate(raw):
            # csv.DictReader gives a short row None for its missing fields, a long one a None key
            fields = len(header) - sum(v is None for k, v in r.items() if k is not None) + len(r.get(None) or ())
            if fields != len(header):
                raise InvalidArgument("dataset file", str(p), f"row {i + 2}: {fields} fields where the header has "
                                      f"{len(header)}; nothing imported")
    return [_check_row(i + 2 if fmt == ".csv" else i + 1, r, p) for i, r in enumerate(raw)]


#: What a fingerprint must say for its rows to be learned from (the perf model reads the caches).
FINGERPRINT_FIELDS = ("cpu_model", "usable_cores", "caches")
#: More threads than any CPU socket has: a typo or a foreign file.
MAX_THREADS = 4096


def _check_row(line: int, r: dict[str, Any], p: Path) -> dict[str, Any]:
    def bad(why: str) -> InvalidArgument:
        return InvalidArgument("dataset file", str(p), f"row {line}: {why}; nothing imported")

    out: dict[str, Any] = {}
    for k in JSON_COLUMNS:
        value = r.get(k)
        try:
            out[k] = json.loads(value) if isinstance(value, str) and value else value
        except (json.JSONDecodeError, TypeError):
            raise bad(f"{k} is not JSON") from None
    passes = out["pass_medians"] or []
    if not isinstance(passes, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                               and math.isfinite(v) and v > 0 for v in passes):
        raise bad("pass_medians is not a list of positive finite seconds")
    readings = out["pass_canary"]
    if readings is not None and not (isinstance(readings, list) and len(readings) == len(passes) and all(
            v is None or isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
            for v in readings)):
        raise bad("pass_canary is not one probe reading (positive finite seconds or null) per pass")
    platform = out["platform"]
    if not isinstance(platform, dict) or platform.get("id") != r["platform_id"] or not r["platform_id"]:
        raise bad("the platform fingerprint does not match platform_id")
    missing = [k for k in FINGERPRINT_FIELDS if k not in platform]
    if missing or not isinstance(platform.get("caches"), list):
        raise bad(f"the platform fingerprint lacks {', '.join(missing) or 'a list of caches'} "
                  "(it needs cpu_model, usable_cores and a list of caches)")
    for k in ("warnings", "sources"):
        if out[k] is not None and not (isinstance(out[k], list) and all(isinstance(v, str) for v in out[k])):
            raise bad(f"{k} is not a list of strings")
    try:
        spec = ConvSpec.from_dict(out["spec"])
    except (InvalidArgument, TypeError) as exc:
        raise bad(f"bad spec ({exc})") from None
    if spec.key() != r["spec_key"]:
        raise bad("spec_key does not match the spec")
    if r["status"] not in STATUSES:
        raise bad(f"status {r['status']!r} not one of {', '.join(STATUSES)}")
    def number(key: str, default: float) -> float:
        v = r.get(key)
        if v in ("", None):
            return default
        try:
            if isinstance(v, bool):
                raise TypeError
            return float(v)
        except (TypeError, ValueError, OverflowError):
            raise bad(f"{key} {v!r} is not a number") from None

    threads_f = number("threads", math.nan)
    median = None if r["median_s"] in ("", None) else number("median_s", math.nan)
    iqr = None if r["iqr_s"] in ("", None) else number("iqr_s", math.nan)
    reps_f = number("repetitions", 0.0)
    created = number("created_at", 0.0)
    if not (threads_f.is_integer() and 1 <= threads_f <= MAX_THREADS):
        raise bad(f"threads {r['threads']!r} is not a whole number in 1..{MAX_THREADS}")
    threads = int(threads_f)
    if not (reps_f.is_integer() and 0 <= reps_f < 2**62):
        raise bad(f"repetitions {r['repetitions']!r} is not a whole number >= 0")
    reps = int(reps_f)
    if iqr is not None and not (math.isfinite(iqr) and iqr >= 0):
        raise bad(f"iqr_s {iqr!r} is not a finite number >= 0")
    if not (math.isfinite(created) and created >= 0):
        raise bad(f"created_at {created!r} is not a finite time >= 0")
    if r["status"] == "ok" and (median is None or not math.isfinite(median) or median <= 0):
        raise bad("an ok row needs a positive finite median_s")
    # (median is never None here: an ok row without one was refused just above)
    if passes and (r["status"] != "ok" or median is None or abs(min(passes) - median) > 1e-12 * median):
        raise bad("median_s is not the fastest of pass_medians")
    fastest = None if r.get("fastest_s") in ("", None) else number("fastest_s", math.nan)
    if fastest is not None and not (r["status"] == "ok" and median is not None and math.isfinite(fastest)
                                    and 0 < fastest <= median * (1 + 1e-9)):
        raise bad(f"fastest_s {r.get('fastest_s')!r} is not a positive time no slower than median_s of an ok row")
    if not isinstance(r["primitive"], str) or not r["primitive"].strip():
        raise bad("primitive is not a name")
    if r["primitive"] not in known_names():
        raise bad(f"primitive {r['primitive']!r} is not one rooftune knows (allowed {', '.join(known_names())})")
    return {"platform_id": r["platform_id"], "platform": platform, "spec_key": r["spec_key"], "spec": spec.to_dict(),
            "primitive": r["primitive"], "threads": threads, "status": r["status"], "median_s": median,
            "iqr_s": iqr, "repetitions": reps, "reason": r["reason"] or "", "warnings": out["warnings"] or [],
            "sources": out["sources"] or [], "created_at": created, "pass_medians": [float(v) for v in passes],
            "pass_canary": readings, "fastest_s": fastest}


def known_names() -> list[str]:
    """The names a stored row's primitive may have: the primitives and the layout transforms."""
    from rooftune.primitives import PRIMITIVES, TRANSFORMS

    return [*PRIMITIVES, *(f"transform:{t}" for t in TRANSFORMS)]


def import_profiles(store: Any, path: str | Path, rows: list[dict[str, Any]] | None = None) -> dict[str, int]:
    """Check every row of ``path`` (``rows``: what :func:`read_profiles` read from it already), then
    store them all in one transaction (rows already stored are kept as they are). Returns rows
    read, added, and platforms."""
    from rooftune.platform.fingerprint import identity

    rows = read_profiles(path) if rows is None else rows
    groups: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for r in rows:
        groups.setdefault(r["platform_id"], (r["platform"], []))[1].append(r)
    # A platform id stands for the fields hashed into it: rows that claim a stored platform's id
    # with other values of those fields describe another machine under a borrowed name.
    known = store.fingerprints()
    for pid, (fp, _) in groups.items():
        mine, theirs = identity(known.get(pid, {})), identity(fp)
        differ = [k for k in mine if k in theirs and mine[k] != theirs[k]]
        if differ:
            raise InvalidArgument("dataset file", str(path), f"platform {pid} is stored with another "
                                  f"{', '.join(differ)}; nothing imported")
    added = store.save_profile_groups(list(groups.values()))
    return {"rows": len(rows), "added": added, "platforms": len(groups)}


def summarize(rows: Sequence[dict[str, Any]], layers: dict[str, list[ConvSpec]], threads: int | None = None,
              baseline: str = "pytorch-default") -> list[dict[str, Any]]:
    """Per model: which primitive wins how many layers, and the speedup of the per-layer fastest
    primitive over ``baseline`` (sum of layer times), from profiled rows."""
    best: dict[tuple[str, int], tuple[str, float]] = {}
    base: dict[tuple[str, int], float] = {}
    for r in rows:
        if r["status"] != "ok" or r["primitive"].startswith("transform:"):
            continue
        k = (r["spec_key"], int(r["threads"]))
        if r["primitive"] == baseline:
            base[k] = r["median_s"]
        if k not in best or r["median_s"] < best[k][1]:
            best[k] = (r["primitive"], r["median_s"])
    out = []
    for model, specs in layers.items():
        thread_counts = sorted({t for (_, t) in best}) if threads is None else [threads]
        for t in thread_counts:
            wins: dict[str, int] = {}
            t_best = t_base = 0.0
            covered = 0
            for s in specs:
                k = (s.key(), t)
                if k not in best or k not in base:
                    continue
                covered += 1
                name, tb = best[k]
                wins[name] = wins.get(name, 0) + 1
                t_best += tb
                t_base += base[k]
            if covered:
                out.append({"model": model, "threads": t, "layers": len(specs), "profiled": covered,
                            "wins": dict(sorted(wins.items(), key=lambda kv: -kv[1])),
                            "baseline_s": t_base, "best_s": t_best, "speedup": t_base / t_best if t_best else math.nan})
    return out

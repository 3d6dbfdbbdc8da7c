"""Profiled data as files: `rooftune data export FILE.csv|FILE.parquet` and `rooftune data import
FILE`. Every row carries its platform's id and full fingerprint, so data profiled on one machine
can train a model used on another. An import checks every row first and stores all or nothing."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rooftune.errors import InvalidArgument
from rooftune.fileio import json_text, parse_json, read_input
from rooftune.platform.fingerprint import identity
from rooftune.platform.fingerprint_check import fingerprint_problem, shown
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
                    w.writerow({k: json_text(r[k], notes=False, sort_keys=True) if k in JSON_COLUMNS else
                                ("" if r[k] is None else r[k]) for k in COLUMNS + OPTIONAL_COLUMNS})
        else:
            pa, pq = _arrow()
            table = pa.table({k: [json_text(r[k], notes=False, sort_keys=True) if k in JSON_COLUMNS else r[k] for r in records]
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
    data = read_input(p, "dataset file", "allowed a file written by rooftune data export", MAX_DATASET_BYTES)
    try:
        if fmt == ".csv":
            reader = csv.DictReader(io.StringIO(data.decode("utf-8-sig"), newline=""))
            header = tuple(reader.fieldnames or ())
            raw = list(reader)
        else:
            pa, pq = _arrow()
            table = pq.read_table(pa.BufferReader(data))
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
    return check_rows(raw, p, first=2 if fmt == ".csv" else 1)  # the line or row number a reader sees


def check_rows(raw: Sequence[dict[str, Any]], path: str | Path, first: int = 2) -> list[dict[str, Any]]:
    """Rows as a dataset file holds them (CSV's text, or parquet's values), checked and
    converted to what the store keeps; the first problem is a one-line error naming ``path``, the
    row (numbered from ``first``), the field, its value and what is allowed."""
    rows = [_check_row(first + i, r, Path(path)) for i, r in enumerate(raw)]
    # An import stores one fingerprint per platform: rows of one id that say different things
    # about the machine describe two machines under one name.
    seen: dict[str, tuple[int, dict[str, Any]]] = {}
    for i, r in enumerate(rows):
        line, ident = seen.setdefault(r["platform_id"], (first + i, identity(r["platform"])))
        other = identity(r["platform"])
        differ = sorted(k for k in ident.keys() | other.keys() if ident.get(k) != other.get(k))
        if differ:
            raise InvalidArgument("dataset file", str(path), f"row {first + i}: platform {r['platform_id']} has "
                                  f"another {', '.join(differ)} than in row {line}; nothing imported")
    return rows


#: The largest dataset file read (whole, then row by row): a campaign's rows take a few hundred
#: bytes each, so this is millions of rows; a larger file is not one rooftune wrote.
MAX_DATASET_BYTES = 1 << 30
#: What a fingerprint must say for its rows to be learned from (the perf model reads the caches).
FINGERPRINT_FIELDS = ("cpu_model", "usable_cores", "caches")
#: More threads than any CPU socket has: a typo or a foreign file.
MAX_THREADS = 4096
#: Longest time a row may hold (a median, a pass, a probe reading, seconds per call): an hour for
#: one call of one layer is past any campaign, whose measurement is given up a minute after its
#: budget (rooftune.profiling.isolated.MEASURE_SLACK_S).
MAX_SECONDS = 3600.0
#: Most passes of a row: a campaign runs at most MAX_PASSES (10) and a later one adds to them; a
#: hundred times that is a foreign file.
MAX_PASS_COUNT = 1000
#: The repetitions column is a 32-bit INTEGER on PostgreSQL.
MAX_REPETITIONS = 2**31 - 1
#: The latest creation time believed (2100-01-01 UTC): a later one is a wrong clock or column.
MAX_CREATED_AT = 4_102_444_800.0
#: Most warnings or sources of a row, and the longest of each (and of a row's reason): a row names
#: the few networks it was profiled for and the few things its passes saw.
MAX_NOTES = 1000
MAX_NOTE_CHARS = 4096
#: Largest value of any spec field, and most elements of a spec's input, weight or output tensor
#: (2**38 fp32 elements: 1 TiB): a layer was timed with its tensors in memory.
MAX_SPEC_VALUE = 2**31 - 1
MAX_SPEC_ELEMENTS = 2**38


def seconds(v: object) -> bool:
    """Whether ``v`` is a time a row may hold: a positive finite number of at most MAX_SECONDS."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 < v <= MAX_SECONDS


def spec_too_large(spec: ConvSpec) -> str | None:
    """Why a spec read from a file is larger than any layer timed, or None."""
    for name, v in spec.to_dict().items():
        for x in v if isinstance(v, list) else [v]:
            if isinstance(x, int) and x > MAX_SPEC_VALUE:
                return f"{name} {x}: allowed at most {MAX_SPEC_VALUE}"
    for name, shape in (("input", spec.input_shape), ("weight", spec.weight_shape), ("output", spec.output_shape)):
        if math.prod(shape) > MAX_SPEC_ELEMENTS:
            return f"its {name} of {'x'.join(map(str, shape))} elements: allowed at most {MAX_SPEC_ELEMENTS}"
    return None


def _check_row(line: int, r: dict[str, Any], p: Path) -> dict[str, Any]:
    def bad(why: str) -> InvalidArgument:
        return InvalidArgument("dataset file", str(p), f"row {line}: {why}; nothing imported")

    out: dict[str, Any] = {}
    for k in JSON_COLUMNS:
        value = r.get(k)
        try:
            out[k] = parse_json(value) if isinstance(value, (str, bytes)) and value else value
        except ValueError as exc:
            raise bad(f"{k} is {exc}") from None
    passes = out["pass_medians"] or []
    if not isinstance(passes, list) or len(passes) > MAX_PASS_COUNT or not all(seconds(v) for v in passes):
        raise bad(f"pass_medians is not a list of at most {MAX_PASS_COUNT} times in seconds, each positive, "
                  f"finite and at most {MAX_SECONDS:g} (it is {shown(passes)})")
    readings = out["pass_canary"]
    if readings is not None and not (isinstance(readings, list) and len(readings) == len(passes) and all(
            v is None or seconds(v) for v in readings)):
        raise bad(f"pass_canary is not one probe reading (positive finite seconds, at most {MAX_SECONDS:g}, "
                  f"or null) per pass (it is {shown(readings)})")
    platform = out["platform"]
    problem = fingerprint_problem(platform, needs=FINGERPRINT_FIELDS)
    if problem:
        raise bad(f"the platform fingerprint {problem}")
    if platform.get("id") != r["platform_id"]:
        raise bad(f"the platform fingerprint's id {shown(platform.get('id'))} does not match platform_id "
                  f"{shown(r['platform_id'])}")
    for k in ("warnings", "sources"):
        if out[k] is not None and not (isinstance(out[k], list) and len(out[k]) <= MAX_NOTES and all(
                isinstance(v, str) and len(v) <= MAX_NOTE_CHARS for v in out[k])):
            raise bad(f"{k} is not a list of strings (at most {MAX_NOTES}, each at most {MAX_NOTE_CHARS} "
                      f"characters; it is {shown(out[k])})")
    if r["reason"] is not None and not (isinstance(r["reason"], str) and len(r["reason"]) <= MAX_NOTE_CHARS):
        raise bad(f"reason is not a text of at most {MAX_NOTE_CHARS} characters (it is {shown(r['reason'])})")
    if not isinstance(out["spec"], dict):
        raise bad(f"bad spec ({shown(out['spec'])}: allowed an object of ConvSpec's fields)")
    try:
        spec = ConvSpec.from_dict(out["spec"])
    except (InvalidArgument, TypeError) as exc:
        raise bad(f"bad spec ({exc})") from None
    too_large = spec_too_large(spec)
    if too_large:
        raise bad(f"bad spec ({too_large})")
    if spec.key() != r["spec_key"]:
        raise bad("spec_key does not match the spec")
    if r["status"] not in STATUSES:
        raise bad(f"status {shown(r['status'])} not one of {', '.join(STATUSES)}")
    def number(key: str, default: float) -> float:
        v = r.get(key)
        if v in ("", None):
            return default
        try:
            if isinstance(v, bool):
                raise TypeError
            return float(v)
        except (TypeError, ValueError, OverflowError):
            raise bad(f"{key} {shown(v)} is not a number") from None

    threads_f = number("threads", math.nan)
    median = None if r["median_s"] in ("", None) else number("median_s", math.nan)
    iqr = None if r["iqr_s"] in ("", None) else number("iqr_s", math.nan)
    reps_f = number("repetitions", 0.0)
    created = number("created_at", 0.0)
    if not (threads_f.is_integer() and 1 <= threads_f <= MAX_THREADS):
        raise bad(f"threads {shown(r['threads'])} is not a whole number in 1..{MAX_THREADS}")
    threads = int(threads_f)
    if not (reps_f.is_integer() and 0 <= reps_f <= MAX_REPETITIONS):
        raise bad(f"repetitions {shown(r['repetitions'])} is not a whole number >= 0 (at most {MAX_REPETITIONS})")
    reps = int(reps_f)
    if iqr is not None and not (math.isfinite(iqr) and 0 <= iqr <= MAX_SECONDS):
        raise bad(f"iqr_s {iqr!r} is not a finite number >= 0 (at most {MAX_SECONDS:g})")
    if not (math.isfinite(created) and 0 <= created <= MAX_CREATED_AT):
        raise bad(f"created_at {created!r} is not a finite time in 0..{MAX_CREATED_AT:.0f} (seconds since 1970)")
    if r["status"] == "ok" and median is None:
        raise bad("an ok row needs a positive finite median_s")
    if median is not None and not seconds(median):
        raise bad(f"median_s {median!r}: a row's median is a positive finite median_s of at most {MAX_SECONDS:g} s, "
                  "or none where it was not timed")
    # (median is never None here: an ok row without one was refused just above)
    if passes and (r["status"] != "ok" or median is None or abs(min(passes) - median) > 1e-12 * median):
        raise bad("median_s is not the fastest of pass_medians")
    fastest = None if r.get("fastest_s") in ("", None) else number("fastest_s", math.nan)
    if fastest is not None and not (r["status"] == "ok" and median is not None and seconds(fastest)
                                    and fastest <= median * (1 + 1e-9)):
        raise bad(f"fastest_s {shown(r.get('fastest_s'))} is not a positive time no slower than median_s of an ok row")
    if not isinstance(r["primitive"], str) or not r["primitive"].strip():
        raise bad("primitive is not a name")
    if r["primitive"] not in known_names():
        raise bad(f"primitive {shown(r['primitive'])} is not one rooftune knows (allowed {', '.join(known_names())})")
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

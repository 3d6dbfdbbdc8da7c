"""How times, rates and sizes are written for people: the one set of formatters for the
command line, the figures and the report."""

from __future__ import annotations

import math
from typing import Any, TypeGuard


def fmt_time(t: float) -> str:
    """Seconds with 3 significant digits in s, ms, us or ns."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(t) >= scale:
            return f"{t / scale:.3g} {unit}"
    return f"{t / 1e-9:.3g} ns"


def fmt_rate(v: float, unit: str, decimals: int | None = None) -> str:
    """A rate or count with a P, T, G, M or k prefix: 3 significant digits, or ``decimals``
    places after the point (the command line's tables: 229.4 GFLOP/s)."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.{decimals}f} {prefix}{unit}" if decimals is not None else f"{v / scale:.3g} {prefix}{unit}"
    return f"{v:.3g} {unit}"


def fmt_size(b: float) -> str:
    """Bytes in binary units (KiB, MiB, GiB)."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if b >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.0f} B"


def finite(v: float | None) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and math.isfinite(v)


def threads_of(n: object) -> str:
    """"1 thread", "2 threads"."""
    return f"{n} thread" if n == 1 else f"{n} threads"


def ci_text(lo: float, hi: float, digits: int = 2, label: str = "") -> str:
    """An interval as '1.20-1.26' (after ``label``, e.g. '95 % CI '); where too few pairs were
    timed to bound it (an infinite or missing end), it says so instead."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "too few pairs for a CI"
    return f"{label}{lo:.{digits}f}-{hi:.{digits}f}"


def speedup_text(sp: dict[str, Any] | None) -> str:
    """A tuning speedup as '1.23x (1.20-1.26)'; '-' where none was measured; 'the best itself'
    for a baseline that is the best (nothing compared: no pairs)."""
    if not sp or not math.isfinite(sp.get("ratio", math.nan)):
        return "-"
    if sp.get("pairs") == 0:
        return "the best itself"
    return f"{sp['ratio']:.2f}x ({ci_text(sp.get('ci_low', math.nan), sp.get('ci_high', math.nan))})"


def interleaved_text(pair: tuple[float, float] | None, objective: str = "latency") -> str:
    """A configuration's and the best's medians in their interleaved comparison, as '61.3 ms /
    56.0 ms' (seconds per call) or, for throughput (seconds per item), '15.2 / 17.8 samples/s';
    '-' where there was none."""
    if not pair:
        return "-"
    it, best = pair
    if objective == "throughput":
        return f"{1 / it:.3g} / {1 / best:.3g} samples/s"
    return f"{fmt_time(it)} / {fmt_time(best)}"

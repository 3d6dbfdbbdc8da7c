"""A serving phase's result as the terminal and the report show it: one row per setup served
(its figure with its interval, the latency percentiles at it with theirs), the headline against
the best peer, and what the load generator cost; and a single-stream study's percentiles."""

from __future__ import annotations

from typing import Any

SERVING_COLUMNS = ("setup", "configuration", "precision", "req/s", "95% CI", "p50 ms", "p90 ms", "p99 ms", "vs best")


def _interval(lo: float | None, hi: float | None, digits: int = 1) -> str:
    return f"[{'?' if lo is None else f'{lo:.{digits}f}'}, {'?' if hi is None else f'{hi:.{digits}f}'}]"


def _percentile(p: dict[str, Any] | None, name: str) -> str:
    if not p or name not in p:
        return ""
    v = p[name]
    return f"{v['ms']:.2f} {_interval(v['lo'], v['hi'], 2)}"


def serving_rows(serving: dict[str, Any]) -> list[list[str]]:
    """The best first, then the peers, then the other setups tried; a failed one with its error."""
    order = sorted(serving["setups"], key=lambda s: (s["name"] != serving.get("best"), not s["peer"]))
    rows = []
    for s in order:
        name = s["name"] + (" (best)" if s["name"] == serving.get("best") else " (peer)" if s["peer"] else "")
        if s.get("error"):
            rows.append([name, s.get("describe", ""), "", "failed", "", "", "", "", s["error"][:60]])
            continue
        pct = (s.get("at_rate") or {}).get("percentiles")
        vs = serving.get("speedup", {}).get(s["name"])
        rows.append([name, s.get("describe", ""), s.get("precision", ""), f"{s['rate']:.1f}",
                     _interval(s.get("lo"), s.get("hi")) if "lo" in s else "",
                     _percentile(pct, "p50"), _percentile(pct, "p90"), _percentile(pct, "p99"),
                     _ratio_text(vs, inverse=True) if vs else ""])
    return rows


def _ratio_text(c: dict[str, Any], inverse: bool = False) -> str:
    """The best over a setup, its interval; ``inverse``: as the setup's share of the best."""
    if c.get("ratio") is None:
        return c.get("why", "")
    r, lo, hi = c["ratio"], c.get("ci_low"), c.get("ci_high")
    if inverse:
        r, lo, hi = 1 / r, (1 / hi if hi else None), (1 / lo if lo else None)
    return f"{r:.2f}x {_interval(lo, hi, 2)}"


def serving_lines(serving: dict[str, Any]) -> list[str]:
    """The headline (the best against the best peer, interleaved), what the figures mean and what
    the generator cost, then the phase's notes; a single-stream study's percentiles."""
    if serving["scenario"] == "single-stream":
        return [serving["line"]] if serving.get("line") else []
    out = []
    what = ("requests/s with every request queued at once" if serving["scenario"] == "offline" else
            f"the largest Poisson arrival rate whose {serving['quantile']} latency, queueing included, stayed within "
            f"{serving['slo_ms']:g} ms (each probe at least {serving['samples_for_quantile']} x 2 requests: "
            f"{serving['samples_for_quantile']} bound a {serving['quantile']} at 95 %)")
    out.append(f"serving ({serving['scenario']}): {what}")
    best, peer = serving.get("best"), serving.get("best_peer")
    if best and any(s["name"] == best and s["peer"] for s in serving["setups"]):
        out.append(f"best: the peer {best} as shipped (no setup tried served more): 1.00x the best peer")
    elif best and peer:
        c = serving["speedup"].get(peer, {})
        if c.get("ratio") is not None:
            how = ("interleaved offline rounds" if serving["scenario"] == "offline"
                   else "the extremes of the two rate searches' intervals")
            out.append(f"best: {best} serves {_ratio_text(c)} the requests/s of the best peer as shipped, {peer} "
                       f"(95% CI: {how})")
    elif best:
        out.append(f"best: {best}")
    out.append(f"load generator: {serving['generator_cpu_us_per_request']:.0f} us of CPU per request (its own threads)")
    slow = [s for s in serving["setups"] if s.get("call_ms_at_lowest_rate", 0) > 1.3 * s.get("call_ms_back_to_back", 1e9)]
    if slow:
        out.append("a call after idle time is slower than back to back (its threads asleep, its caches cold): "
                   + "; ".join(f"{s['name']} {s['call_ms_at_lowest_rate']:.2f} ms at its lowest rate against "
                               f"{s['call_ms_back_to_back']:.2f} ms" for s in slow[:4]))
    if serving.get("exec"):
        out.append(f"start it: {serving['exec']}")
    out.extend(f"note: {n}" for n in serving.get("notes", ()))
    return out


def single_stream(trial: Any) -> dict[str, Any]:
    """A single-stream study's serving record: the best's percentiles and their line."""
    return {"scenario": "single-stream", "line": single_stream_line(trial), "percentiles": _percentiles(trial)}


def _percentiles(trial: Any) -> dict[str, dict[str, float | None]]:
    from rooftune.bench.serving import QUANTILES, quantile_interval

    xs = list((trial.measurement or {}).get("samples") or ())
    out: dict[str, dict[str, float | None]] = {}
    for name, q in QUANTILES.items():
        if xs:
            v, lo, hi = quantile_interval(xs, q)
            out[name] = {"ms": 1e3 * v, "lo": None if lo is None else 1e3 * lo, "hi": None if hi is None else 1e3 * hi}
    return out


def single_stream_line(trial: Any) -> str:
    """A single-stream study's answer as MLPerf reports it: p90 per request, beside p50 and p99,
    each with its interval from the best's trial samples."""
    pct = _percentiles(trial)
    if not pct:
        return ""
    parts = [f"{name} {v['ms']:.2f} ms {_interval(v['lo'], v['hi'], 2)}" for name, v in pct.items()]
    from rooftune.bench.serving import samples_for_quantile

    n, need = len((trial.measurement or {}).get("samples") or ()), samples_for_quantile(0.99)
    short = "" if n >= need else f" ({n} samples: p99 needs {need} for an upper bound)"
    return f"single-stream: {', '.join(parts)} (MLPerf's figure is the p90){short}"

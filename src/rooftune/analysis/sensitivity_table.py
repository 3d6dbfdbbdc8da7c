"""A sensitivity pass (:meth:`rooftune.analysis.sensitivity.Sensitivity.to_dict`) as the rows a
reader sees: one table for ``rooftune analyze --data``, ``rooftune tune`` and ``optimize``'s
terminal output and report, so that all of them give each layer the same verdict in the same
words. It reads the dictionary (a study's result keeps that form), and imports no torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rooftune.units import fmt_time

SENSITIVITY_COLUMNS = ("layer", "kind", "drop (95% CI)", "time", "bound", "int8 gain", "plan")
#: The columns holding figures (right-aligned).
NUMERIC_COLUMNS = frozenset({"drop (95% CI)", "time", "int8 gain"})


def sensitivity_title(s: Mapping[str, Any]) -> str:
    return (f"int8 sensitivity per layer ({s['metric']} drop with the layer alone in int8, simulated; "
            "expected int8 gain from its roofline position)")


def layer_plan(s: Mapping[str, Any], layer: Mapping[str, Any]) -> str:
    """``int8``, or why the mixed set keeps the layer at higher precision: its roofline position
    (the pass's own verdict), or the budget (a layer in ``kept``: with it in int8 the mixed set's
    simulated drop exceeds the budget)."""
    if layer["name"] in s.get("kept", ()):
        return f"kept for the budget of {s['max_drop']:g}"
    return str(layer["keep"])


def _row(s: Mapping[str, Any], r: Mapping[str, Any]) -> list[str]:
    lo, hi = r["drop_interval"]
    return [r["name"], r["kind"], f"{r['drop']:+.2f} [{lo:+.2f}, {hi:+.2f}]",
            fmt_time(r["time_s"]) if r.get("time_s") is not None else "-", r.get("bound") or "-",
            f"{r['int8_gain']:.2f}x" if r.get("int8_gain") is not None else "-", layer_plan(s, r)]


def sensitivity_rows(s: Mapping[str, Any], top: int | None = None) -> tuple[list[list[str]], int]:
    """The ranking's rows (most sensitive first, :data:`SENSITIVITY_COLUMNS`) and how many layers
    were left out: with ``top``, the ``top`` most sensitive layers and every layer kept at higher
    precision wherever it ranks, so that a short table still names each layer the mixed set keeps."""
    layers = list(s["layers"])
    if top is not None:
        shown = [r for i, r in enumerate(layers) if i < top or layer_plan(s, r) != "int8"]
    else:
        shown = layers
    return [_row(s, r) for r in shown], len(layers) - len(shown)


def sensitivity_summary(s: Mapping[str, Any]) -> str:
    """The simulated drops of uniform int8 and of the mixed set, and how the pass was measured."""
    kept = len(s.get("kept", ()))
    keep = len(s.get("keep", ()))
    return (f"uniform int8 (simulated): drop {s['uniform_drop']:+.2f}; the mixed set ({keep} of {len(s['layers'])} "
            f"layer(s) at higher precision, {kept} of them for the budget of {s['max_drop']:g}): drop "
            f"{s['mixed_drop']:+.2f}; {s['samples']} samples, {s['seconds']:.1f} s")


def left_out_line(left_out: int, where: str) -> str:
    """What a short table leaves out, and ``where`` the whole ranking is ('' where nothing is left out)."""
    if not left_out:
        return ""
    return f"and {left_out} less sensitive layer{'s' if left_out != 1 else ''}, in int8 (the whole ranking: {where})"

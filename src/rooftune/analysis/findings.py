"""One-line reasons for the top opportunities: what the op is, where it sits, what to try."""

from __future__ import annotations

import numbers
import re
from typing import Any

from rooftune.errors import InvalidArgument, is_int
from rooftune.fileio import json_text
from rooftune.workload.graph import OpNode

#: A GEMM whose rows (batch x tokens) are at most this is a matrix-vector product: it streams its
#: weights once per call and cannot reach the compute roof.
GEMV_ROWS = 8
#: Below this share of the compute roof a compute-bound kernel is worth replacing.
LOW_COMPUTE_EFFICIENCY = 0.5
#: A lower precision is suggested for compute-bound ops where its measured GEMM roof is at least
#: this many times fp32's.
FASTER_PRECISION = 1.2


def lower_precisions(peak: dict[str, float]) -> dict[str, float]:
    """bf16 and int8 where this machine's GEMM roofs (``gemm_*`` of the ceilings) ran them at
    least :data:`FASTER_PRECISION` times as fast as fp32: precision -> that ratio. Empty where they
    did not, or where they were not measured."""
    base = peak.get("gemm_fp32") or 0.0
    if base <= 0:
        return {}
    ratios = {p: peak.get(f"gemm_{p}", 0.0) / base for p in ("bf16", "int8")}
    return {p: r for p, r in ratios.items() if r >= FASTER_PRECISION}


def _lower(faster: dict[str, float] | None, only: tuple[str, ...] = ("bf16", "int8")) -> str:
    """"bf16 (its GEMM 2.2x fp32's here: tune --bf16)", or the general rule where the machine's
    roofs are not known."""
    if faster is None:
        return "/".join(only) + " where native"
    named = [f"{p} (its GEMM {faster[p]:.1f}x fp32's here: tune --{p})" for p in only if p in faster]
    return " or ".join(named)


def _conv_dims(op: OpNode) -> int:
    """1, 2 or 3: how many spatial dimensions a convolution's weight has (2 when unknown)."""
    w = op.tensor("weight")
    return len(w.shape) - 2 if w and len(w.shape) >= 3 else 2


def _transposed(op: OpNode) -> bool:
    """A transposed convolution (``conv_transpose2d``, or ``convolution`` with ``transposed``)."""
    return "transpose" in op.op or bool(op.args.get("transposed"))


def describe(op: OpNode, kind: str) -> str:
    """``depthwise 3x3 conv``, ``1x1 conv``, ``80-tap conv1d stride 4``, ``2x2 transposed conv stride 2``,
    ``linear 1x2048->1000`` ..."""
    if kind == "conv":
        w = op.tensor("weight")
        x = op.tensor("input")
        groups = int(op.args.get("groups", 1) or 1)
        kernel = "x".join(str(k) for k in w.shape[2:]) if w else "?"
        if w and len(w.shape) == 3:  # a 1-D kernel: its length, which alone would read as a count
            kernel = f"{kernel}-tap"
        stride = op.args.get("stride") or [1]
        s = f" stride {stride[0]}" if isinstance(stride, list) and stride and stride[0] != 1 else ""
        dims = _conv_dims(op)
        conv = ("transposed " if _transposed(op) else "") + ("conv" if dims == 2 else f"conv{dims}d")
        if x and groups > 1 and groups == x.shape[1]:
            return f"depthwise {kernel} {conv}{s}"
        if groups > 1:
            return f"grouped ({groups}) {kernel} {conv}{s}"
        return f"{kernel} {conv}{s}"
    if kind in ("linear", "matmul"):
        ts = op.tensors()
        if ts and op.outputs:
            rows = ts[0].numel // max(ts[0].shape[-1], 1)
            return f"{op.op} {rows}x{ts[0].shape[-1]}->{op.outputs[0].shape[-1]}"
    if kind == "norm":
        return op.op.replace("_", " ")
    return op.op


def _rows(op: OpNode) -> int:
    ts = op.tensors()
    return ts[0].numel // max(ts[0].shape[-1], 1) if ts else 0


def reason(op: OpNode, kind: str, bound: str, efficiency: float | None, level: str,
           faster: dict[str, float] | None = None) -> str:
    """E.g. "depthwise 3x3 conv, memory-bound in L2 at 18 % of roof: try channels_last".

    ``faster``: the lower precisions this machine's GEMMs run faster, from
    :func:`lower_precisions`; the advice names them with their measured ratio (or says none is
    faster). Without it the advice gives the general rule."""
    what = describe(op, kind)
    eff = f"{efficiency:.0%} of roof" if efficiency is not None else "no roof (no cost formula)"
    if kind == "view":
        return f"{what}, a view (no data moved): its time is dispatch overhead; torch.compile or TorchScript remove it"
    if bound == "overhead":
        return f"{what}, dispatch-bound ({eff}): fuse it with its neighbours (torch.compile) or raise the batch"
    if bound == "unknown":
        return f"{what}: no cost formula, its time cannot be placed on the roofline"
    where = "compute-bound" if bound == "compute" else f"memory-bound in {level}"
    head = f"{what}, {where} at {eff}"
    memory = bound.startswith("memory")
    depthwise = what.startswith("depthwise")
    advice: str
    if kind == "conv":
        # rooftune select and channels_last are for 2-D convolutions, not transposed ones
        planar = _conv_dims(op) == 2 and not _transposed(op)
        if depthwise and planar:
            advice = "try channels_last (oneDNN's depthwise kernels want NHWC)"
        elif memory:
            advice = ("try channels_last, or " if planar else "try ") + "a larger batch so each weight is reused"
        elif efficiency is not None and efficiency < LOW_COMPUTE_EFFICIENCY:
            advice = ("try another convolution primitive (rooftune select) or channels_last" if planar
                      else "try a graph runtime's kernels (rooftune tune: ONNX Runtime, OpenVINO)")
        elif faster is None or faster:
            advice = f"near its roof: only a lower precision is faster, {_lower(faster)}"
        else:
            advice = "near its roof, and no lower precision's GEMM measured faster than fp32's here"
    elif kind in ("linear", "matmul"):
        if _rows(op) <= GEMV_ROWS:
            advice = "a matrix-vector product streaming its weights: batch requests, or int8 weights"
        elif memory:
            advice = "try a larger batch, or int8/bf16 weights to move fewer bytes"
        elif faster is None or faster:
            advice = f"try {_lower(faster)}, or another runtime's GEMM"
        else:
            advice = "try another runtime's GEMM (no lower precision's GEMM measured faster than fp32's here)"
    elif kind == "norm" and op.op.startswith(("batch_norm", "_native_batch_norm")):
        advice = "fold it into the preceding conv (TorchScript freeze, torch.compile or ONNX Runtime)"
    elif kind in ("elementwise", "norm", "softmax"):
        advice = "fuse it into its producer (torch.compile, ONNX Runtime or OpenVINO)"
    elif kind in ("concat", "copy"):
        advice = "avoid the copy: let producers write into one buffer (torch.compile)"
    elif kind == "pool":
        advice = "try channels_last, or fuse it with the conv before it"
    elif kind == "rnn" and memory:
        advice = "each step reads the recurrent weights again: a larger batch shares those reads"
        if op.op == "lstm":  # ONNX Runtime's dynamic quantizer has LSTMs, not GRUs or plain RNNs
            advice += "; int8 weights move a quarter of the bytes (tune --int8: ONNX Runtime quantizes LSTMs so)"
    elif kind == "rnn":
        advice = "sequential over time steps: a larger batch widens each step's GEMM; try ONNX Runtime or OpenVINO"
    elif kind == "fill":
        advice = "an allocation and fill each run: pass initial states in, or let a graph runtime reuse the buffer"
    elif kind == "attention":
        advice = "check the fused attention kernel is used (scaled_dot_product_attention)"
        if faster is None or "bf16" in faster:
            advice += f" and try {_lower(faster, ('bf16',))}"
    elif kind == "optimizer":
        advice = ("the update reads and writes every parameter, gradient and state buffer once per step: "
                  "the foreach or fused implementation (tune --train) runs it in fewer, wider kernels")
    elif kind == "reduction" and memory:
        advice = "a pass over its input for a few outputs: fuse it into the op that makes the input (torch.compile, ONNX Runtime or OpenVINO)"
    else:
        advice = "no rule for this kind of op: a graph runtime's kernels (rooftune tune) are the thing to measure"
    return f"{head}: {advice}"


def top_opportunities(ops: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The ``n`` ops with the largest positive headroom, largest first."""
    ranked = sorted((o for o in ops if o.get("headroom_s") is not None and o["headroom_s"] > 0),
                    key=lambda o: -o["headroom_s"])
    return ranked[:n]


def _alike(o: dict[str, Any]) -> str:
    """Ops that do the same work the same way: op, kind, shapes, dtype and where they sit."""
    return json_text([o.get("target"), o.get("kind"), o.get("shapes"), o.get("dtype"), o.get("bound")],
                      sort_keys=True, default=str)


def module_pattern(modules: list[str]) -> str:
    """``encoder.layers.*.mlp.0`` for modules that differ only in some dotted parts; where their
    paths differ in length, the pattern of the most common length (the first module's among
    equals) and ``(+N)`` for the others: ``layer1.*.conv3 (+1)``."""
    names = [m for m in modules if m]
    if not names:
        return "-"
    parts = [m.split(".") for m in names]
    lengths = [len(p) for p in parts]
    common = max(dict.fromkeys(lengths), key=lengths.count)
    same = [p for p in parts if len(p) == common]
    pattern = ".".join(col[0] if len(set(col)) == 1 else "*" for col in zip(*same, strict=True))
    return pattern + (f" (+{len(names) - len(same)})" if len(same) < len(names) else "")


def group_reason(reasons: list[str], efficiencies: list[float | None]) -> str:
    """The reason of one op of a group, its share of the roof given as the group's range."""
    known = [e for e in efficiencies if e is not None]
    if not reasons or not known:
        return reasons[0] if reasons else ""
    lo, hi = round(min(known) * 100), round(max(known) * 100)
    span = f"{lo}% of roof" if lo == hi else f"{lo}-{hi}% of roof"
    return re.sub(r"\d+% of roof", span, reasons[0], count=1)


def check_top(n: object, name: str = "top") -> int:
    """How many ops and opportunities to list: a positive integer (none listed would say nothing)."""
    if not is_int(n) or not isinstance(n, numbers.Integral) or n < 1:  # numpy's integers too, no bool
        raise InvalidArgument(name, n, "allowed a positive integer")
    return int(n)


def opportunity_groups(ops: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The ``n`` largest headrooms, alike ops (the same work done the same way, e.g. a block
    repeated down a network) taken together: ``ops`` (their indices, largest headroom first),
    ``count``, ``time_s`` and ``headroom_s`` (summed), ``module`` (a pattern such as
    ``layer1.*.conv2``), ``reason`` (its share of the roof as the group's range)."""
    n = check_top(n)
    groups: dict[str, list[dict[str, Any]]] = {}
    for o in ops:
        if o.get("headroom_s") is not None and o["headroom_s"] > 0:
            groups.setdefault(_alike(o), []).append(o)
    out = []
    for members in groups.values():
        members.sort(key=lambda o: -o["headroom_s"])
        out.append({
            "ops": [o["index"] for o in members], "count": len(members), "name": members[0]["name"],
            "kind": members[0]["kind"], "bound": members[0]["bound"],
            "module": module_pattern([o.get("module") or "" for o in members]),
            "time_s": sum(o["time_s"] for o in members), "headroom_s": sum(o["headroom_s"] for o in members),
            "reason": group_reason([o["reason"] for o in members], [o.get("efficiency") for o in members]),
        })
    return sorted(out, key=lambda g: -g["headroom_s"])[:n]

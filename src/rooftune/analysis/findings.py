"""One-line reasons for the top opportunities: what the op is, where it sits, what to try."""

from __future__ import annotations

from typing import Any

from rooftune.workload.graph import OpNode

#: A GEMM whose rows (batch x tokens) are at most this is a matrix-vector product: it streams its
#: weights once per call and cannot reach the compute roof.
GEMV_ROWS = 8
#: Below this share of the compute roof a compute-bound kernel is worth replacing.
LOW_COMPUTE_EFFICIENCY = 0.5


def describe(op: OpNode, kind: str) -> str:
    """``depthwise 3x3 conv``, ``1x1 conv``, ``linear 1x2048->1000`` ..."""
    if kind == "conv":
        w = op.tensor("weight")
        x = op.tensor("input")
        groups = int(op.args.get("groups", 1) or 1)
        kernel = "x".join(str(k) for k in w.shape[2:]) if w else "?"
        stride = op.args.get("stride") or [1]
        s = f" stride {stride[0]}" if isinstance(stride, list) and stride and stride[0] != 1 else ""
        if x and groups > 1 and groups == x.shape[1]:
            return f"depthwise {kernel} conv{s}"
        if groups > 1:
            return f"grouped ({groups}) {kernel} conv{s}"
        return f"{kernel} conv{s}"
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


def reason(op: OpNode, kind: str, bound: str, efficiency: float | None, level: str) -> str:
    """E.g. "depthwise 3x3 conv, memory-bound in L2 at 18 % of roof: try channels_last"."""
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
        if depthwise:
            advice = "try channels_last (oneDNN's depthwise kernels want NHWC)"
        elif memory:
            advice = "try channels_last, or a larger batch so each weight is reused"
        elif efficiency is not None and efficiency < LOW_COMPUTE_EFFICIENCY:
            advice = "try another convolution primitive (rooftune select) or channels_last"
        else:
            advice = "near its roof: only lower precision (bf16/int8 where native) is faster"
    elif kind in ("linear", "matmul"):
        if _rows(op) <= GEMV_ROWS:
            advice = "a matrix-vector product streaming its weights: batch requests, or int8 weights"
        elif memory:
            advice = "try a larger batch, or int8/bf16 weights to move fewer bytes"
        else:
            advice = "try bf16/int8 where native, or another runtime's GEMM"
    elif kind == "norm" and op.op.startswith(("batch_norm", "_native_batch_norm")):
        advice = "fold it into the preceding conv (TorchScript freeze, torch.compile or ONNX Runtime)"
    elif kind in ("elementwise", "norm", "softmax"):
        advice = "fuse it into its producer (torch.compile, ONNX Runtime or OpenVINO)"
    elif kind in ("concat", "copy"):
        advice = "avoid the copy: let producers write into one buffer (torch.compile)"
    elif kind == "pool":
        advice = "try channels_last, or fuse it with the conv before it"
    elif kind == "rnn":
        advice = "sequential over time steps: a larger batch widens each step's GEMM; try ONNX Runtime or OpenVINO"
    elif kind == "fill":
        advice = "an allocation and fill each run: pass initial states in, or let a graph runtime reuse the buffer"
    elif kind == "attention":
        advice = "check the fused attention kernel is used (scaled_dot_product_attention) and try bf16"
    else:
        advice = "see its share of time before anything else"
    return f"{head}: {advice}"


def top_opportunities(ops: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The ``n`` ops with the largest positive headroom, largest first."""
    ranked = sorted((o for o in ops if o.get("headroom_s") is not None and o["headroom_s"] > 0),
                    key=lambda o: -o["headroom_s"])
    return ranked[:n]

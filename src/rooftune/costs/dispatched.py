"""The cost of an op captured at the dispatcher inside a training step
(:mod:`rooftune.workload.step_graph`): FLOPs as torch.utils.flop_counter counts them (its
formulas ran when the op did; an op it has none for counts 0, as in its total, so the step's
FLOPs are FlopCounterMode's), compulsory bytes every input and output tensor once, and a view
(an op returning its input's storage without writing it) nothing. The kind is the forward op's
where one names it (``convolution_backward`` is a conv), ``optimizer`` for the update's ops."""

from __future__ import annotations

import functools

from rooftune.costs.formulas import FORMULAS, OpCost
from rooftune.workload.graph import OpNode, TensorMeta

#: Suffixes a backward op adds to the name of the forward op it differentiates.
_BACKWARD = ("_backward_data", "_backward_input", "_backward_weight", "_backward")
#: Op kinds torch.utils.flop_counter has formulas for, by the name's start.
_MATRIX = {"convolution": "conv", "mkldnn_convolution": "conv", "_convolution": "conv", "mm": "matmul",
           "bmm": "matmul", "addmm": "matmul", "baddbmm": "matmul", "_scaled_dot_product": "attention",
           "scaled_dot_product": "attention", "_efficient_attention": "attention", "_flash_attention": "attention"}


@functools.cache
def _alias_info(target: str) -> tuple[bool, bool]:
    """(a view: returns an input's storage, writes nothing; mutates an argument it does not
    return), from the op's schema (its first overload's: overloads of one op agree on both)."""
    import torch

    name = target.removeprefix("aten.")
    try:
        packet = getattr(torch.ops.aten, name)
        schema = getattr(packet, packet.overloads()[0])._schema
    except (AttributeError, IndexError, RuntimeError):
        return False, False
    writes = any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
    view = not writes and any(r.alias_info is not None for r in schema.returns)
    return view, writes and not schema.returns


def _kind(op: OpNode) -> str:
    if op.phase == "optimizer":
        return "optimizer"
    name = op.target.removeprefix("aten.").rstrip("_")
    for suffix in _BACKWARD:
        if name.endswith(suffix):
            name = name.removesuffix(suffix)
            break
    name = name.removeprefix("native_").removeprefix("_native_")
    for start, kind in _MATRIX.items():
        if name.startswith(start) and op.flops:
            return kind
    for candidate in (name, name.lstrip("_"), f"native_{name}", f"{name}2d"):
        if candidate in FORMULAS:
            return FORMULAS[candidate][0]
    if "norm" in name:
        return "norm"
    return "matmul" if op.flops else "elementwise"


def _tensor_bytes(value: object) -> int:
    if isinstance(value, TensorMeta):
        return value.nbytes
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    return 0


def dispatched_cost(op: OpNode) -> OpCost:
    """The cost of one op of a training step's graph (see the module docstring)."""
    view, writes_unreturned = _alias_info(op.target)
    kind = _kind(op)
    if view:
        return OpCost("view", op.flops or 0.0, 0.0, "dispatch: a view moves nothing")
    read = sum(_tensor_bytes(v) for v in op.args.values())
    written = sum(t.nbytes for t in op.outputs)
    if writes_unreturned:  # an in-place op that returns nothing (the _foreach_ ones): it writes what it reads first
        first = next(iter(op.args.values()), None)
        written += _tensor_bytes(first)
    return OpCost(kind, op.flops or 0.0, float(read + written), "dispatch: flop_counter's FLOPs, tensors once")

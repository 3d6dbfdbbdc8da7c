"""The cost of an op: the formula its target names (an in-place variant takes its out-of-place
formula), applied to the op's arguments and shapes."""

from __future__ import annotations

from rooftune.costs.formulas import FORMULAS, OpCost
from rooftune.costs.tf_ops import formula_of, is_tf
from rooftune.workload.graph import OpGraph, OpNode


def _lookup(op: OpNode) -> str:
    name = op.target.removeprefix("aten.")
    if name in FORMULAS:
        return name
    stripped = name.rstrip("_")  # relu_ -> relu, add_ -> add
    return stripped if stripped in FORMULAS else ""


def cost_of(op: OpNode) -> OpCost:
    """The cost of one op; an op no formula covers (or whose arguments it cannot read) has
    ``flops=None`` and a ``formula`` saying why."""
    if op.phase:  # an op of a training step, captured at the dispatcher
        from rooftune.costs.dispatched import dispatched_cost

        return dispatched_cost(op)
    if is_tf(op):  # a TensorFlow op: costed by the formula of its kind, its arguments read as that formula's
        found = formula_of(op)
        if found is None:
            return OpCost("unknown", None, None, f"no cost formula for {op.target}")
        kind, formula, op = found
    else:
        name = _lookup(op)
        if not name:
            return OpCost("unknown", None, None, f"no cost formula for {op.target}")
        kind, formula = FORMULAS[name]
    try:
        flops, nbytes, *more = formula(op)  # a recurrent op also gives its traffic and working set
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return OpCost(kind, None, None, f"{op.target}: {exc}")
    if kind == "view" and nbytes:  # a reshape that copies (its input is not contiguous)
        kind = "copy"
    return OpCost(kind, flops, nbytes, formula.__name__, *more)


def costs_of(graph: OpGraph) -> list[OpCost]:
    """The cost of every op of ``graph``, in its order."""
    return [cost_of(op) for op in graph.ops]


def formula_view(op: OpNode) -> OpNode:
    """``op`` as its formula reads it: a TensorFlow op in the form of the PyTorch op of its kind
    (NCHW activations, OIHW filters), which is what the findings describe; any other op as it is."""
    if is_tf(op):
        found = formula_of(op)
        if found is not None:
            return found[2]
    return op

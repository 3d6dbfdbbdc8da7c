"""TensorFlow ops on the formulas of :mod:`rooftune.costs.formulas`: each TF op type names the
formula of its kind, and its arguments are put in the form that formula reads (NCHW activations,
OIHW filters, a matrix product's left operand as ``self``), so both frameworks' graphs are costed
by one set of formulas.

The names cover the graph as TensorFlow runs it: the plain ops of a frozen graph (``Conv2D``,
``DepthwiseConv2dNative``, ``MatMul``, ``FusedBatchNormV3`` ...), Grappler's fused forms
(``_FusedConv2D``, ``_FusedMatMul``) and oneDNN's (``_MklNativeConv2D``, ``_MklNativeFusedConv2D``,
``_MklMatMul`` ...). A fused op costs as its main op (a convolution's bias and activation are not
counted, as a PyTorch convolution's bias is not), except a matrix product's fused bias, which is
counted as the BiasAdd it replaces: Grappler fuses a recurrent cell's bias into its input product at
batch 1 and leaves it apart at larger batches, and the cell counts one way either way.

A Keras recurrent layer (LSTM, GRU) runs as a while loop whose body is its cell's ops (two
products, their sum and bias, the gates' activations and products), once per step: the step stats
list each iteration's ops, and their sum is the layer's cost. The gates' activations inside a cell
count one operation per element, as :func:`rooftune.costs.formulas.recurrent` counts them for
PyTorch's LSTM and GRU, so the two frameworks' recurrent layers are counted by one convention
(elsewhere a sigmoid or tanh counts the operations of its usual formula). The loop's plumbing
(Enter, Merge, Switch, NextIteration, Exit, the tensor lists of its inputs and outputs, the
step counters) is no work of the model's: views, copies, or nothing.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from rooftune.costs.formulas import FORMULAS
from rooftune.workload.graph import OpNode, TensorMeta

#: TF op type (its oneDNN and fused prefixes removed) -> the formula it is costed by.
TF_FORMULAS: dict[str, str] = {
    "Conv2D": "convolution", "Conv3D": "convolution", "PadWithConv2D": "convolution",
    "PadWithFusedConv2D": "convolution", "DepthwiseConv2dNative": "convolution",
    "Conv2DBackpropInput": "conv_transpose2d",
    "MatMul": "mm", "BatchMatMul": "bmm", "BatchMatMulV2": "bmm", "BatchMatMulV3": "bmm", "Einsum": "einsum",
    "FusedBatchNorm": "batch_norm", "FusedBatchNormV2": "batch_norm", "FusedBatchNormV3": "batch_norm",
    "LayerNorm": "layer_norm",
    "Softmax": "softmax", "LogSoftmax": "log_softmax",
    "MaxPool": "max_pool2d", "AvgPool": "avg_pool2d", "MaxPool3D": "max_pool3d", "AvgPool3D": "avg_pool3d",
    "Mean": "mean", "Sum": "sum", "Max": "amax", "Min": "amin", "Prod": "prod",
    "BiasAdd": "add", "Add": "add", "AddV2": "add", "AddN": "add", "Sub": "sub", "Mul": "mul", "RealDiv": "div",
    "Maximum": "maximum", "Minimum": "minimum", "SquaredDifference": "sub", "Neg": "neg", "Abs": "abs",
    "Relu": "relu", "Relu6": "hardtanh", "LeakyRelu": "leaky_relu", "Elu": "elu", "Selu": "elu",
    "Sigmoid": "sigmoid", "Tanh": "tanh", "Swish": "silu", "Gelu": "gelu", "Softplus": "softplus",
    "Sqrt": "sqrt", "Rsqrt": "rsqrt", "Square": "square", "Exp": "exp", "Log": "log", "Erf": "erf",
    "Pow": "pow", "Reciprocal": "reciprocal", "Floor": "floor", "Select": "where", "SelectV2": "where",
    "ConcatV2": "cat", "Concat": "cat", "Pack": "stack",
    "Pad": "constant_pad_nd", "PadV2": "constant_pad_nd", "MirrorPad": "reflection_pad2d", "Transpose": "clone",
    "Tile": "repeat", "Cast": "_to_copy", "ResizeBilinear": "upsample_bilinear2d",
    "ResizeNearestNeighbor": "upsample_nearest2d", "GatherV2": "index_select",
    # no data moves (or the graph's plumbing: its arguments, results and constants)
    "Reshape": "view", "Squeeze": "squeeze", "ExpandDims": "unsqueeze", "Identity": "alias",
    "StridedSlice": "slice", "Slice": "slice", "Shape": "alias", "Const": "alias", "NoOp": "alias",
    "_Arg": "alias", "_Retval": "alias", "Placeholder": "alias", "Snapshot": "alias",
    # a while loop's control flow (a Keras recurrent layer's steps), and its tensor lists: the
    # inputs unstacked and the outputs stacked once (copies), a step's slice read or written
    "Enter": "alias", "Exit": "alias", "Merge": "alias", "Switch": "alias", "NextIteration": "alias",
    "LoopCond": "alias", "TensorListReserve": "alias", "TensorListGetItem": "select", "TensorListSetItem": "select",
    "TensorListFromTensor": "clone", "TensorListStack": "clone", "Split": "split", "SplitV": "split",
    "Unpack": "unbind", "Less": "lt", "LessEqual": "le", "Greater": "gt", "GreaterEqual": "ge",
    "Equal": "eq", "LogicalAnd": "logical_and", "LogicalOr": "logical_or", "LogicalNot": "logical_not",
}
#: A node inside a Keras recurrent cell (its scope, as the frozen graph names it: ``lstm_cell_1``).
_CELL = re.compile(r"(^|/)(lstm|gru|simple_rnn)_cell(_\d+)?/")
#: Activations a cell's gates apply, counted one operation per element there (as recurrent() does).
_GATE_ACTIVATIONS = ("Sigmoid", "Tanh", "Relu")
#: Integer dtypes: a scalar of one is a loop's step counter or bound, no arithmetic of the model.
_INTEGER = ("int32", "int64", "int8", "uint8", "bool")
#: Prefixes TensorFlow's rewrites give an op: oneDNN's kernels, Grappler's fusions.
_PREFIXES = ("_MklNativeFused", "_MklNative", "_MklFused", "_Mkl", "_Fused")
#: Convolution-like op types whose filter is HWIO (depthwise: H, W, C, multiplier).
_CONVS = ("Conv2D", "Conv3D", "DepthwiseConv2dNative", "PadWithConv2D", "PadWithFusedConv2D")


def tf_type(op_type: str) -> str:
    """``_MklNativeFusedConv2D`` -> ``Conv2D``; a type without a prefix is itself."""
    for p in _PREFIXES:
        if op_type.startswith(p) and op_type[len(p):] in TF_FORMULAS:
            return op_type[len(p):]
    # _FusedBatchNormEx / _MklFusedBatchNormV3: the batch norm in its fused form
    if "BatchNorm" in op_type:
        return "FusedBatchNormV3"
    return op_type


def _nchw(t: TensorMeta, data_format: str) -> TensorMeta:
    if data_format.startswith("NC") or len(t.shape) < 3:
        return t
    s = t.shape
    return replace(t, shape=(s[0], s[-1], *s[1:-1]))


def _inputs(op: OpNode) -> list[TensorMeta]:
    return [v for k, v in op.args.items() if k.startswith("x") and isinstance(v, TensorMeta)]


def as_aten(op: OpNode) -> tuple[str, OpNode] | None:
    """The formula name and ``op`` in the form that formula reads, or None when no formula
    covers its type."""
    kind = tf_type(op.module_type or op.target.removeprefix("tf."))
    name = TF_FORMULAS.get(kind)
    if name is None:
        return None
    xs = _inputs(op)
    fmt = str(op.args.get("data_format") or "NHWC")
    args: dict[str, Any] = {f"arg{i}": x for i, x in enumerate(xs)}
    outputs = op.outputs[:1] if op.outputs else ()
    if kind in _CONVS and len(xs) >= 2:
        x, w = xs[0], xs[1]
        *spatial, c_in, c_out = w.shape
        if kind == "DepthwiseConv2dNative":  # each input channel its own filters: groups = channels
            weight = replace(w, shape=(c_in * c_out, 1, *spatial))
        else:
            weight = replace(w, shape=(c_out, c_in, *spatial))
        args = {"input": _nchw(x, fmt), "weight": weight, **{f"arg{i}": t for i, t in enumerate(xs[2:])}}
        outputs = tuple(_nchw(o, fmt) for o in outputs)
    elif kind == "MatMul" and xs:
        a, b = op.args.get("x0"), op.args.get("x1")
        if isinstance(a, TensorMeta):
            if op.args.get("transpose_a") and len(a.shape) == 2:
                a = replace(a, shape=(a.shape[1], a.shape[0]))
        elif isinstance(b, TensorMeta) and len(b.shape) == 2 and outputs and len(outputs[0].shape) == 2:
            # the left operand's shape unknown to the step stats (a loop-carried state, a recurrent
            # cell's h): its rows are the product's, its columns the right operand's contracted side
            k = b.shape[1] if op.args.get("transpose_b") else b.shape[0]
            a = replace(b, shape=(outputs[0].shape[0], k))
        else:
            a = xs[0]
        rest = [t for t in xs if t is not op.args.get("x0")]
        args = {"self": a, **{f"arg{i}": t for i, t in enumerate(rest)}}
    elif kind.startswith("BatchMatMul") and xs:
        a = xs[0]
        if op.args.get("adj_x") and len(a.shape) >= 2:
            a = replace(a, shape=(*a.shape[:-2], a.shape[-1], a.shape[-2]))
        args = {"self": a, **{f"arg{i}": t for i, t in enumerate(xs[1:])}}
    elif kind in ("MaxPool", "AvgPool", "MaxPool3D", "AvgPool3D"):
        ksize = list(op.args.get("ksize") or [])
        window = ksize[2:] if fmt.startswith("NC") else ksize[1:-1]
        args = {"input": _nchw(xs[0], fmt) if xs else None, "kernel_size": window}
        outputs = tuple(_nchw(o, fmt) for o in outputs)
    elif kind.startswith("FusedBatchNorm"):
        outputs = op.outputs[:1]
    elif kind in ("Mean", "Sum", "Max", "Min", "Prod") and xs:
        args = {"input": xs[0]}  # the axes tensor is no data the reduction moves
    return name, replace(op, target=f"aten.{name}", args=args, outputs=outputs)


def is_tf(op: OpNode) -> bool:
    return op.target.startswith("tf.")


def formula_of(op: OpNode) -> tuple[str, Any, OpNode] | None:
    """(kind, formula, the op as it reads) for a TF op, or None."""
    found = as_aten(op)
    if found is None or found[0] not in FORMULAS:
        return None
    name, aten = found
    kind, formula = FORMULAS[name]
    tf_kind = tf_type(op.module_type or op.target.removeprefix("tf."))
    if op.outputs and all(o.shape == () and o.dtype in _INTEGER for o in op.outputs) and kind != "view":
        return "view", FORMULAS["alias"][1], replace(aten, target="aten.alias")
    if tf_kind in _GATE_ACTIVATIONS and _CELL.search(op.name):
        return kind, gate_activation, aten
    if tf_kind == "MatMul" and "BiasAdd" in (op.args.get("fused_ops") or ()):
        return kind, _with_bias(formula), aten
    return kind, formula, aten


def gate_activation(op: OpNode) -> tuple[float, float]:
    """A recurrent cell's gate activation: one operation per element (see the module docstring)."""
    from rooftune.costs.formulas import first_output, io_bytes

    return float(first_output(op).numel), io_bytes(op)


def _with_bias(formula: Any) -> Any:
    def fused_bias(op: OpNode) -> tuple[float, float]:
        """A matrix product with its fused bias: the product's cost and one add per output element."""
        flops, nbytes = formula(op)
        return flops + float(op.outputs[0].numel if op.outputs else 0), nbytes

    fused_bias.__name__ = f"{formula.__name__}_bias"
    return fused_bias

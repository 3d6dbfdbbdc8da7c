"""FLOPs and compulsory bytes of every op kind rooftune knows.

Conventions (as torch.utils.flop_counter): a multiply-add is 2 FLOPs; the bias of a convolution,
linear layer or addmm is not counted; attention counts its two matrix products. Compulsory bytes
move every input, weight and output once at its dtype's size (an in-place op reads and writes its
tensor once each). Elementwise ops count the arithmetic per output element given in
:data:`ELEMENTWISE_FLOPS`. An op without a formula gets ``flops=None`` and is listed as such.
A recurrent op also gives the bytes its dependent steps move (each reads the recurrent weights
again) and the working set they come from; the roofline places it by those (:class:`OpCost`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from rooftune.workload.graph import OpNode, TensorMeta


@dataclass(frozen=True)
class OpCost:
    """FLOPs and compulsory bytes of one op; both None when no formula covers it."""

    kind: str
    flops: float | None
    bytes: float | None
    formula: str
    #: Bytes the op must move between the cores and the level holding its working set, where
    #: that is more than the compulsory ``bytes``: a recurrent op's steps depend on each other, so
    #: each reads every recurrent weight again (None: the compulsory bytes).
    traffic: float | None = None
    #: The bytes that must stay near the cores for ``traffic`` to come from one level (None: the
    #: compulsory bytes): a recurrent layer's weights that each step reads.
    working_set: float | None = None

    @property
    def known(self) -> bool:
        return self.flops is not None and self.bytes is not None

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity, FLOPs per compulsory byte."""
        if not self.known or not self.bytes:
            return None
        return float(self.flops) / float(self.bytes)  # type: ignore[arg-type]


#: (FLOPs, compulsory bytes), a recurrent op's with its traffic and working set after them.
Formula = Callable[[OpNode], tuple[float, ...]]

#: FLOPs per output element. Simple arithmetic counts 1; a clamp 2 (min and max); transcendental
#: activations count the operations of their usual formula (sigmoid = exp, add, div, neg) so that
#: their cost is not hidden, though on a CPU they are bandwidth-bound at any of these counts.
ELEMENTWISE_FLOPS: dict[str, int] = {
    "relu": 1, "threshold": 1, "leaky_relu": 2, "hardtanh": 2, "clamp": 2, "clamp_min": 1, "clamp_max": 1,
    "add": 1, "sub": 1, "mul": 1, "div": 1, "neg": 1, "abs": 1, "rsub": 1, "where": 1, "maximum": 1, "minimum": 1,
    "sqrt": 1, "rsqrt": 1, "reciprocal": 1, "square": 1, "pow": 1, "exp": 1, "log": 1,
    "sigmoid": 4, "tanh": 6, "hardsigmoid": 3, "hardswish": 4, "silu": 5, "elu": 5, "gelu": 8, "mish": 10,
    "erf": 4, "softplus": 4,
    # comparisons and masks (an attention mask's ``mask == 0`` and ``masked_fill``), one each
    "eq": 1, "ne": 1, "lt": 1, "le": 1, "gt": 1, "ge": 1, "logical_not": 1, "logical_and": 1, "logical_or": 1,
    "masked_fill": 1, "floor": 1, "ceil": 1, "round": 1, "sign": 1,
}
#: Inference batch norm folds to one scale and one shift per element.
BATCH_NORM_FLOPS = 2
#: Layer/group/instance norm: mean (1), variance (3), normalise (2), affine (2) per element.
NORM_FLOPS = 8
#: Softmax: max, subtract, exp, sum, divide per element.
SOFTMAX_FLOPS = 5
#: Per hidden unit and step, besides the two matrix products: LSTM adds the input and hidden
#: projections of 4 gates (4), 3 sigmoids and 2 tanh counted 1 each (5), c = f*c + i*g (3),
#: h = o*tanh(c) (1); GRU: 3 gate sums, 3 activations, r*(W h), (1-z)*n + z*h (3); tanh RNN: 1 sum, 1 tanh.
RNN_POINTWISE_FLOPS = {"lstm": 13, "gru": 10, "rnn_tanh": 2, "rnn_relu": 2}
RNN_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}

#: Ops that only re-describe memory (no data moves) or, like dropout at inference, do nothing.
VIEW_OPS = frozenset(
    "view _unsafe_view reshape flatten unflatten transpose permute select slice unsqueeze squeeze expand "
    "expand_as alias t detach dropout feature_dropout alpha_dropout unbind split split_with_sizes chunk "
    "narrow as_strided numpy_T lift_fresh_copy view_as type_as movedim swapaxes tensor_split hsplit vsplit "
    "dsplit".split()
)
COPY_OPS = frozenset(
    "contiguous clone _to_copy to copy_ copy constant_pad_nd pad repeat roll flip pixel_shuffle pixel_unshuffle "
    "channel_shuffle native_channel_shuffle reflection_pad1d reflection_pad2d reflection_pad3d replication_pad1d "
    "replication_pad2d replication_pad3d _pad_circular upsample_nearest1d upsample_nearest2d upsample_nearest3d "
    "_upsample_nearest_exact1d _upsample_nearest_exact2d _upsample_nearest_exact3d".split()
)
#: Ops that read a few elements of their first input at positions other tensors give.
GATHER_OPS = frozenset("index index_select gather take".split())
#: Interpolations: output element -> input elements it weighs (a multiply-add each).
INTERPOLATION_TAPS = {"upsample_linear1d": 2, "upsample_bilinear2d": 4, "_upsample_bilinear2d_aa": 4,
                      "upsample_trilinear3d": 8, "upsample_bicubic2d": 16, "_upsample_bicubic2d_aa": 16}
FILL_OPS = frozenset("zeros ones empty full zeros_like ones_like empty_like full_like arange new_zeros new_ones fill_ "
                     "fill zero scalar_tensor".split())
REDUCTION_OPS = frozenset("sum mean amax amin max min prod var std argmax argmin logsumexp".split())


def io_bytes(op: OpNode) -> float:
    return float(sum(t.nbytes for t in op.tensors()) + sum(t.nbytes for t in op.outputs))


def _first(op: OpNode) -> TensorMeta:
    ts = op.tensors()
    if not ts:
        raise ValueError(f"{op.target} has no tensor input")
    return ts[0]


def first_output(op: OpNode) -> TensorMeta:
    if not op.outputs:
        raise ValueError(f"{op.target} has no tensor output")
    return op.outputs[0]


def conv(op: OpNode) -> tuple[float, float]:
    """2 * N * K * prod(out spatial) * (C/g) * prod(kernel); transposed: over the input's spatial
    size (torch.utils.flop_counter's conv_flop_count)."""
    x, w, y = op.tensor("input") or _first(op), op.tensor("weight"), first_output(op)
    if w is None:
        raise ValueError("convolution without a weight tensor")
    transposed = bool(op.args.get("transposed", False)) or op.op.startswith("conv_transpose")
    spatial = (x.shape if transposed else y.shape)[2:]
    c_out, c_in, *kernel = w.shape
    flops = 2 * x.shape[0] * c_out * c_in * math.prod(kernel) * math.prod(spatial)
    return float(flops), io_bytes(op)


def linear(op: OpNode) -> tuple[float, float]:
    """2 * M * N * K, M the rows of the input (all leading dims)."""
    x, w = op.tensor("input") or _first(op), op.tensor("weight")
    if w is None:
        raise ValueError("linear without a weight tensor")
    k = x.shape[-1]
    m = x.numel // k if k else 0
    n = w.shape[0] if len(w.shape) == 2 else 1
    return float(2 * m * n * k), io_bytes(op)


def matmul(op: OpNode) -> tuple[float, float]:
    """2 * (output elements) * K for mm, bmm, matmul, addmm, baddbmm; K the contracted size."""
    names = {"addmm": "mat1", "baddbmm": "batch1", "addbmm": "batch1", "addmv": "mat"}
    a = op.tensor(names.get(op.op.rstrip("_"), "self")) or _first(op)
    k = a.shape[-1]
    out_numel = first_output(op).numel
    if op.op == "addbmm":  # sums the batch: every batch product is counted
        out_numel *= a.shape[0]
    return float(2 * out_numel * k), io_bytes(op)


def einsum(op: OpNode) -> tuple[float, float]:
    """A multiply-add per point of the space every index spans (the product of each distinct
    index's size: 2 * output elements * the contracted sizes), as flop_counter counts it; one
    operand's einsum (a sum, a transpose, a diagonal) one per point of that space."""
    equation = op.args.get("equation")
    ts = op.tensors()
    if not isinstance(equation, str) or not ts:
        raise ValueError("einsum without an equation and operands")
    inputs = equation.replace(" ", "").split("->")[0].split(",")
    if "..." in equation or len(inputs) != len(ts):
        raise ValueError(f"einsum {equation!r}: broadcast dimensions are not counted")
    sizes: dict[str, int] = {}
    for letters, t in zip(inputs, ts, strict=True):
        if len(letters) != len(t.shape):
            raise ValueError(f"einsum {equation!r} against shape {t.shape}")
        sizes.update(zip(letters, t.shape, strict=True))
    space = math.prod(sizes.values())
    return float(2 * space if len(ts) > 1 else space), io_bytes(op)


def attention(op: OpNode) -> tuple[float, float]:
    """Q K^T and P V: 2*B*L*S*E + 2*B*L*S*Ev (softmax not counted, as flop_counter)."""
    q, k, v = op.tensor("query"), op.tensor("key"), op.tensor("value")
    if q is None or k is None or v is None:
        raise ValueError("attention without query, key and value")
    batch = math.prod(q.shape[:-2])
    L, E = q.shape[-2], q.shape[-1]
    S, Ev = k.shape[-2], v.shape[-1]
    return float(2 * batch * L * S * E + 2 * batch * L * S * Ev), io_bytes(op)


def multihead_attention(op: OpNode) -> tuple[float, float]:
    """nn.MultiheadAttention seen whole: 3 input projections, attention, output projection."""
    q, k = op.tensor("query"), op.tensor("key")
    if q is None or k is None:
        raise ValueError("attention without query and key")
    e = int(op.args["embed_dim"])
    tokens_q, tokens_k = q.numel // e, k.numel // e
    if len(q.shape) != 3:  # unbatched (L, E): batch_first does not apply
        batch = 1
    else:
        batch = q.shape[0] if op.args.get("batch_first") else q.shape[1]
    L, S = tokens_q // batch, tokens_k // batch
    proj = 2 * e * e * (2 * tokens_q + 2 * tokens_k)  # q and out on L tokens, k and v on S tokens
    attn = 4 * batch * L * S * e
    weights = (4 * e * e + 4 * e) * q.itemsize
    return float(proj + attn), io_bytes(op) + weights


def recurrent(op: OpNode) -> tuple[float, float, float, float]:
    """Whole sequence, all layers and directions: per step and layer 2*N*G*H*(I_l + H) for the two
    projections, 2*G*H*N for the biases, and RNN_POINTWISE_FLOPS per hidden unit.

    Traffic: the input projection of a layer is one product over the whole sequence (oneDNN,
    ONNX Runtime and OpenVINO compute it so), but step t+1 needs step t's hidden state, so every
    step reads the layer's recurrent weights (G*H x H per direction) again: a layer moves its
    input weights once and its recurrent weights once per step, besides the inputs and outputs.
    The working set is one layer's recurrent weights (all directions). At batch 1 a 2-layer LSTM
    of hidden 512 over 64 steps (input 128) moves 542 MB where its compulsory bytes are 13.2 MiB:
    bound by those reads, not by its FLOPs, which is why s8 weights (ONNX Runtime's dynamic
    quantization) speed it far more than its FLOPs would say (BENCHMARKS.md, tuning run 27)."""
    cell = op.op
    x = op.tensor("input") or _first(op)
    params = [p for p in op.args.get("params", []) if isinstance(p, TensorMeta)]
    layers = int(op.args.get("num_layers", 1))
    dirs = 2 if op.args.get("bidirectional") else 1
    biases = bool(op.args.get("has_biases", True))
    if not params or len(params[1].shape) != 2:
        raise ValueError("recurrent op without weight parameters")
    g = RNN_GATES[cell]
    hidden = params[1].shape[1]  # weight_hh_l0: (G*H, H)
    if params[1].shape[0] != g * hidden:
        raise ValueError("projections (proj_size) are not covered")
    batch_first = bool(op.args.get("batch_first", False))
    if len(x.shape) == 2:
        steps, batch, width = x.shape[0], 1, x.shape[1]
    else:
        steps, batch = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
        width = x.shape[2]
    flops = 0
    elem = params[1].nbytes / max(params[1].numel, 1)
    recurrent_w = dirs * g * hidden * hidden * elem  # one layer's, all directions
    for layer in range(layers):
        i_l = width if layer == 0 else hidden * dirs
        per_step = 2 * batch * g * hidden * (i_l + hidden) + batch * hidden * RNN_POINTWISE_FLOPS[cell]
        if biases:
            per_step += 2 * batch * g * hidden
        flops += dirs * steps * per_step
    io = io_bytes(op)  # every weight once; the recurrent ones are read steps - 1 times more
    return float(flops), io, float(io + (steps - 1) * layers * recurrent_w), float(recurrent_w)


def elementwise(op: OpNode) -> tuple[float, float]:
    per = ELEMENTWISE_FLOPS[op.op.rstrip("_")]
    return float(per * first_output(op).numel), io_bytes(op)


def batch_norm(op: OpNode) -> tuple[float, float]:
    return float(BATCH_NORM_FLOPS * first_output(op).numel), io_bytes(op)


def norm(op: OpNode) -> tuple[float, float]:
    return float(NORM_FLOPS * first_output(op).numel), io_bytes(op)


def softmax(op: OpNode) -> tuple[float, float]:
    return float(SOFTMAX_FLOPS * first_output(op).numel), io_bytes(op)


def pool(op: OpNode) -> tuple[float, float]:
    """One operation per window element per output (adaptive pools: per input element)."""
    if op.op.startswith("adaptive"):
        return float(_first(op).numel), io_bytes(op)
    kernel = op.args.get("kernel_size") or []
    kernel = [kernel] * (len(first_output(op).shape) - 2) if isinstance(kernel, int) else list(kernel)
    if len(kernel) == 1:
        kernel = kernel * (len(first_output(op).shape) - 2)
    return float(first_output(op).numel * math.prod(kernel)), io_bytes(op)


def reduction(op: OpNode) -> tuple[float, float]:
    return float(_first(op).numel), io_bytes(op)


def vector_norm(op: OpNode) -> tuple[float, float]:
    """A multiply-add per element (the 2-norm's squares summed; the root once per output)."""
    return float(2 * _first(op).numel), io_bytes(op)


def embedding(op: OpNode) -> tuple[float, float]:
    """No arithmetic; the indices, the rows gathered (not the whole table) and the output."""
    idx = op.tensor("indices")
    out = first_output(op)
    return 0.0, float((idx.nbytes if idx else 0) + 2 * out.nbytes)


def gather(op: OpNode) -> tuple[float, float]:
    """No arithmetic; the index tensors, the elements gathered (as many as the output has, not the
    whole source) and the output."""
    out = first_output(op)
    return 0.0, float(sum(t.nbytes for t in op.tensors()[1:]) + 2 * out.nbytes)


def interpolation(op: OpNode) -> tuple[float, float]:
    """A multiply-add per tap per output element; the input and the output."""
    return float(2 * INTERPOLATION_TAPS[op.op] * first_output(op).numel), io_bytes(op)


def concat(op: OpNode) -> tuple[float, float]:
    return 0.0, io_bytes(op)


#: View ops that copy where their input is not contiguous (a transposed attention output reshaped).
COPYING_VIEWS = frozenset("reshape flatten unflatten".split())


def view(op: OpNode) -> tuple[float, float]:
    """Nothing moves, except for a reshape of a non-contiguous tensor: that is a copy (read and write)."""
    if op.target.removeprefix("aten.").rstrip("_") in COPYING_VIEWS and not _first(op).contiguous:
        return 0.0, io_bytes(op)
    return 0.0, 0.0


def fill(op: OpNode) -> tuple[float, float]:
    return 0.0, float(sum(t.nbytes for t in op.outputs))


def _table() -> dict[str, tuple[str, Formula]]:
    t: dict[str, tuple[str, Formula]] = {}
    for name in ("conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose1d",
                 "conv_transpose2d", "conv_transpose3d", "mkldnn_convolution"):
        t[name] = ("conv", conv)
    t["linear"] = ("linear", linear)
    for name in ("mm", "bmm", "matmul", "addmm", "baddbmm", "addbmm", "mv", "addmv", "dot"):
        t[name] = ("matmul", matmul)
    t["einsum"] = ("matmul", einsum)
    for name in ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu"):
        t[name] = ("attention", attention)
    t["nn.MultiheadAttention"] = ("attention", multihead_attention)
    for name in RNN_GATES:
        t[name] = ("rnn", recurrent)
    for name in ("batch_norm", "_native_batch_norm_legit_no_training", "native_batch_norm"):
        t[name] = ("norm", batch_norm)
    for name in ("layer_norm", "native_layer_norm", "group_norm", "instance_norm", "rms_norm"):
        t[name] = ("norm", norm)
    for name in ("softmax", "_softmax", "log_softmax", "_log_softmax"):
        t[name] = ("softmax", softmax)
    for name in ("max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
                 "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
                 "adaptive_max_pool1d", "adaptive_max_pool2d", "max_pool2d_with_indices"):
        t[name] = ("pool", pool)
    for name in ELEMENTWISE_FLOPS:
        t[name] = ("elementwise", elementwise)
    for name in REDUCTION_OPS:
        t[name] = ("reduction", reduction)
    for name in ("linalg_vector_norm", "norm"):
        t[name] = ("reduction", vector_norm)
    t["embedding"] = ("embedding", embedding)
    for name in ("cat", "concat", "stack"):
        t[name] = ("concat", concat)
    for name in VIEW_OPS:
        t[name] = ("view", view)
    for name in COPY_OPS:
        t[name] = ("copy", concat)
    for name in GATHER_OPS:
        t[name] = ("copy", gather)
    for name in INTERPOLATION_TAPS:
        t[name] = ("elementwise", interpolation)
    for name in FILL_OPS:
        t[name] = ("fill", fill)
    return t


#: op name (no namespace, no in-place underscore) -> (kind, formula).
FORMULAS: dict[str, tuple[str, Formula]] = _table()

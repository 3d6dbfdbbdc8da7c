"""Winograd F(4x4,3x3) convolutions written into an ONNX graph, for ONNX Runtime and OpenVINO.

ONNX Runtime's CPU provider runs every fp32 convolution directly (MLAS's blocked NCHWc kernels);
none of its kernels trades multiplications for additions. Winograd's minimal filtering (Lavin &
Gray 2016) does: an output tile of 4x4 from a 6x6 input tile takes 36 products per channel pair
where the direct form takes 144, the rest being fixed linear transforms. Here each chosen 3x3
convolution becomes standard ONNX operators that ONNX Runtime already runs well:

- the input transform ``V = B^T d B`` of every 6x6 tile of every channel is one convolution of the
  channels taken as a batch (1 input channel, 36 output channels, kernel 6x6, stride 4), then a
  transpose to one C x tiles matrix per tile point;
- the 36 products ``U[p] V[p]`` with ``U = G w G^T`` computed once from the weights are one
  batched MatMul (MLAS's GEMM);
- the output transform ``A^T M A`` is one small MatMul (16 x 36) and a DepthToSpace that lays the
  4x4 output tiles back into the feature map; the bias is one Add.

Whether this beats the direct convolution depends on the layer (channels, spatial size) and the
machine (wide layers tend to gain, narrow ones to lose). So :func:`choose` measures each
candidate layer both ways, interleaved,
and only the layers that are faster by the margin are rewritten; the whole network is then timed
with and without them (:func:`network_speedup`), and the rewrite is kept only where the network
is faster with its whole interval; the model is verified and timed as any other configuration is.
OpenVINO's direct convolutions are faster than ONNX Runtime's on small layers, so the layers
ONNX Runtime's measurements choose are the wrong ones for OpenVINO: OpenVINO's layers are
measured with OpenVINO (:func:`ov_session_factory`; BENCHMARKS.md has the figures).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from rooftune.primitives.transforms_domain import WINOGRAD_MATRICES

#: Output tile of the transform (F(4x4,3x3)): 4x4 outputs from 6x6 inputs.
M = 4
#: Lavin & Gray's F(4x4,3x3) matrices (Y = A^T [ (G g G^T) * (B^T d B) ] A), the ones the
#: PyTorch Winograd primitive uses.
BT, G, AT = (np.array(t, dtype=np.float64) for t in WINOGRAD_MATRICES[M])
#: A layer is rewritten when its small model (the layer between two 1x1 convolutions) runs at
#: least this much faster with it, at the lower end of the comparison's 95 % interval.
MIN_SPEEDUP = 1.02
#: The harness's policy for each layer's comparison (1.5 s at most, most stop sooner at +-2 %).
CHOOSE_BUDGET_S = 1.5
#: The whole network's comparison, the chosen layers rewritten against none (seconds at most).
NETWORK_BUDGET_S = 3.0


@dataclass(frozen=True)
class Candidate:
    """A Conv node the transform applies to: 3x3, stride 1, dilation 1, one group, constant fp32
    weights, a known static input shape. ``node`` names it by its output (unique in a graph, where
    node names need not be)."""

    node: str
    N: int
    C: int
    H: int
    W: int
    K: int
    pads: tuple[int, int, int, int]  # top, left, bottom, right

    @property
    def shape(self) -> str:
        return f"{self.C}->{self.K} at {self.H}x{self.W}"

    @property
    def key(self) -> tuple[int, ...]:
        return (self.N, self.C, self.H, self.W, self.K, *self.pads)


@dataclass(frozen=True)
class Choice:
    """One candidate layer measured both ways: ratio = direct / Winograd (> 1: Winograd faster)."""

    candidate: Candidate
    ratio: float
    ci: tuple[float, float]
    chosen: bool

    def to_dict(self) -> dict[str, Any]:
        def num(v: float) -> float | None:
            return round(v, 4) if math.isfinite(v) else None

        return {"node": self.candidate.node, "shape": self.candidate.shape, "speedup": num(self.ratio),
                "ci": [num(self.ci[0]), num(self.ci[1])], "chosen": self.chosen}


def _attr(node: Any, name: str, default: Any) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def candidates(model: Any) -> list[Candidate]:
    """The Conv nodes of ``model`` (shapes inferred) that Winograd F(4x4,3x3) computes."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input):
        dims = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
        shapes[vi.name] = dims
    inits = {i.name: i for i in model.graph.initializer}
    out = []
    for node in model.graph.node:
        if node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        w = inits.get(node.input[1])
        if w is None or len(w.dims) != 4 or tuple(w.dims[2:]) != (3, 3) or w.data_type != onnx.TensorProto.FLOAT:
            continue
        if len(node.input) > 2 and node.input[2] and (
                node.input[2] not in inits or inits[node.input[2]].data_type != onnx.TensorProto.FLOAT):
            continue
        if _attr(node, "group", 1) != 1 or list(_attr(node, "strides", [1, 1])) != [1, 1]:
            continue
        if list(_attr(node, "dilations", [1, 1])) != [1, 1]:
            continue
        if _attr(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            continue
        in_dims = shapes.get(node.input[0])
        if not in_dims or len(in_dims) != 4 or any(d is None or d < 1 for d in in_dims):
            continue
        n, c, h, wd = cast(list[int], in_dims)  # every one known (not None), as checked just above
        pads = list(_attr(node, "pads", [0, 0, 0, 0]))
        top, left, bottom, right = pads[0], pads[1], pads[2], pads[3]
        if h + top + bottom < 3 or wd + left + right < 3 or w.dims[1] != c:
            continue
        out.append(Candidate(node.output[0], n, c, h, wd, int(w.dims[0]), (top, left, bottom, right)))
    return out


def _weights(inits: dict[str, Any], node: Any) -> tuple[np.ndarray, np.ndarray | None]:
    from onnx import numpy_helper

    w = numpy_helper.to_array(inits[node.input[1]])
    b = numpy_helper.to_array(inits[node.input[2]]) if len(node.input) > 2 and node.input[2] else None
    return w, b


def subgraph(cand: Candidate, weight: np.ndarray, bias: np.ndarray | None, x: str, y: str,
             prefix: str) -> tuple[list[Any], list[Any]]:
    """Nodes and initializers computing ``y = conv3x3(x)`` by Winograd F(4x4,3x3)."""
    from onnx import helper, numpy_helper

    a, m = M + 2, M
    n, c, h, w, k = cand.N, cand.C, cand.H, cand.W, cand.K
    top, left, bottom, right = cand.pads
    p, q = h + top + bottom - 2, w + left + right - 2
    th, tw = math.ceil(p / m), math.ceil(q / m)
    t = th * tw
    inits: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), prefix + name))
        return prefix + name

    def node(op: str, inputs: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def shape(*dims: int) -> str:
        return const(f"shape{len(inits)}", np.array(dims, dtype=np.int64))

    # U = G w G^T per channel pair, in fp64 once: (36, K, C), index (row point, column point)
    u = np.einsum("ar,kcrs,bs->abkc", G, weight.astype(np.float64), G).reshape(a * a, k, c)
    # the input transform as a convolution: output channel (r, s) = sum BT[r,i] BT[s,j] d[i,j]
    bt2 = np.einsum("ri,sj->rsij", BT, BT).reshape(a * a, 1, a, a)
    at2 = np.einsum("ir,js->ijrs", AT, AT).reshape(m * m, a * a)
    planes = node("Reshape", [x, shape(n * c, 1, h, w)], prefix + "planes")
    v = node("Conv", [planes, const("bt", bt2.astype(np.float32))], prefix + "v", kernel_shape=[a, a],
             strides=[m, m], pads=[top, left, th * m + 2 - h - top, tw * m + 2 - w - left])
    # (N*C, 36, th, tw) -> (36, C, N*T)
    v = node("Reshape", [v, shape(n, c, a * a, t)], prefix + "v4")
    v = node("Transpose", [v], prefix + "vt", perm=[2, 1, 0, 3])
    v = node("Reshape", [v, shape(a * a, c, n * t)], prefix + "vm")
    mm = node("MatMul", [const("u", u.astype(np.float32)), v], prefix + "mm")  # (36, K, N*T)
    mm = node("Reshape", [mm, shape(a * a, k * n * t)], prefix + "mm2")
    o = node("MatMul", [const("at", at2.astype(np.float32)), mm], prefix + "o")  # (16, K*N*T), (i, j, k)
    if n == 1:
        o = node("Reshape", [o, shape(1, m * m * k, th, tw)], prefix + "o4")
    else:
        o = node("Reshape", [o, shape(m * m, k, n, th, tw)], prefix + "o5")
        o = node("Transpose", [o], prefix + "o5t", perm=[2, 0, 1, 3, 4])
        o = node("Reshape", [o, shape(n, m * m * k, th, tw)], prefix + "o4")
    out = node("DepthToSpace", [o], prefix + "tiles", blocksize=m, mode="DCR")  # (N, K, th*4, tw*4)
    if th * m != p or tw * m != q:
        out = node("Slice", [out, const("s0", np.array([0, 0], np.int64)), const("s1", np.array([p, q], np.int64)),
                             const("s2", np.array([2, 3], np.int64))], prefix + "crop")
    if bias is not None:
        nodes.append(helper.make_node("Add", [out, const("b", bias.reshape(1, k, 1, 1).astype(np.float32))], [y],
                                      name=prefix + "bias"))
    else:
        nodes.append(helper.make_node("Identity", [out], [y], name=prefix + "out"))
    return nodes, inits


def _graphs(graph: Any) -> Iterator[Any]:
    """``graph`` and every subgraph of its nodes (If, Loop, Scan bodies), recursively."""
    from onnx import AttributeProto

    yield graph
    for node in graph.node:
        for a in node.attribute:
            for g in ([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)):
                yield from _graphs(g)


def _names(graph: Any) -> set[str]:
    """Every node, value and initializer name in ``graph`` and its subgraphs."""
    names: set[str] = set()
    for g in _graphs(graph):
        names |= {i.name for i in g.initializer} | {v.name for v in (*g.input, *g.output, *g.value_info)}
        for node in g.node:
            names.update((node.name, *node.input, *node.output))
    return names


def _read(graph: Any) -> set[str]:
    """Every name ``graph`` still needs: its nodes' and its subgraphs' nodes' inputs, and the
    outputs of all of them."""
    names: set[str] = set()
    for g in _graphs(graph):
        names |= {o.name for o in g.output}
        for node in g.node:
            names.update(node.input)
    return names


def rewrite(model: Any, chosen: Iterable[str], cands: Sequence[Candidate] | None = None) -> Any:
    """A copy of ``model`` with the Conv nodes named (by their outputs) computed by Winograd
    F(4x4,3x3); a weight or bias nothing else uses any more is dropped. ``cands``: the model's
    :func:`candidates` when the caller has them (shape inference is not run again)."""
    import onnx

    chosen = set(chosen)
    by_output = {cand.node: cand for cand in (cands if cands is not None else candidates(model))}
    unknown = chosen - set(by_output)
    if unknown:
        raise ValueError(f"not Winograd candidates: {', '.join(sorted(unknown))}")
    taken = _names(model.graph)
    tag = "wino"
    while any(n.startswith(tag) for n in taken):  # new names must not meet the graph's own
        tag += "_"
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    replaced: set[str] = set()
    weights = {i.name: i for i in model.graph.initializer}
    for i, node in enumerate(model.graph.node):
        if node.output[0] in chosen:
            w, b = _weights(weights, node)
            nodes, inits = subgraph(by_output[node.output[0]], w, b, node.input[0], node.output[0], f"{tag}{i}_")
            out.graph.node.extend(nodes)
            out.graph.initializer.extend(inits)
            replaced.update(node.input[1:])
        else:
            out.graph.node.append(node)
    still_used = _read(out.graph)
    keep = [i for i in out.graph.initializer if i.name not in replaced or i.name in still_used]
    del out.graph.initializer[:]
    out.graph.initializer.extend(keep)
    return out


def single_layer(cand: Candidate, winograd: bool, seed: int = 0) -> bytes:
    """A small model around ``cand`` (random weights): a 1x1 convolution and ReLU on each side of
    the layer, which is computed directly or by Winograd, then ReLU. The neighbours keep the
    direct convolutions in ONNX Runtime's blocked layout, so the Winograd variant pays for the
    two layout reorders it costs inside a network (a layer alone would charge them to the direct
    one instead)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    c, k = cand.C, cand.K
    top, left, bottom, right = cand.pads
    p, q = cand.H + top + bottom - 2, cand.W + left + right - 2

    def randn(*shape: int, fan_in: int) -> np.ndarray:
        return (rng.standard_normal(shape) * (2 / fan_in) ** 0.5).astype(np.float32)

    w, b = randn(k, c, 3, 3, fan_in=9 * c), (rng.standard_normal(k) * 0.1).astype(np.float32)
    inits = [numpy_helper.from_array(randn(c, c, 1, 1, fan_in=c), "pre"),
             numpy_helper.from_array(randn(k, k, 1, 1, fan_in=k), "post")]
    nodes = [helper.make_node("Conv", ["x", "pre"], ["a"], name="pre", kernel_shape=[1, 1]),
             helper.make_node("Relu", ["a"], ["ar"], name="pre_relu")]
    if winograd:
        sub, sub_inits = subgraph(cand, w, b, "ar", "l", "w_")
        nodes += sub
        inits += sub_inits
    else:
        inits += [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
        nodes.append(helper.make_node("Conv", ["ar", "w", "b"], ["l"], name="conv", kernel_shape=[3, 3],
                                      pads=[top, left, bottom, right]))
    nodes += [helper.make_node("Relu", ["l"], ["lr"], name="relu"),
              helper.make_node("Conv", ["lr", "post"], ["y"], name="post", kernel_shape=[1, 1])]
    graph = helper.make_graph(nodes, "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [cand.N, c, cand.H, cand.W])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [cand.N, k, p, q])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model.SerializeToString()


def choose(cands: list[Candidate], session: Callable[[bytes], Any],
           compare: Callable[[Callable[[], Any], Callable[[], Any]], Any] | None = None,
           min_speedup: float | None = None, evict_bytes: int | None = None) -> list[Choice]:
    """Measure each distinct candidate shape both ways (``session`` builds an ONNX Runtime session
    from model bytes, with the threads the model will run with), interleaved by the harness, and
    choose Winograd where the lower end of its speedup's interval reaches ``min_speedup``. The
    Winograd layer's output is checked against the direct one's first; a layer that disagrees is
    never chosen."""
    min_speedup = MIN_SPEEDUP if min_speedup is None else min_speedup
    if compare is None:
        from rooftune.bench.measurement import Policy
        from rooftune.bench.timer import compare as harness_compare

        # Inside a network a layer's weights come from memory, not from the cache the previous
        # run left them in: Winograd's transformed weights are 4x the direct ones (36 against 9
        # values per channel pair), which a layer timed warm never pays for. Before every timed
        # call of either side, untimed, a buffer larger than the caches is written
        # (``evict_bytes``, default :func:`evict_size`).
        sweep = np.zeros((evict_bytes or evict_size()) // 8)

        def evict() -> None:
            sweep[::8] += 1.0

        policy = Policy(number=1, budget_s=CHOOSE_BUDGET_S, warmup_s=0.1)

        def compare(fa: Callable[[], Any], fb: Callable[[], Any]) -> Any:
            return harness_compare(fa, fb, label_a="direct", label_b="winograd", policy=policy, before=evict)

    measured: dict[tuple[int, ...], tuple[float, tuple[float, float], bool]] = {}
    out = []
    for cand in cands:
        if cand.key not in measured:
            direct, wino = session(single_layer(cand, False)), session(single_layer(cand, True))
            x = np.random.default_rng(1).standard_normal((cand.N, cand.C, cand.H, cand.W)).astype(np.float32)
            ref, got = direct.run(None, {"x": x})[0], wino.run(None, {"x": x})[0]
            agrees = bool(np.abs(got - ref).max() <= 1e-3 * max(float(np.abs(ref).max()), 1e-30))
            # cast: mypy cannot type a lambda with defaults where a Callable[[], Any] is expected;
            # lambdas still, not functools.partial, so the calls compared are the ones they were
            run_direct = cast(Callable[[], Any], lambda d=direct, x=x: d.run(None, {"x": x}))
            run_wino = cast(Callable[[], Any], lambda s=wino, x=x: s.run(None, {"x": x}))
            c = compare(run_direct, run_wino)
            measured[cand.key] = (float(c.ratio), (float(c.ci[0]), float(c.ci[1])), agrees)
        ratio, ci, agrees = measured[cand.key]
        out.append(Choice(cand, ratio, ci, agrees and ci[0] >= min_speedup))
    return out


def network_speedup(direct: Any, rewritten: Any, session: Callable[[bytes], Any],
                    compare: Callable[[Callable[[], Any], Callable[[], Any]], Any] | None = None) -> tuple[float, tuple[float, float]]:
    """How many times as fast the whole ``rewritten`` model (an ONNX ModelProto) runs as
    ``direct``, with the 95 % interval, both built by ``session`` and fed the same random inputs
    (shapes and dtypes from the graph; a dimension without a value reads 1), interleaved by the
    harness. The layers were chosen one at a time between 1x1 neighbours; inside the network
    their neighbours, caches and memory traffic are others, and layers each faster alone can
    make the network slower together (BENCHMARKS.md has such a case), so the network decides."""
    from onnx import helper

    if compare is None:
        from rooftune.bench.measurement import Policy
        from rooftune.bench.timer import compare as harness_compare

        policy = Policy(number=1, budget_s=NETWORK_BUDGET_S, warmup_s=0.2)

        def compare(fa: Callable[[], Any], fb: Callable[[], Any]) -> Any:
            return harness_compare(fa, fb, label_a="direct", label_b="winograd", policy=policy)

    inits = {i.name for i in direct.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for inp in direct.graph.input:
        if inp.name in inits:
            continue
        t = inp.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in t.shape.dim)
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        feeds[inp.name] = (rng.standard_normal(shape).astype(dtype) if np.issubdtype(dtype, np.floating)
                           else np.zeros(shape, dtype=dtype))
    a, b = session(direct.SerializeToString()), session(rewritten.SerializeToString())
    c = compare(cast(Callable[[], Any], lambda: a.run(None, feeds)), cast(Callable[[], Any], lambda: b.run(None, feeds)))
    return float(c.ratio), (float(c.ci[0]), float(c.ci[1]))


def evict_size() -> int:
    """Bytes written before each timed run of :func:`choose`: twice all the machine's data caches
    together (sysfs), at least 64 MiB and at most 1 GiB."""
    from rooftune.platform.sysfs import read_caches

    try:
        total = sum(c.size_bytes * max(1, len(c.instances)) for c in read_caches())
    except (OSError, ValueError):
        total = 0
    return int(min(max(2 * total, 64 * 2**20), 2**30))


def ort_session_factory(threads: int) -> Callable[[bytes], Any]:
    """Builds ONNX Runtime sessions (CPU provider, all graph optimizations, one inter-op thread,
    spinning off so that an idle side takes no core from the side being timed) with ``threads``
    intra-op threads."""
    import onnxruntime as ort

    def make(model: bytes) -> Any:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])

    return make


def ov_session_factory(threads: int) -> Callable[[bytes], Any]:
    """Builds OpenVINO CPU plugin requests (fp32, LATENCY hint, one stream) with ``threads``
    inference threads from ONNX bytes, answering ``run(None, {"x": x})`` as an ONNX Runtime
    session does."""
    import openvino as ov

    core = ov.Core()

    class Request:
        def __init__(self, model: bytes) -> None:
            compiled = core.compile_model(core.read_model(model), "CPU", {
                "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32",
                "INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1})
            self.output = compiled.output(0)
            self.request = compiled.create_infer_request()

        def run(self, _names: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
            return [np.array(self.request.infer(list(feeds.values()))[self.output], copy=True)]

    return Request


def basic_optimized(src: Path, dst: Path) -> Path:
    """ONNX Runtime's basic graph optimizations (constant folding, batch norm folded into the
    convolutions) saved as a standard ONNX file, so the convolutions the rewrite sees carry their
    final weights."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(dst)
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    return dst

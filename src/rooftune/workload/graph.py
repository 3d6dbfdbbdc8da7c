"""The op graph of a workload: every operator with concrete shapes and dtypes, and a runner that
times each of them inside a real run of the model.

Capture is ``torch.export`` (ATen ops before decomposition: ``conv2d``, ``linear``, ``lstm``,
``scaled_dot_product_attention`` ... each with its arguments by schema name). When export fails
(data-dependent control flow, unsupported Python), capture falls back to forward hooks on the leaf
modules, and the graph says so in ``capture_note``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import operator
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx, nn

from rooftune.errors import one_line
from rooftune.workload.models import Workload

Clock = Callable[[], float]

#: Modules timed and costed as one op, though they have children or run many kernels inside.
WHOLE_MODULES = (nn.LSTM, nn.GRU, nn.RNN, nn.MultiheadAttention)
#: Graph nodes that check shapes or values and compute nothing.
_ASSERT_PREFIXES = ("aten._assert", "aten.sym_constrain", "aten._functional_assert", "aten._assert_tensor_metadata")


@dataclass(frozen=True)
class TensorMeta:
    """Shape and dtype of one tensor; sizes in bytes use the dtype's itemsize. ``contiguous``: laid
    out row-major without gaps (a transposed tensor is not: reshaping it copies)."""

    shape: tuple[int, ...]
    dtype: str
    itemsize: int
    contiguous: bool = True

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorMeta:
        try:
            contiguous = bool(t.is_contiguous())
        except (RuntimeError, TypeError, ValueError):  # a tensor subclass or symbolic shape that cannot say
            contiguous = True
        return cls(tuple(int(d) for d in t.shape), str(t.dtype).removeprefix("torch."), t.element_size(), contiguous)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    def to_dict(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype}


@dataclass(frozen=True)
class OpNode:
    """One operator call: ``target`` is the ATen op (``aten.conv2d``); ``args`` its arguments by
    schema name, tensors as :class:`TensorMeta`; ``module`` the innermost module it ran in."""

    index: int
    name: str
    target: str
    module: str
    module_type: str
    args: dict[str, Any]
    outputs: tuple[TensorMeta, ...]
    producers: tuple[int, ...] = ()
    #: The part of a training step that ran it (forward, backward, optimizer); "" for an op of a
    #: forward pass captured alone.
    phase: str = ""
    #: FLOPs counted when it ran, by torch.utils.flop_counter's formulas (a training step's ops:
    #: :mod:`rooftune.workload.step_graph`); None where the cost formulas count them.
    flops: float | None = None

    def tensor(self, name: str) -> TensorMeta | None:
        v = self.args.get(name)
        return v if isinstance(v, TensorMeta) else None

    def tensors(self) -> list[TensorMeta]:
        """Every input tensor, in argument order (lists of tensors flattened)."""
        out: list[TensorMeta] = []
        for v in self.args.values():
            if isinstance(v, TensorMeta):
                out.append(v)
            elif isinstance(v, (list, tuple)):
                out.extend(x for x in v if isinstance(x, TensorMeta))
        return out

    @property
    def op(self) -> str:
        """The op without namespace: ``conv2d``."""
        return self.target.rsplit(".", 1)[-1]

    def shapes(self) -> dict[str, Any]:
        return {
            "inputs": [list(t.shape) for t in self.tensors()],
            "outputs": [list(t.shape) for t in self.outputs],
        }


@dataclass(frozen=True)
class OpGraph:
    """The operators of one workload in execution order, how they were captured, and a runner.

    ``run_timed(clock)`` runs the model once, op by op, and returns one duration per op.
    """

    workload: str
    ops: tuple[OpNode, ...]
    capture: str
    capture_note: str = ""
    run_timed: Callable[[Clock], list[float]] = field(default=lambda clock: [], compare=False, repr=False)

    @property
    def depth(self) -> int:
        """Length of the longest producer chain (1 for a graph without edges)."""
        level: dict[int, int] = {}
        for op in self.ops:
            level[op.index] = 1 + max((level.get(p, 0) for p in op.producers), default=0)
        return max(level.values(), default=0)


def _meta(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return TensorMeta.of(v)
    if isinstance(v, (list, tuple)):
        return [_meta(x) for x in v]
    return v


def _node_value(a: Any) -> Any:
    if isinstance(a, fx.Node):
        return _meta(a.meta.get("val"))
    if isinstance(a, (list, tuple)):
        return [_node_value(x) for x in a]
    if isinstance(a, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return str(a)
    return a


def _schema_args(target: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    schema = getattr(target, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else [f"arg{i}" for i in range(len(args))]
    out = {names[i] if i < len(names) else f"arg{i}": _node_value(a) for i, a in enumerate(args)}
    out.update({k: _node_value(v) for k, v in kwargs.items()})
    if schema is not None:  # arguments left at their defaults are absent from the node
        for a in schema.arguments:
            if a.name not in out and a.has_default_value():
                out[a.name] = _node_value(a.default_value)
    return out


def _target_name(target: Any) -> str:
    name = str(target)  # "aten.conv2d.default"
    if name.startswith("aten."):
        parts = name.split(".")
        return ".".join(parts[:2])
    return name


def _module_of(node: fx.Node) -> tuple[str, str]:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", ""
    path, cls = list(stack.values())[-1]
    cls_name = cls.__name__ if isinstance(cls, type) else str(cls).rsplit(".", 1)[-1]
    path = str(path).replace("L['self'].", "").replace("L['self']", "")
    return path, cls_name


def _outputs(node: fx.Node) -> tuple[TensorMeta, ...]:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return (TensorMeta.of(val),)
    if isinstance(val, (list, tuple)):
        # Empty tensors beside a real one are no output: the saved mean and variance an inference
        # batch norm returns under torch 2.4's export (_native_batch_norm_legit_no_training).
        tensors = [v for v in val if isinstance(v, torch.Tensor)]
        return tuple(TensorMeta.of(v) for v in ([v for v in tensors if v.numel()] or tensors))
    return ()


class DeviceTimes:
    """The time each op of a run spends on a CUDA device's stream: an event recorded before and after
    each op's launch on the device's current stream, read once the run is done (the host's clock
    would time the launch, not the kernels). Where the device waits on the host, the op's time
    includes its launch, as a CPU op's includes its dispatch. Used when the clock given to
    ``run_timed`` names a device (its ``cuda_device`` attribute:
    :func:`rooftune.machine.gpu.cuda_clock`)."""

    def __init__(self, n: int, device: int) -> None:
        self.device = device
        self.pairs: list[tuple[Any, Any] | None] = [None] * n

    def _event(self) -> Any:
        e = torch.cuda.Event(enable_timing=True)
        e.record(torch.cuda.current_stream(self.device))
        return e

    def start(self, i: int) -> None:
        """Op ``i`` starts (ops numbered in the order they run: the graph's)."""
        if i < len(self.pairs):  # a run of more ops than captured fails after it, by its count
            self.pairs[i] = (self._event(), None)

    def stop(self, i: int) -> None:
        pair = self.pairs[i] if i < len(self.pairs) else None
        if pair is not None:
            self.pairs[i] = (pair[0], self._event())

    def begin(self) -> Any:
        """A start event now, for an op whose number is known only when it ends (module hooks
        number ops in the order they finish)."""
        return self._event()

    def end(self, i: int, begun: Any) -> None:
        if i < len(self.pairs):
            self.pairs[i] = (begun, self._event())

    def durations(self) -> list[float]:
        torch.cuda.synchronize(self.device)
        out = []
        for pair in self.pairs:
            if pair is None or pair[1] is None:
                raise RuntimeError("an op's events were not recorded in this run")
            out.append(pair[0].elapsed_time(pair[1]) / 1e3)
        return out


def device_times(clock: Clock, n: int) -> DeviceTimes | None:
    """Fresh DeviceTimes of ``n`` ops for a clock that names a CUDA device, else None."""
    device = getattr(clock, "cuda_device", None)
    return None if device is None else DeviceTimes(n, device)


class _TimedInterpreter(fx.Interpreter):
    """Runs the exported graph node by node, timing each op's call and nothing else."""

    def __init__(self, gm: fx.GraphModule, timed: dict[fx.Node, int]) -> None:
        super().__init__(gm, garbage_collect_values=True)
        self.timed = timed
        self.clock: Clock = time.perf_counter
        self.durations: list[float] = [0.0] * len(timed)
        self.events: DeviceTimes | None = None
        self._index = -1

    def run_node(self, n: fx.Node) -> Any:
        self._index = self.timed.get(n, -1)
        return super().run_node(n)

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        i = self._index
        if i < 0:
            return target(*args, **kwargs)
        if self.events is not None:
            self.events.start(i)
            out = target(*args, **kwargs)
            self.events.stop(i)
            return out
        clock = self.clock
        t0 = clock()
        out = target(*args, **kwargs)
        self.durations[i] = clock() - t0
        return out


def capture_export(wl: Workload) -> OpGraph:
    """The op graph through torch.export; raises whatever export raises."""
    ep = wl.exported if wl.exported is not None else torch.export.export(wl.module, wl.inputs)
    gm = ep.module()
    ops: list[OpNode] = []
    timed: dict[fx.Node, int] = {}
    alias: dict[fx.Node, int] = {}  # getitem nodes -> the op whose tuple they index
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is operator.getitem and isinstance(node.args[0], fx.Node):
            if node.args[0] in timed:
                alias[node] = timed[node.args[0]]
            elif node.args[0] in alias:
                alias[node] = alias[node.args[0]]
            continue
        name = _target_name(node.target)
        if name.startswith(_ASSERT_PREFIXES):
            continue
        producers = sorted(
            {timed[a] if a in timed else alias[a] for a in node.all_input_nodes if a in timed or a in alias}
        )
        path, cls = _module_of(node)
        idx = len(ops)
        ops.append(
            OpNode(idx, node.name, name, path, cls, _schema_args(node.target, node.args, node.kwargs), _outputs(node), tuple(producers))
        )
        timed[node] = idx
    interp = _TimedInterpreter(gm, timed)
    flat = list(wl.inputs)

    def run_timed(clock: Clock) -> list[float]:
        interp.clock = clock
        interp.durations = [0.0] * len(ops)
        interp.events = device_times(clock, len(ops))
        interp.run(*flat)
        return interp.events.durations() if interp.events is not None else interp.durations

    return OpGraph(wl.name, tuple(ops), "torch.export", "", run_timed)


# ---------------------------------------------------------------------------------------------
# Fallback: forward hooks on leaf modules


def _module_args(m: nn.Module, inputs: tuple[Any, ...]) -> tuple[str, dict[str, Any]]:
    """The ATen op a leaf module runs and its arguments, so the same cost formulas apply."""
    x = _meta(inputs[0]) if inputs else None
    p = lambda t: TensorMeta.of(t) if isinstance(t, torch.Tensor) else None  # noqa: E731
    if isinstance(m, nn.modules.conv._ConvNd):
        return "aten.convolution", {
            "input": x, "weight": p(m.weight), "bias": p(m.bias), "stride": list(m.stride),
            "padding": m.padding if isinstance(m.padding, str) else list(m.padding),
            "dilation": list(m.dilation), "transposed": m.transposed,
            "output_padding": list(m.output_padding), "groups": m.groups,
        }
    if isinstance(m, nn.Linear):
        return "aten.linear", {"input": x, "weight": p(m.weight), "bias": p(m.bias)}
    if isinstance(m, nn.modules.batchnorm._BatchNorm):
        return "aten.batch_norm", {"input": x, "weight": p(m.weight), "bias": p(m.bias), "running_mean": p(m.running_mean), "running_var": p(m.running_var)}
    if isinstance(m, nn.LayerNorm):
        return "aten.layer_norm", {"input": x, "normalized_shape": list(m.normalized_shape), "weight": p(m.weight), "bias": p(m.bias)}
    if isinstance(m, nn.Embedding):
        return "aten.embedding", {"weight": p(m.weight), "indices": x}
    if isinstance(m, (nn.LSTM, nn.GRU, nn.RNN)):
        op = {nn.LSTM: "aten.lstm", nn.GRU: "aten.gru"}.get(type(m), "aten.rnn_tanh")
        params = [TensorMeta.of(t) for t in m._flat_weights if isinstance(t, torch.Tensor)]
        return op, {
            "input": x, "params": params, "has_biases": m.bias, "num_layers": m.num_layers,
            "dropout": m.dropout, "train": False, "bidirectional": m.bidirectional, "batch_first": m.batch_first,
        }
    if isinstance(m, nn.MultiheadAttention):
        return "nn.MultiheadAttention", {
            "query": x, "key": _meta(inputs[1]) if len(inputs) > 1 else x, "value": _meta(inputs[2]) if len(inputs) > 2 else x,
            "embed_dim": m.embed_dim, "num_heads": m.num_heads, "batch_first": m.batch_first,
        }
    simple = {
        nn.ReLU: "aten.relu", nn.ReLU6: "aten.hardtanh", nn.Hardtanh: "aten.hardtanh", nn.GELU: "aten.gelu",
        nn.SiLU: "aten.silu", nn.Sigmoid: "aten.sigmoid", nn.Tanh: "aten.tanh", nn.Hardswish: "aten.hardswish",
        nn.Hardsigmoid: "aten.hardsigmoid", nn.LeakyReLU: "aten.leaky_relu", nn.Softmax: "aten.softmax",
        nn.Dropout: "aten.dropout", nn.Flatten: "aten.flatten", nn.Identity: "aten.alias",
    }
    for cls, op in simple.items():
        if type(m) is cls:
            return op, {"input": x}
    pools = {
        nn.MaxPool2d: "aten.max_pool2d", nn.AvgPool2d: "aten.avg_pool2d",
        nn.AdaptiveAvgPool2d: "aten.adaptive_avg_pool2d", nn.AdaptiveMaxPool2d: "aten.adaptive_max_pool2d",
    }
    for cls, op in pools.items():
        if isinstance(m, cls):
            args: dict[str, Any] = {"input": x}
            for attr in ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "output_size"):
                if hasattr(m, attr):
                    args[attr] = getattr(m, attr)
            return op, args
    return f"module.{type(m).__name__}", {f"arg{i}": _meta(a) for i, a in enumerate(inputs)}


def _leaf_modules(root: nn.Module) -> list[tuple[str, nn.Module]]:
    out: list[tuple[str, nn.Module]] = []

    def visit(prefix: str, m: nn.Module) -> None:
        children = list(m.named_children())
        if isinstance(m, WHOLE_MODULES) or not children:
            if prefix:  # the root itself is never an op of its own
                out.append((prefix, m))
            return
        for name, child in children:
            visit(f"{prefix}.{name}" if prefix else name, child)

    visit("", root)
    return out


def capture_hooks(wl: Workload, note: str) -> OpGraph:
    """The op graph from forward hooks on the leaf modules (functional ops are not seen)."""
    leaves = _leaf_modules(wl.module)
    state: dict[str, Any] = {"clock": time.perf_counter, "durations": [], "starts": {}, "record": None,
                             "events": None}

    def pre(path: str) -> Callable[..., None]:
        def hook(m: nn.Module, inputs: tuple[Any, ...]) -> None:
            # on a device, an event on its stream; the host's clock is not read (it waits for it)
            events = state["events"]
            state["starts"][path] = events.begin() if events is not None else state["clock"]()

        return hook

    def post(path: str) -> Callable[..., None]:
        def hook(m: nn.Module, inputs: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
            events = state["events"]
            begun = state["starts"].pop(path)
            if events is not None:  # ops are numbered in the order they finish, as the record has them
                events.end(len(state["durations"]), begun)
                state["durations"].append(0.0)
            else:
                state["durations"].append(state["clock"]() - begun)
            if state["record"] is not None:  # keyword arguments follow the positional ones, in order
                state["record"].append((path, m, tuple(inputs) + tuple(kwargs.values()), output))

        return hook

    handles = []
    for path, m in leaves:
        handles.append(m.register_forward_pre_hook(pre(path)))
        handles.append(m.register_forward_hook(post(path), with_kwargs=True))
    state["record"] = []
    with torch.no_grad():
        wl.module(*wl.inputs)
    ops: list[OpNode] = []
    for i, (path, m, inputs, output) in enumerate(state["record"]):
        target, args = _module_args(m, inputs)
        outs = output if isinstance(output, (tuple, list)) else (output,)
        flat = [o for o in outs if isinstance(o, torch.Tensor)]
        if isinstance(m, (nn.LSTM, nn.GRU, nn.RNN)) and isinstance(output, tuple):
            flat = [output[0]] + (list(output[1]) if isinstance(output[1], tuple) else [output[1]])
        ops.append(OpNode(i, path or type(m).__name__, target, path, type(m).__name__, args, tuple(TensorMeta.of(o) for o in flat)))
    state["record"] = None
    n_ops = len(ops)

    def run_timed(clock: Clock) -> list[float]:
        state["clock"] = clock
        state["durations"] = []
        state["events"] = events = device_times(clock, n_ops)
        try:
            with torch.no_grad():
                wl.module(*wl.inputs)
        finally:
            # the hooks stay on the module: the end-to-end runs between these must not read the
            # device's clock (a wait per leaf) or record events
            state["clock"], state["events"] = time.perf_counter, None
        d = state["durations"]
        if len(d) != n_ops:
            raise RuntimeError(f"the model ran {len(d)} leaf modules this time, {n_ops} when captured")
        return events.durations() if events is not None else d

    return OpGraph(wl.name, tuple(ops), "module hooks", note, run_timed)


@contextlib.contextmanager
def quiet_torch() -> Iterator[None]:
    """Keep torch quiet inside: its loggers, warnings and prints (a failing export's partial graph,
    a package's deprecation notes at import); the caller says what matters."""
    logger = logging.getLogger("torch")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def capture(wl: Workload) -> OpGraph:
    """The op graph of ``wl``: torch.export when it can, else module hooks with the reason why."""
    try:
        with quiet_torch():
            return capture_export(wl)
    except Exception as exc:  # export raises many kinds of errors; every one means "fall back"
        note = f"torch.export failed ({type(exc).__name__}: {one_line(exc, 200)}); captured leaf modules with hooks, functional ops are not seen"
        return capture_hooks(wl, note)

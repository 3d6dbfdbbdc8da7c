"""The op graph of a TensorFlow workload, and each op's time inside a real run.

TensorFlow runs the frozen graph after its own rewrites (Grappler's constant folding and
remapping, oneDNN's fused kernels: ``_MklNativeConv2D`` with its ``fused_ops``, ``_FusedMatMul``),
so the ops listed are the ones the executor runs: the partition graph of a traced step
(``RunOptions.output_partition_graphs``). Their shapes are the step stats' output descriptions,
and each op's time is its step-stats interval (the executor's own per-kernel timing, as TF's
profiler reads it). The inter-op pool is one thread while timing, so the ops run one after
another and their times add up to the step. A while loop's body (a Keras recurrent layer's steps)
is listed once per iteration it ran, each entry with that iteration's time.
"""

from __future__ import annotations

from typing import Any

import torch

from rooftune.workload.graph import Clock, OpGraph, OpNode, TensorMeta
from rooftune.workload.keras_models import KerasWorkload

#: Step-stats entries that are no op of the model (the executor's source node).
_NOT_OPS = frozenset({"_SOURCE"})
#: Attributes kept as an op's arguments (those the cost formulas and a reader need).
_ATTRS = ("strides", "padding", "data_format", "dilations", "ksize", "fused_ops", "transpose_a", "transpose_b",
          "adj_x", "adj_y", "keep_dims", "epsilon")
_DTYPES = {1: ("float32", 4), 2: ("float64", 8), 3: ("int32", 4), 9: ("int64", 8), 14: ("bfloat16", 2),
           19: ("float16", 2), 10: ("bool", 1), 4: ("uint8", 1), 6: ("int8", 1)}


def _attr(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "list":
        lst = value.list
        for f in ("i", "f", "s", "b"):
            items = list(getattr(lst, f))
            if items:
                return [x.decode() if isinstance(x, bytes) else x for x in items]
        return []
    v = getattr(value, kind) if kind else None
    return v.decode() if isinstance(v, bytes) else v


def _meta(desc: Any) -> TensorMeta | None:
    dims = [int(d.size) for d in desc.shape.dim]
    if desc.shape.unknown_rank or any(d < 0 for d in dims):
        return None
    name, size = _DTYPES.get(int(desc.dtype), (f"dtype{int(desc.dtype)}", 4))
    return TensorMeta(tuple(dims), name, size)


def _traced(runner: Any, session: Any, feed: dict[str, Any], partitions: bool = False) -> Any:
    import tensorflow as tf

    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE,
                                      output_partition_graphs=partitions)
    metadata = tf.compat.v1.RunMetadata()
    runner.run(session, feed, options=options, run_metadata=metadata)
    return metadata


def _node_times(metadata: Any) -> dict[str, list[float]]:
    """Seconds from each node's start to the end of its outputs' processing, by node name, one per
    time it ran in the step, in the order it ran (a while loop's body runs once per iteration)."""
    runs: dict[str, list[tuple[int, float]]] = {}
    for dev in metadata.step_stats.dev_stats:
        for ns in dev.node_stats:
            span = ns.all_end_rel_nanos or ns.all_end_rel_micros * 1000
            runs.setdefault(ns.node_name, []).append((ns.all_start_nanos or ns.all_start_micros * 1000, span / 1e9))
    return {name: [t for _, t in sorted(rs)] for name, rs in runs.items()}


def capture_tf(wl: KerasWorkload, threads: int | None = None) -> OpGraph:
    """The ops a step of ``wl`` runs, in the order they ran, with shapes; and a runner timing each
    (``threads`` intra-op threads, torch's count when None; one inter-op thread)."""
    runner = wl.module
    intra = threads or torch.get_num_threads()
    runner.threads = (intra, 1)  # the end-to-end runs use the same session as the timed ones
    session = runner.session(intra, 1)
    feed = runner.feed(wl.inputs)
    for _ in range(2):  # the first steps build oneDNN's primitives and Grappler's rewrite
        runner.run(session, feed)
    md = _traced(runner, session, feed, partitions=True)
    nodes = {n.name: n for g in md.partition_graphs for n in g.node}
    stats = sorted((ns for d in md.step_stats.dev_stats for ns in d.node_stats if ns.node_name not in _NOT_OPS),
                   key=lambda ns: ns.all_start_nanos or ns.all_start_micros * 1000)
    outputs: dict[str, list[TensorMeta | None]] = {}
    for ns in stats:
        outs: list[TensorMeta | None] = []
        for o in sorted(ns.output, key=lambda o: o.slot):
            while len(outs) < o.slot:
                outs.append(None)
            outs.append(_meta(o.tensor_description))
        outputs[ns.node_name] = outs
    feeds = {name.split(":")[0]: TensorMeta(tuple(int(d) for d in x.shape), str(x.dtype).removeprefix("torch."),
                                            x.element_size()) for name, x in zip(runner.input_names, wl.inputs, strict=True)}
    ops: list[OpNode] = []
    index: dict[str, int] = {}
    for ns in stats:
        node = nodes.get(ns.node_name)
        op_type = node.op if node is not None else ns.timeline_label.split("=")[-1].split("(")[0].strip() or "unknown"
        args: dict[str, Any] = {}
        producers = set()
        for i, ref in enumerate(node.input if node is not None else []):
            if ref.startswith("^"):
                continue
            src, _, slot = ref.partition(":")
            slot_i = int(slot) if slot.isdigit() else 0
            outs = outputs.get(src) or []
            meta = outs[slot_i] if slot_i < len(outs) else None
            if meta is None and src.startswith("_arg_"):
                meta = next((m for k, m in feeds.items() if src.startswith(f"_arg_{k}")), None)
            args[f"x{i}"] = meta
            if src in index:
                producers.add(index[src])
        if node is not None:
            for k in _ATTRS:
                if k in node.attr:
                    args[k] = _attr(node.attr[k])
        outs = tuple(m for m in outputs.get(ns.node_name, []) if m is not None)
        scope = ns.node_name.rsplit("/", 1)[0] if "/" in ns.node_name else ""
        index[ns.node_name] = len(ops)
        ops.append(OpNode(len(ops), ns.node_name, f"tf.{op_type}", scope, op_type, args, outs, tuple(sorted(producers))))
    # an op listed once per iteration of its loop gets each iteration's time, in order: each
    # listing's name and which occurrence of that name it is
    seen: dict[str, int] = {}
    listed = []
    for op in ops:
        listed.append((op.name, seen.get(op.name, 0)))
        seen[op.name] = listed[-1][1] + 1

    def run_timed(clock: Clock) -> list[float]:
        times = _node_times(_traced(runner, session, feed))
        return [ts[k] if k < len(ts := times.get(n, [])) else 0.0 for n, k in listed]

    return OpGraph(wl.name, tuple(ops), "tensorflow step stats", "", run_timed)

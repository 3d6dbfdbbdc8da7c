"""The op graph of a training step: every ATen op the forward pass, the loss, the backward pass and
the optimizer's update dispatch, in the order they run, with concrete shapes and the phase each
belongs to, and a runner that times each of them inside a real step.

torch.export sees the forward pass only; the backward ops exist only once autograd runs them. So a
step is captured at the dispatcher, with a ``TorchDispatchMode`` around a real step, the way
``torch.utils.flop_counter.FlopCounterMode`` counts a step's FLOPs: the same ops, decomposed where
that mode decomposes them, each op's FLOPs taken from that mode's formulas (so the graph's FLOPs
are its FLOPs). Capture runs one step first, untimed, so the optimizer's state exists and every
later step dispatches the same ops.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from rooftune.workload.graph import Clock, OpGraph, OpNode, TensorMeta
from rooftune.workload.models import Workload
from rooftune.workload.training import TrainStep

#: The parts of a step, in the order they run.
PHASES = ("forward", "backward", "optimizer")
#: Queries of a tensor's metadata: no kernel runs, so they are no op of the step (FlopCounterMode
#: skips the same ones).
_METADATA = (
    "sym_is_contiguous", "is_contiguous", "is_strides_like_format", "is_non_overlapping_and_dense", "size",
    "sym_size", "stride", "sym_stride", "storage_offset", "sym_storage_offset", "numel", "sym_numel", "dim",
    "layout", "device",
    # the profiler's markers around optimizer.step and zero_grad: bookkeeping, not work on tensors
    "_record_function_enter", "_record_function_enter_new", "_record_function_exit",
)


def _flop_registry() -> dict[Any, Any]:
    from torch.utils.flop_counter import FlopCounterMode

    return FlopCounterMode(display=False).flop_registry


def _named(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The op's arguments by schema name, tensors as TensorMeta (lists of them as lists)."""

    def meta(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return TensorMeta.of(v)
        if isinstance(v, (list, tuple)):
            return [meta(x) for x in v]
        if isinstance(v, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
            return str(v)
        return v

    names = [a.name for a in func._schema.arguments]
    out = {names[i] if i < len(names) else f"arg{i}": meta(a) for i, a in enumerate(args)}
    out.update({k: meta(v) for k, v in kwargs.items()})
    return out


class _StepMode(TorchDispatchMode):
    """Runs every op of a step as FlopCounterMode would, and either records it (``record`` not
    None: its node) or times it (the op's duration by ``clock`` at its number in the run)."""

    def __init__(self, clock: Clock, record: list[dict[str, Any]] | None, registry: dict[Any, Any],
                 tracker: Any = None) -> None:
        super().__init__()
        self.clock = clock
        self.record = record
        self.registry = registry
        self.tracker = tracker
        self.phase = PHASES[0]
        self.durations: list[float] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = func._schema.name.split("::", 1)[-1]
        if name in _METADATA or isinstance(func, torch._ops.HigherOrderOperator):
            return func(*args, **kwargs)
        if func not in self.registry and func is not torch.ops.prim.device.default:
            with self:  # a composite op runs as its parts, each recorded: FlopCounterMode counts them so
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        clock = self.clock
        t0 = clock()
        out = func(*args, **kwargs)
        self.durations.append(clock() - t0)
        if self.record is not None:
            self.record.append(self._node(func, args, kwargs, out))
        return out

    def _node(self, func: Any, args: Any, kwargs: dict[str, Any], out: Any) -> dict[str, Any]:
        packet = func._overloadpacket
        flops = None
        if packet in self.registry:
            flops = float(self.registry[packet](*args, **kwargs, out_val=out))
        parents = sorted(self.tracker.parents - {"Global"}, key=lambda p: (p.count("."), p)) if self.tracker else []
        return {"target": f"aten.{packet.__name__}", "overload": str(func), "args": _named(func, args, kwargs),
                "outputs": tuple(TensorMeta.of(t) for t in tree_leaves(out) if isinstance(t, torch.Tensor)),
                "flops": flops, "phase": self.phase, "module": parents[-1] if parents else ""}


def run_phases(step: TrainStep, clock: Clock, mode: _StepMode | None = None) -> tuple[float, float, float]:
    """One training step, the time of each of its phases by ``clock`` (forward with the loss,
    backward, the optimizer's update with zero_grad); under ``mode`` where given."""
    enter = mode if mode is not None else _nothing()
    with enter:
        t0 = clock()
        if mode is not None:
            mode.phase = "forward"
        loss = step.forward()
        t1 = clock()
        if mode is not None:
            mode.phase = "backward"
        step.backward(loss)
        t2 = clock()
        if mode is not None:
            mode.phase = "optimizer"
        step.update()
        t3 = clock()
    return t1 - t0, t2 - t1, t3 - t2


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def capture_step(wl: Workload, step: TrainStep | None = None) -> tuple[OpGraph, TrainStep]:
    """The op graph of one training step of ``wl`` (its ``train`` spec, else the default), and the
    step it runs (``step`` where given). Each op's ``phase`` says which part of the step ran it and
    ``flops`` is FlopCounterMode's count for it (None where that mode counts nothing)."""
    from torch.utils.module_tracker import ModuleTracker

    step = step if step is not None else wl.train_step()
    registry = _flop_registry()
    run_phases(step, time.perf_counter)  # the optimizer's state made: later steps dispatch the same ops
    record: list[dict[str, Any]] = []
    types = {name: type(m).__name__ for name, m in step.module.named_modules()}
    root = type(step.module).__name__
    with ModuleTracker() as tracker:
        run_phases(step, time.perf_counter, _StepMode(time.perf_counter, record, registry, tracker))
    ops = []
    for i, r in enumerate(record):
        # the tracker names modules from the root's class ("Sequential.0"); the graph, by path ("0")
        module = r["module"].removeprefix(root).removeprefix(".") if r["module"] != root else ""
        ops.append(OpNode(i, f"{r['phase']}.{i}", r["target"], module, types.get(module, ""), r["args"], r["outputs"],
                          phase=r["phase"], flops=r["flops"]))
    n = len(ops)
    mode = _StepMode(time.perf_counter, None, registry)

    def run_timed(clock: Clock) -> list[float]:
        mode.clock = clock
        mode.durations = []
        run_phases(step, clock, mode)
        d = mode.durations
        if len(d) != n:
            raise RuntimeError(f"the step ran {len(d)} ops this time, {n} when captured")
        return d

    return OpGraph(wl.name, tuple(ops), "dispatch (training step)", "", run_timed), step


def step_flops(step: TrainStep) -> float:
    """FLOPs of one step as torch.utils.flop_counter.FlopCounterMode counts them."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        step.step()
    return float(counter.get_total_flops())


def timed_phases(step: TrainStep, clock: Clock, into: list[tuple[float, float, float]]) -> Callable[[], None]:
    """A callable running one plain step that appends its phases' times to ``into``: the whole run
    an analysis times, its split read from the same runs."""

    def run() -> None:
        into.append(run_phases(step, clock))

    return run

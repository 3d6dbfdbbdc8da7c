"""`rooftune analyze`: time every op of a model inside real runs and place it on the roofline.

Per analysis point (one thread count, one batch):

    workload  = load_workload(model, batch)                  # runs once: bad input fails here
    graph     = capture(workload)                            # torch.export, else module hooks
    costs     = FLOPs and compulsory bytes of every op
    whole, total, parts = measure_parts(graph.run_timed, reference=workload)   # interleaved
    each op: median time -> placement on the ceilings of this thread count (see placement.py)
    model:   end-to-end = median(whole); ops sum = median over runs of the run's op-time sum;
             accounting ratio = median over runs of (op-time sum / end-to-end time of the run
             measured next to it), with the exact 95 % CI of that median;
             unattributed = end-to-end - ops sum;
             lower bound = sum of op lower bounds; efficiency = lower bound / end-to-end

The sum of the per-op medians (the op table's total) is reported too; on a noisy machine it is
lower than the median run's sum, because each run's noise lands in different ops and the per-op
median discards it.

A training workload (``wl.train``) is analysed the same way over one training step: the graph is
the step's ops captured at the dispatcher (forward, backward, optimizer:
:mod:`rooftune.workload.step_graph`), the whole is a plain step that reads the clock between its
phases, and the analysis adds the median time of each phase (``phases_s``).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from rooftune.analysis.findings import lower_precisions, reason
from rooftune.analysis.placement import Roofs, place
from rooftune.analysis.result import Analysis, OpResult, write_csv
from rooftune.bench import Policy, measure_parts, stats
from rooftune.costs import cost_of, formula_view
from rooftune.errors import InvalidArgument, thread_counts
from rooftune.units import threads_of

if TYPE_CHECKING:
    from rooftune.machine import Ceilings
    from rooftune.machine.gpu import GpuCeilings

#: Default timing budget of one analysis point (seconds): resnet50 at batch 1 on 2 cores gets
#: ~60 interleaved runs, enough for a per-op median within a few percent.
DEFAULT_BUDGET_S = 10.0
#: Runs before samples count: first runs pay for allocations, oneDNN primitive creation, page faults.
WARMUP_S = 1.0
#: ... but never more than this share of the budget, so a small budget still gets samples.
WARMUP_SHARE = 0.2
#: Per-op medians need more samples than the stop rule on the total would take alone.
MIN_RUNS = 10
#: A training step's analysis: fewer runs suffice, each being a whole step (forward, backward and
#: update) of many ops, and a large model's step takes seconds.
MIN_TRAIN_RUNS = 5
#: ... and no warm-up run: the capture has just run two steps (the optimizer's state made, then
#: the recorded step), so the step's allocations, caches and oneDNN primitives are warm, and one
#: more step of a large model costs seconds.
TRAIN_WARMUP_S = 0.0
#: On a CUDA device, op times that add up to more than this share of the run mean the device
#: waited for the host's launches (resnet50 at batch 1 on an H200: 149 %; at batch 64: 103 %).
GPU_LAUNCH_BOUND = 1.1

Progress = Callable[[str, int, int], None]

# Public here as well as in rooftune.analysis.result: the API reference (docs/api.md) documents this
# module, and a reader of analyze() finds the Analysis it returns, its OpResult and write_csv beside it.
__all__ = ["Analysis", "OpResult", "analyze", "analyze_workload", "on_cuda", "write_csv"]


def _dtype_of(op: Any) -> str:
    ts = op.tensors() or list(op.outputs)
    return ts[0].dtype if ts else "float32"


def check_budget(budget_s: float) -> float:
    if not isinstance(budget_s, (int, float)) or not math.isfinite(budget_s) or budget_s <= 0:
        raise InvalidArgument("budget", budget_s, "allowed a positive number of seconds")
    return float(budget_s)


def analyze_workload(
    wl: Any,
    ceilings: Ceilings | GpuCeilings,
    *,
    threads: int,
    budget_s: float = DEFAULT_BUDGET_S,
    progress: Progress | None = None,
    train_step: Any = None,
) -> Analysis:
    """Analyse a loaded :class:`~rooftune.workload.Workload` on ``threads`` threads; with a CUDA
    device's GpuCeilings, the workload is on that device, the whole runs are timed by a clock that
    waits for it and each op by events on its stream (:class:`rooftune.workload.graph.DeviceTimes`).
    A training workload (``wl.train``) runs ``train_step`` where given (its TrainStep, built once:
    building one runs the forward pass), else one built here."""
    from rooftune.machine.gpu import GpuCeilings, cuda_clock

    if isinstance(ceilings, GpuCeilings):
        from rooftune.machine.gpu import on_device

        with on_device(ceilings.platform.index):  # the events' stream and every launch: that device's
            return _analyze(wl, ceilings, threads, budget_s, progress, cuda_clock(ceilings.platform.index))
    return _analyze(wl, ceilings, threads, budget_s, progress, time.perf_counter, train_step)


def _analyze(wl: Any, ceilings: Any, threads: int, budget_s: float, progress: Progress | None,
             clock: Callable[[], float], train_step: Any = None) -> Analysis:
    from rooftune.machine.gpu import GpuCeilings
    from rooftune.workload import capture

    on_gpu = isinstance(ceilings, GpuCeilings)
    # the roofs first: what cannot be read fails before the timing, not after it
    roofs = Roofs.from_gpu(ceilings, threads) if on_gpu else Roofs.from_ceilings(ceilings, threads)
    started = time.perf_counter()
    step = progress or (lambda *_: None)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    training = getattr(wl, "train", None) is not None
    phases: list[tuple[float, float, float]] = []
    try:
        step(f"capture {wl.name}{' (training step)' if training else ''}", 0, 1)
        if training:
            from rooftune.workload.step_graph import capture_step, timed_phases

            graph, train_step = capture_step(wl, train_step)
            reference: Callable[[], Any] = timed_phases(train_step, clock, phases)
            grad: Any = contextlib.nullcontext()
        else:
            graph, reference, grad = capture(wl), wl, torch.no_grad()
        costs = [cost_of(op) for op in graph.ops]
        step(f"time {wl.name} (batch {wl.batch}, {threads_of(threads)})", 0, 1)
        labels = [op.name for op in graph.ops]
        policy = Policy(warmup_s=TRAIN_WARMUP_S if training else min(WARMUP_S, WARMUP_SHARE * budget_s),
                        budget_s=budget_s, min_samples=MIN_TRAIN_RUNS if training else MIN_RUNS, max_samples=100_000)
        with grad:
            whole, total, parts = measure_parts(
                graph.run_timed, labels, reference=reference, label=f"{wl.name} end-to-end",
                params={"batch": wl.batch, "threads": threads, **({"mode": "train"} if training else {})},
                policy=policy, platform_id=ceilings.platform.id, clock=clock, warm=training,
            )
        step(f"time {wl.name} (batch {wl.batch}, {threads_of(threads)})", 1, 1)
    finally:
        torch.set_num_threads(previous)
    counted = phases[whole.method.warmup_samples:] or phases
    phases_s = ({p: stats.median([r[i] for r in counted]) for i, p in enumerate(("forward", "backward", "optimizer"))}
                if training else {})
    # the CPU's hints name `tune --bf16/--int8` by its GEMM roofs; on a device the general rule
    faster = None if on_gpu else lower_precisions(roofs.peak)
    results = []
    for op, cost, m in zip(graph.ops, costs, parts, strict=True):
        dtype = _dtype_of(op)
        t = m.median
        pl = place(cost, t, dtype, roofs)
        results.append(
            OpResult(
                index=op.index, name=op.name, target=op.target, kind=cost.kind, module=op.module,
                shapes=op.shapes(), dtype=dtype, flops=cost.flops, bytes=cost.bytes, formula=cost.formula,
                time_s=t, time_iqr_s=m.iqr, level=pl.level, roof_name=pl.roof_name, roof_flops=pl.roof_flops,
                lower_bound_s=pl.lower_bound_s, efficiency=pl.efficiency, bound=pl.bound,
                headroom_s=pl.headroom_s, reason=reason(formula_view(op), cost.kind, pl.bound, pl.efficiency, pl.level, faster),
                traffic=cost.traffic,
            )
        )
    pair_ratios = [t / w for t, w in zip(total.samples, whole.samples, strict=False) if w > 0]
    warnings = list(roofs.notes)
    tf32 = sorted({r.kind for r in results if r.roof_name == "gemm_tf32" and r.dtype == "float32"})
    if tf32:
        warnings.append(f"fp32 {', '.join(tf32)} ops are placed under the tf32 roof: torch lets them use TF32")
    if on_gpu:
        warnings.append("op times are the device's (events around each op on its stream); the end-to-end time "
                        "is the host's until the device is done, so what they leave unattributed is the host "
                        "between ops")
        ratio = stats.median(pair_ratios) if pair_ratios else math.nan
        if ratio > GPU_LAUNCH_BOUND:
            warnings.append(f"the op times add up to {ratio:.0%} of the run: the device waited for the host, so each "
                            "op's time holds its launch, issued by the interpreter that times it (slower than the "
                            "model's own forward); the run is bound by launches, not by the device")
    if graph.capture_note:
        warnings.append(graph.capture_note)
    warnings += [f"end-to-end: {w}" for w in whole.warnings]
    warnings += [f"sum of ops: {w}" for w in total.warnings if w.startswith("unstable")]
    unknown = [r for r in results if r.flops is None]
    if unknown:
        share = math.fsum(r.time_s for r in unknown) / max(whole.median, 1e-12)
        warnings.append(f"{len(unknown)} ops have no cost formula ({share:.1%} of the time); they count only their dispatch floor")
    return Analysis(
        model=wl.name, workload_kind=wl.kind, batch=wl.batch, threads=threads,
        input_shapes=tuple(wl.input_shapes), capture=graph.capture, capture_note=graph.capture_note,
        platform_id=ceilings.platform.id, end_to_end_s=whole.median, end_to_end_iqr_s=whole.iqr,
        ops_sum_s=total.median, accounting_ratio=stats.median(pair_ratios),
        accounting_ci=stats.median_ci(pair_ratios),
        runs=whole.n, ops=tuple(results),
        roofs={"threads": threads, "peak_flops": roofs.peak, "bandwidth": roofs.bandwidth,
               "capacity_bytes": roofs.capacity, "dispatch_overhead_s": roofs.dispatch_s},
        duration_s=time.perf_counter() - started, warnings=tuple(warnings), ceilings_quick=ceilings.quick,
        device=f"cuda:{ceilings.platform.index} {ceilings.platform.name}" if on_gpu else "cpu",
        train=wl.train.as_dict() if training else None, phases_s=phases_s,
    )


def on_cuda(wl: Any, index: int) -> Any:
    """A copy of the workload on CUDA device ``index`` (its module copied there, its inputs moved;
    the given one is left as it was); a program exported on the CPU is exported again there by the
    capture."""
    import copy
    import dataclasses

    dev = torch.device("cuda", index)
    return dataclasses.replace(wl, module=copy.deepcopy(wl.module).to(dev),
                               inputs=tuple(x.to(dev) for x in wl.inputs), exported=None)


def analyze(
    model: str | Any,
    *,
    batch: int | Sequence[int] | None = None,
    inputs: Sequence[tuple[int, ...]] | None = None,
    options: dict[str, Any] | None = None,
    threads: int | Sequence[int] | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    quick: bool = False,
    ceilings: Ceilings | GpuCeilings | None = None,
    db: str | None = None,
    store: Any = None,
    save: bool = True,
    progress: Progress | None = None,
    device: str | None = None,
    example_inputs: Sequence[Any] | None = None,
    train: bool | Any = None,
) -> list[Analysis]:
    """Analyse ``model`` at every (threads, batch) point given; one point by default.

    ``device`` "cuda" or "cuda:N" runs the model there and places its ops on that device's
    roofline (``rooftune machine --device cuda``, measured now if the store has none); ``threads``
    are then the host's.

    ``model`` is anything :func:`rooftune.workload.load_workload` takes, a loaded Workload, or an
    ``nn.Module`` with its ``example_inputs`` (a tuple of tensors, run as they are). The
    ceilings come from the store (measured now if missing). Each analysis is saved in the store
    with its platform unless ``save`` is False. Several thread counts or batches make a trajectory.

    ``train`` (True or a :class:`rooftune.workload.training.TrainSpec`) analyses a training step
    instead of a forward pass: forward, backward and optimizer ops on the roofline, the step's time
    by phase; the batch defaults to ``TRAIN_BATCH``.
    """
    from rooftune.machine.gpu import GpuCeilings
    from rooftune.platform import current_platform
    from rooftune.platform.gpu import check_cuda, parse_device
    from rooftune.workload.training import train_spec

    budget_s = check_budget(budget_s)
    spec = train_spec(train)
    kind, index = parse_device(device)
    if spec is not None and kind == "cuda":
        raise InvalidArgument("device", device, "cpu with --train (a training step is analysed on the CPU)")
    _check_ceilings(ceilings, kind, index, device)
    if kind == "cuda":
        check_cuda(index or 0, device)
    # cpu ceilings are never GpuCeilings here (refused above): the isinstance only narrows the type
    host = (current_platform() if kind == "cuda" or ceilings is None or isinstance(ceilings, GpuCeilings)
            else ceilings.platform)
    thread_list = thread_counts(threads, host.usable_cores) or (host.usable_cores,)
    batches: list[int | None] = [batch] if batch is None or isinstance(batch, int) else list(batch) or [None]
    loaded = _workloads(model, batches, batch=batch, inputs=inputs, options=options, example_inputs=example_inputs,
                        spec=spec)
    steps: dict[Any, Any] = {}
    if spec is not None:  # what cannot train, a loss that is not a scalar: refused before anything is measured
        for b, wl in loaded.items():
            wl.check_trainable()
            steps[b] = wl.train_step()
    return _run_points(loaded, steps, thread_list, ceilings=ceilings, kind=kind, index=index, host=host,
                       quick=quick, db=db, store=store, save=save, budget_s=budget_s, progress=progress)


def _check_ceilings(ceilings: Any, kind: str, index: int | None, device: str | None) -> None:
    """Refuse ceilings given that are not rooftune's or not of the device the model runs on, before
    any model is loaded: ops placed on another machine's roofline would read as plausible."""
    from rooftune.machine.ceilings import Ceilings
    from rooftune.machine.gpu import GpuCeilings

    if ceilings is not None and not isinstance(ceilings, (Ceilings, GpuCeilings)):
        raise InvalidArgument("ceilings", type(ceilings).__name__, "allowed the Ceilings rooftune.machine.get_ceilings "
                              "returns (GpuCeilings for a CUDA device), or None for the stored ones")
    # cuda ceilings past the first test are GpuCeilings: the second isinstance only narrows the type
    if ceilings is not None and (isinstance(ceilings, GpuCeilings) != (kind == "cuda") or (
            kind == "cuda" and isinstance(ceilings, GpuCeilings)
            and ceilings.platform.index != (index or 0))):
        raise InvalidArgument("ceilings", ceilings.describe(), f"are not {device or 'cpu'}'s: pass the ceilings of "
                              "the device the model runs on, or none")


def _workloads(model: Any, batches: list[int | None], *, batch: int | Sequence[int] | None,
               inputs: Sequence[tuple[int, ...]] | None, options: dict[str, Any] | None,
               example_inputs: Sequence[Any] | None, spec: Any) -> dict[int | None, Any]:
    """The workload of each batch, keyed by the batch asked for (None: the model's own), all loaded
    before anything is measured: a module, a Keras model or a loaded Workload arrive at one batch,
    a name is loaded at each, and a model that fails on any input fails here."""
    from rooftune.workload import KerasWorkload, Workload, load_workload
    from rooftune.workload.keras_models import from_keras_model, is_keras_model
    from rooftune.workload.training import TRAIN_FRAMEWORKS

    if isinstance(model, torch.nn.Module):
        if isinstance(example_inputs, torch.Tensor):
            example_inputs = (example_inputs,)
        if not example_inputs or not all(isinstance(x, torch.Tensor) for x in example_inputs):
            raise InvalidArgument("example_inputs", type(example_inputs).__name__,
                                  "a module needs its example inputs: analyze(module, example_inputs=(tensor, ...))")
        if inputs is not None or options is not None:
            raise InvalidArgument("inputs" if inputs is not None else "options", inputs if inputs is not None else options,
                                  "allowed only with a model name (a module comes with example_inputs)")
        model = Workload(type(model).__name__, "module", model.eval(), tuple(example_inputs), train=spec)
    elif is_keras_model(model):  # traced at its inputs' shapes with the batch given (one)
        if spec is not None:
            raise InvalidArgument("train", "a Keras model", TRAIN_FRAMEWORKS)
        if example_inputs is not None or options is not None or len(batches) > 1:
            raise InvalidArgument("example_inputs" if example_inputs is not None else "options" if options is not None
                                  else "batch", example_inputs if example_inputs is not None else options or batch,
                                  "a Keras model takes one batch and its input shapes (inputs=[...]), no options")
        model = from_keras_model(model, str(getattr(model, "name", type(model).__name__)), "keras model",
                                 batches[0], inputs)
        batches = [None]
    elif example_inputs is not None:
        raise InvalidArgument("example_inputs", type(example_inputs).__name__,
                              "allowed only with an nn.Module (a name builds its own inputs)")
    if isinstance(model, (Workload, KerasWorkload)):
        if spec is not None and isinstance(model, KerasWorkload):
            raise InvalidArgument("train", model.name, TRAIN_FRAMEWORKS)
        if spec is not None and model.train is None:
            model = replace(model, train=spec)
        if len(batches) > 1 or batches[0] is not None:
            raise InvalidArgument("batch", batch, "a loaded Workload has its batch; pass the model name instead")
        return {None: model}
    # a training workload is run first by its step's construction (analyze's train steps), not by the load
    return {b: load_workload(model, batch=b, inputs=inputs, options=options, train=spec, check=spec is None)
            for b in batches}


def _run_points(loaded: dict[int | None, Any], steps: dict[Any, Any], thread_list: Sequence[int], *,
                ceilings: Any, kind: str, index: int | None, host: Any, quick: bool, db: str | None, store: Any,
                save: bool, budget_s: float, progress: Progress | None) -> list[Analysis]:
    """Each (batch, threads) point analysed and saved, once every input has been checked: the
    ceilings are read (or measured) and the store opened only now, so refused input costs neither."""
    from rooftune.machine import get_ceilings
    from rooftune.store import open_store

    own_store = store is None and (save or ceilings is None)
    store = open_store(db) if own_store else store
    try:
        if ceilings is None and kind == "cuda":
            from rooftune.machine.gpu import get_gpu_ceilings

            ceilings = get_gpu_ceilings(index or 0, quick=quick, store=store, progress=progress)
        elif ceilings is None:
            ceilings = get_ceilings(quick=quick, store=store, platform=host, progress=progress)
        platform = ceilings.platform
        if kind == "cuda":  # copies: the caller's module stays where it is
            loaded = {b: on_cuda(wl, index or 0) for b, wl in loaded.items()}
        out = []
        for b, wl in loaded.items():
            for t in thread_list:
                # one step per batch: its parameters trained on by the points before are no matter
                a = analyze_workload(wl, ceilings, threads=t, budget_s=budget_s, progress=progress,
                                     train_step=steps.get(b))
                if save and store is not None:
                    import rooftune

                    store.save_analysis(platform, a.to_dict(), model=a.model, batch=a.batch, threads=t,
                                        rooftune_version=rooftune.__version__)
                out.append(a)
        return out
    finally:
        if own_store and store is not None:
            store.close()

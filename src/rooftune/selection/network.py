"""Selecting a primitive per convolution of a whole network: the cost table solved, the model
rewritten and verified, the network measured interleaved against vanilla PyTorch, the best uniform
primitive and the oracle, and a faster verified candidate promoted over the predicted one."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from rooftune.errors import InvalidArgument, as_names, is_int, is_real, thread_counts
from rooftune.selection.graph import conv_graph
from rooftune.selection.pools import OPENMP, GroupCheck, check_group, solve_checking_groups
from rooftune.selection.rewrite import Verification, rewrite, selected_layers, verify
from rooftune.selection.solve import Selection, best_uniform, candidate_primitives, layout_aware, per_layer
from rooftune.selection.tables import predicted_table, profiled_table

#: The measurement of a whole rewritten network against another: interleaved, 2 % target.
SELECT_POLICY_BUDGET_S = 8.0


@dataclass
class Candidate:
    name: str
    selection: Selection
    module: torch.nn.Module
    verification: Verification


@dataclass
class SelectResult:
    model: str
    batch: int
    threads: int
    platform_id: str
    layers: int
    selection: Selection
    verification: Verification
    select_time_s: float
    comparisons: dict[str, dict[str, Any]] = field(default_factory=dict)
    others: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    module: torch.nn.Module | None = None
    #: Each group the selections were checked for inside the network (its description is in ``notes`` too).
    checks: list[GroupCheck] = field(default_factory=list)

    def label(self, name: str) -> str:
        """A comparison's name as the table gives it: the best uniform selection names its
        primitive (``best-uniform (onednn-prepacked-nhwc)``)."""
        strategy = str((self.others.get(name) or {}).get("strategy", ""))
        return f"{name} ({strategy.split(':', 1)[1]})" if strategy.startswith("uniform:") else name

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "batch": self.batch, "threads": self.threads, "platform_id": self.platform_id,
                "layers": self.layers, "select_time_s": self.select_time_s, "selection": self.selection.to_dict(),
                "verification": self.verification.to_dict(), "comparisons": self.comparisons, "others": self.others,
                "notes": self.notes, "checks": [asdict(c) for c in self.checks]}


def comparison_policy(budget_s: float) -> Any:
    """How a rewritten network is timed against another (select's comparisons, and the benchmarks
    that check them): ``budget_s`` each, 0.5 s of warm-up, samples of 20 ms or more."""
    from rooftune.bench import Policy

    return Policy(budget_s=budget_s, warmup_s=0.5, min_sample_time_s=0.02)


def module_runner(module: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> Callable[[], Any]:
    """One inference of ``module`` on ``inputs`` without autograd, as the harness calls it."""
    def run() -> Any:
        with torch.no_grad():
            return module(*inputs)
    return run


def _candidate(name: str, module: torch.nn.Module, sel: Selection, inputs: Sequence[torch.Tensor]) -> Candidate:
    new = rewrite(module, sel)
    v = verify(module, new, inputs)
    # the whole output disagrees: the lossy primitives back to the default path first, then every layer
    for lossy_only in (True, False):
        if v.ok:
            break
        layers = [(n, m) for n, m in selected_layers(new)
                  if not m.fallback and (not lossy_only or m.primitive.startswith(("winograd", "fft")))]
        if not layers:  # nothing new would fall back: the same network, the same verdict
            continue
        for _, m in layers:
            m.fallback = True
        v2 = verify(module, new, inputs)  # may fall back more layers, each by its own check
        v2.fallbacks = v.fallbacks + v2.fallbacks + [{"layer": n, "primitive": m.primitive, "reason": "end-to-end check failed"}
                                                     for n, m in layers]
        v = v2
    return Candidate(name, sel, new, v)


def select(model: str | torch.nn.Module, *, inputs: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None,
           batch: int = 1, shapes: Sequence[tuple[int, ...]] | None = None, options: dict[str, Any] | None = None,
           threads: int | None = None, model_path: str | None = None,
           perfmodel: Any = None, db: str | None = None, store: Any = None, precisions: Sequence[str] = ("fp32",),
           strategy: str = "layout-aware", measure_s: float | None = SELECT_POLICY_BUDGET_S,
           progress: Callable[[str], None] | None = None, promote: bool = True) -> SelectResult:
    """Select a primitive per convolution of ``model`` (a name as `rooftune analyze` takes, with its
    input ``shapes`` and model ``options`` where it needs them, or a
    module with its example ``inputs``, and ``kwargs`` for a model called with keywords), rewrite it,
    verify it and (unless
    ``measure_s`` is None) measure it against vanilla, the best uniform primitive and the oracle;
    with ``promote``, one of those that runs faster than the predicted selection with its whole CI
    replaces it (without, the predicted selection is returned as it measured: how the
    performance model's choice itself compares)."""
    from rooftune.perfmodel import load_base_model
    from rooftune.platform import current_platform

    if strategy not in ("layout-aware", "per-layer"):
        raise InvalidArgument("strategy", strategy, "allowed layout-aware, per-layer")
    platform = current_platform()
    if threads is None:
        threads = platform.usable_cores
    elif not is_int(threads):  # one count: a list is refused here, not taken as its first
        raise InvalidArgument("threads", threads, f"allowed an integer in 1..{platform.usable_cores}")
    else:
        threads = thread_counts(threads, platform.usable_cores, each="threads")[0]
    precisions = as_names(precisions, "precisions") or ()
    if not precisions or any(p not in ("fp32", "int8") for p in precisions):
        raise InvalidArgument("precisions", precisions, "allowed fp32 and/or int8 (the primitives' precisions)")
    if measure_s is not None and (not is_real(measure_s) or not math.isfinite(measure_s) or measure_s <= 0):
        raise InvalidArgument("measure_s", measure_s, "allowed a positive number of seconds, or None to measure nothing")
    if perfmodel is None:
        from rooftune.perfmodel.persist import load_model

        perfmodel = load_model(model_path) if model_path else load_base_model()
    elif not callable(getattr(perfmodel, "predict", None)) or not hasattr(perfmodel, "primitives_"):
        raise InvalidArgument("perfmodel", perfmodel, "allowed a fitted rooftune PerfModel (rooftune.perfmodel), "
                              "or None for the one transferred to this machine, else the shipped one")
    # select runs the caller's module in eval mode; each submodule's own mode is put back after
    # (a fine-tuned model in training keeps its frozen batch norms in eval)
    modes = {m: m.training for m in model.modules()} if isinstance(model, torch.nn.Module) else {}
    try:
        return _select(model, inputs=inputs, kwargs=kwargs, batch=batch, shapes=shapes, options=options,
                       threads=threads, model_path=model_path,
                       perfmodel=perfmodel, db=db, store=store, precisions=precisions, strategy=strategy,
                       measure_s=measure_s, progress=progress, platform=platform, promote=promote)
    finally:
        for m, training in modes.items():
            m.training = training


def _module_and_inputs(model: Any, inputs: Any, kwargs: Any, batch: int, shapes: Any,
                       options: Any) -> tuple[torch.nn.Module, list[torch.Tensor]]:
    """The module select rewrites and its example tensors, in the order it takes them: a model
    name builds both; a module comes with its own inputs (keywords or nested ones taken apart)."""
    from rooftune.workload import load_workload

    if isinstance(model, str):
        if inputs is not None or kwargs is not None:
            raise InvalidArgument("inputs", "given with a model name", "allowed only with a module (a name builds its own)")
        wl = load_workload(model, batch=batch, inputs=shapes, options=options)
        return wl.module, list(wl.inputs)
    elif shapes or options:
        raise InvalidArgument("shapes", "given with a module", "allowed only with a model name (a module comes with its inputs)")
    elif isinstance(model, torch.nn.Module):
        from rooftune.workload.calls import take_apart

        if not inputs and not kwargs:
            raise InvalidArgument("inputs", inputs if inputs is None else type(inputs).__name__,
                                  "a module needs its example inputs: select(module, inputs=[tensor, ...])")
        try:  # a call of keywords or nested inputs: the module takes its tensors in order, and makes that call
            module, tensors, _ = take_apart(model.eval(), tuple(inputs or ()), dict(kwargs or {}))
        except ValueError as exc:
            raise InvalidArgument("inputs", type(model).__name__, f"the module is called with keywords or nested "
                                  f"inputs, and {exc}") from None
        if not tensors:
            raise InvalidArgument("inputs", type(inputs).__name__, "a module needs its example inputs, tensors: "
                                  "select(module, inputs=[tensor, ...])")
        return module, list(tensors)
    else:
        raise InvalidArgument("model", type(model).__name__, "allowed a model name or a torch.nn.Module")


def _select(model: Any, *, inputs: Any, kwargs: Any, batch: int, shapes: Any, options: Any, threads: int,
            model_path: Any, perfmodel: Any,
            db: Any, store: Any, precisions: Sequence[str], strategy: str, measure_s: float | None,
            progress: Any, platform: Any, promote: bool) -> SelectResult:
    from rooftune.bench import compare

    say = progress or (lambda _m: None)
    module, inputs = _module_and_inputs(model, inputs, kwargs, batch, shapes, options)
    name = model if isinstance(model, str) else type(model).__name__
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        say("reading the convolutions")
        graph = _selectable_graph(model, name, module, inputs)
        prims = candidate_primitives(precisions)
        solve = layout_aware if strategy == "layout-aware" else per_layer
        t0 = time.perf_counter()
        table = predicted_table(graph, perfmodel, prims)
        chosen = solve(table)
        select_s = time.perf_counter() - t0
        # a primitive on a thread pool of its own, or a fast algorithm (Winograd, FFT), is kept only
        # if the network ran faster with its group than solved without it (measured once per group,
        # the decision shared by every table below)
        group_checks: dict[str, GroupCheck] = {}

        def check(group: str, with_group: Selection, without: Selection) -> GroupCheck:
            on = [c.primitive for c in with_group.choices if check_group(c.primitive) == group]
            if not measure_s:
                return GroupCheck(group, tuple(sorted(set(on))), len(on), None, None, True)
            cmp = compare(module_runner(rewrite(module, without), inputs), module_runner(rewrite(module, with_group), inputs),
                          label_a=f"without {group}", label_b=f"with {group}", policy=comparison_policy(measure_s / 2),
                          platform_id=platform.id)
            return GroupCheck(group, tuple(sorted(set(on))), len(on), cmp.ratio, cmp.ci, cmp.ci[0] > 1.0)

        if any(check_group(c.primitive) != OPENMP for c in chosen.choices):
            chosen = solve_checking_groups(table, solve, group_checks, check, progress=say)
        notes = _graph_notes(graph, chosen, table)
        data = _profile_rows(store, db, platform.id, threads)
        oracle_table, missing = profiled_table(graph, data, prims) if data is not None else (None, graph.names)
        say("rewriting and verifying")
        main = _candidate("selected", module, chosen, inputs)
        others: list[Candidate] = []
        uni = solve_checking_groups(oracle_table or table, best_uniform, group_checks, check, progress=say)
        others.append(_candidate("best-uniform", module, uni, inputs))
        if oracle_table is not None:
            oracle = solve_checking_groups(oracle_table, layout_aware, group_checks, check, progress=say)
            others.append(_candidate("oracle", module, oracle, inputs))
        else:
            notes.append(f"no oracle: {len(missing)} layer(s) not profiled on this platform at {threads} threads"
                         + (f" (run `rooftune profile --models {name} --threads {threads}`)" if isinstance(model, str) else ""))
        notes += [c.describe() for c in group_checks.values()]
        result = SelectResult(name, batch, threads, platform.id, len(graph), chosen, main.verification, select_s,
                              notes=notes, module=main.module, checks=list(group_checks.values()))
        for c in others:
            result.others[c.name] = {"strategy": c.selection.strategy, "expected_s": c.selection.total_s,
                                     "verification": c.verification.to_dict(),
                                     "primitives": _histogram(c.selection)}
        if measure_s:
            _measure_candidates(result, main, others, module, inputs, measure_s, platform.id, say, promote)
        return result
    finally:
        torch.set_num_threads(previous)


def _selectable_graph(model: Any, name: str, module: torch.nn.Module, inputs: Any) -> Any:
    """The model's 2-D convolutions, refused with the reason when there is none to select for: an
    exported program (its convolutions are graph ops, not modules select can rewrite) gets the way
    to give the module itself, and other convolutions the command that runs them."""
    graph = conv_graph(module, inputs)
    if not len(graph) and isinstance(model, str) and model.endswith(".pt2"):
        raise InvalidArgument("model", name, "an exported program holds its convolutions as graph ops, not the "
                              "nn.Conv2d modules select rewrites; give the module itself: "
                              "select(module, inputs=[...]) or rooftune.optimize(module, example_inputs=...)")
    if not len(graph):
        kinds = sorted(set(graph.skipped.values()))
        raise InvalidArgument("model", name, "has no 2-D convolution to select a primitive for"
                              + (f" (it has {len(graph.skipped)}: {', '.join(kinds)}; `rooftune tune` runs them on the "
                                 "graph runtimes)" if kinds else ""))
    return graph


def _graph_notes(graph: Any, chosen: Selection, table: Any) -> list[str]:
    """The selection's own notes and what the result leaves out or only predicts: an untraced
    graph, convolutions no primitive here runs, layers outside the model's training range; a
    reader of the result would otherwise take every layer as selected on firm ground."""
    notes = list(chosen.notes)
    if not graph.traced:
        notes.append("torch.fx could not trace the model: convolutions taken as a chain in execution order")
    if graph.skipped:
        left = [f"{n} ({why})" for n, why in graph.skipped.items()]
        notes.append(f"{len(left)} convolution(s) left on PyTorch's own path, with no primitive here for them: "
                     + ", ".join(left[:6]) + (f" and {len(left) - 6} more" if len(left) > 6 else ""))
    n_extra = int(table.extrapolated.sum())
    if n_extra:
        notes.append(f"{n_extra} layer(s) outside the performance model's training range: predictions extrapolated")
    return notes


def _profile_rows(store: Any, db: Any, platform_id: str, threads: int) -> Any:
    """This platform's profiled rows at ``threads`` (the oracle's table), or None where the store
    has none: the oracle is a comparison the result can go without, never a reason to fail."""
    from rooftune.perfmodel.data import load_profile_data
    from rooftune.store import open_store

    own = store is None
    store = open_store(store or db)
    try:
        try:
            return load_profile_data(store, platform_id, threads)
        except InvalidArgument:
            return None
    finally:
        if own:
            store.close()


def _measure_candidates(result: SelectResult, main: Candidate, others: Sequence[Candidate], module: torch.nn.Module,
                        inputs: Any, measure_s: float, platform_id: str, say: Callable[[str], None],
                        promote: bool) -> None:
    """The selected network against vanilla and every other candidate, interleaved, into
    ``result.comparisons``; with ``promote``, a candidate faster with its whole CI becomes the
    selection (:func:`_promote_faster`, which measures again with the same rule)."""
    from rooftune.bench import compare

    policy = comparison_policy(measure_s)

    def measure(label: str, other: torch.nn.Module, chosen: torch.nn.Module) -> dict[str, Any]:
        say(f"measuring selected vs {label}")
        cmp = compare(module_runner(other, inputs), module_runner(chosen, inputs), label_a=label, label_b="selected", policy=policy,
                      platform_id=platform_id)
        return {"speedup": cmp.ratio, "ci": list(cmp.ci), "other_s": cmp.a.median,
                "selected_s": cmp.b.median, "warnings": list(cmp.warnings)}

    for label, other in [("vanilla", module)] + [(c.name, c.module) for c in others]:
        result.comparisons[label] = measure(label, other, main.module)
    if promote:
        _promote_faster(result, main, others, measure, module)


def _promote_faster(result: SelectResult, main: Candidate, others: Sequence[Candidate],
                    measure: Callable[[str, torch.nn.Module, torch.nn.Module], dict[str, Any]],
                    vanilla: torch.nn.Module) -> None:
    """When another verified candidate (the best uniform primitive, the oracle) ran faster than the
    predicted selection with its whole CI, it becomes the selection (as tuning keeps a baseline
    that beat its best): the predicted one is kept under ``others["predicted"]``, the comparison
    with it turned round, and the new selection measured against vanilla again."""
    faster = [c for c in others if c.verification.ok and result.comparisons[c.name]["ci"][1] < 1.0]
    if not faster:
        return
    best = min(faster, key=lambda c: result.comparisons[c.name]["speedup"])
    old = result.comparisons
    was = old[best.name]
    result.others["predicted"] = {"strategy": main.selection.strategy, "expected_s": main.selection.total_s,
                                  "verification": main.verification.to_dict(), "primitives": _histogram(main.selection)}
    result.others.pop(best.name, None)
    result.selection, result.verification, result.module = best.selection, best.verification, best.module
    result.comparisons = {"vanilla": measure("vanilla", vanilla, best.module),
                          "predicted": {"speedup": 1.0 / was["speedup"], "ci": [1.0 / was["ci"][1], 1.0 / was["ci"][0]],
                                        "other_s": was["selected_s"], "selected_s": was["other_s"],
                                        "warnings": list(was.get("warnings", []))}}
    dropped = [k for k in old if k not in ("vanilla", best.name)]
    result.notes.append(
        f"the {best.name} selection ({best.selection.strategy}) ran {1.0 / was['speedup']:.3f}x as fast as the predicted one "
        f"(95 % CI {1.0 / was['ci'][1]:.3f}-{1.0 / was['ci'][0]:.3f}, interleaved): it is the selection returned (and the one --save writes)"
        + (f"; its comparison with {', '.join(dropped)} was not measured" if dropped else ""))


def _histogram(sel: Selection) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in sel.choices:
        out[c.primitive] = out.get(c.primitive, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))

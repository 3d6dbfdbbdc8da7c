"""The main job: ``optimize = machine -> analyze -> tune -> select -> verify -> report``.

:func:`optimize` measures (or loads) the machine's ceilings, places the model on them, tunes its
runtime configuration within a budget, selects a convolution primitive per layer with the
performance model, and writes everything to one folder: ``report.html`` (self-contained),
``summary.json``, the best configuration (``best.json``, its artifact beside it, and
``vanilla.json`` to re-measure against), the rewritten model (``selection/``) and the figures,
and ``rooftune-manifest.json``: each of those files with its sha256, what the next run into the
folder removes (those files, unchanged, and nothing else).

A step that fails is recorded with its one-line reason and the pipeline goes on with what works;
Ctrl-C stops it, and the report of what finished is still written (every measurement is already
in the store).
"""

from __future__ import annotations

import math
import os
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rooftune.errors import InvalidArgument, RooftuneError, as_names, is_real
from rooftune.report.optimize_result import OptimizeResult, Step

if TYPE_CHECKING:
    from rooftune.bench import Policy
    from rooftune.store import Store
    from rooftune.tuning.spec import TuneSpec
    from rooftune.workload.data import DataSpec
    from rooftune.workload.training import TrainSpec

#: The embedded default: what ``rooftune optimize`` runs with no model.
DEFAULT_MODEL = "resnet18"
#: Seconds for the whole run unless told: with start-up and the report, inside 10 minutes on 2 cores.
DEFAULT_BUDGET_S = 480.0
#: Below this the steps cannot each get a useful share.
MIN_BUDGET_S = 60.0
#: Shares of the budget (the rest, after what the ceilings took, goes to tuning).
ANALYZE_SHARE, ANALYZE_MAX_S = 0.03, 15.0
SELECT_SHARE, SELECT_MAX_S = 0.12, 60.0
#: Kept for the report and the figures.
REPORT_RESERVE_S = 15.0
STEPS = ("machine", "analyze", "tune", "select", "report")
#: The steps ``rooftune optimize --skip`` leaves out: the ceilings and the analysis are what the
#: report explains, and the report is what the command is for.
SKIPPABLE = ("tune", "select")

Progress = Callable[[str, int, int], None]


def steps_without(skip: str | Sequence[str] | None, name: str = "skip") -> tuple[str, ...]:
    """The pipeline's steps less those in ``skip`` (each one of :data:`SKIPPABLE`), in order: what
    :func:`optimize` is given as ``steps`` for a run that leaves some out."""
    left_out = as_names(skip, name) or ()
    for s in left_out:
        if s not in SKIPPABLE:
            raise InvalidArgument(name, s, f"allowed {', '.join(SKIPPABLE)}")
    return tuple(s for s in STEPS if s not in left_out)


def _check_out(out: str | Path) -> Path:
    from rooftune.paths import output_dir

    return output_dir(out, "--out")


def _export(module: Any, example_inputs: Sequence[Any] | None, out: Path,
            example_kwargs: dict[str, Any] | None = None) -> str:
    """A module object becomes a .pt2 file in the output folder, so trial subprocesses can load it
    (called with ``example_inputs`` and ``example_kwargs``: tensors, or tuples, lists and dicts of them)."""
    import torch

    from rooftune.fileio import atomic_path
    from rooftune.workload.exported import export_module
    from rooftune.workload.keras_models import is_keras_model, save_keras_file

    if is_keras_model(module):  # a Keras model: a .keras file (loaded back in safe mode)
        return str(save_keras_file(module, out, example_inputs or example_kwargs))
    ep = export_module(module, example_inputs, example_kwargs)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "model.pt2"
    with atomic_path(path) as tmp:
        torch.export.save(ep, tmp)
    return str(path)


def optimize(
    model: str | Any = DEFAULT_MODEL,
    *,
    batch: int | None = None,
    inputs: Sequence[tuple[int, ...]] | None = None,
    options: dict[str, Any] | None = None,
    objective: str | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    out: str | Path = "rooftune-out",
    example_inputs: Sequence[Any] | None = None,
    example_kwargs: dict[str, Any] | None = None,
    store: str | os.PathLike[str] | Store | None = None,
    runtimes: Sequence[str] | None = None,
    trials: int | None = None,
    steps: Sequence[str] = STEPS,
    progress: Progress | None = None,
    trial_policy: Policy | None = None,
    compare_policy: Policy | None = None,
    precisions: Sequence[str] | None = None,
    calibration_size: int | None = None,
    train: TrainSpec | bool | None = None,
    data: DataSpec | str | None = None,
    scenario: str | None = None,
    slo_p99_ms: float | None = None,
    slo_p90_ms: float | None = None,
) -> OptimizeResult:
    """Measure, explain and speed up ``model`` on this machine; write the report to ``out``.

    ``model`` is a name as ``rooftune analyze`` takes it (with its input shapes ``inputs`` and
    model ``options`` where it needs them, as ``--input`` and ``-o`` give them), or an ``nn.Module`` with
    ``example_inputs`` (and ``example_kwargs``: tensors, or tuples, lists and dicts of them),
    exported with torch.export into ``out``. ``budget_s`` bounds the whole
    run: analysis and selection get small shares, tuning the rest. ``steps`` may leave out
    ``tune`` or ``select``. ``precisions`` None tunes in what ``rooftune.tuning.default_precisions``
    gives (fp32, and bf16 where the CPU has it and a peer computes in it by default); ``("fp32",)``
    keeps to fp32. ``precisions`` may add ``int8`` (each runtime's quantizer, calibrated on
    ``calibration_size`` inputs and guarded) and ``bf16`` (native bf16 CPUs) to the tuning's
    space. Bad arguments raise :class:`InvalidArgument` before anything is measured or written.

    ``train`` (True or a :class:`rooftune.workload.training.TrainSpec`) runs the same steps over a
    training step (batch 32 by default, objective ``throughput``: samples per second): the analysis
    of its forward, backward and optimizer ops, the tuning of its configuration against vanilla
    PyTorch training; the primitive selection is skipped (it rewrites an inference model).

    ``data`` (a :class:`rooftune.workload.data.DataSpec`, or the data's path or ``MODULE:CALLABLE``)
    judges the tuning's reduced precisions on the user's samples against the spec's accuracy budget
    (see :func:`rooftune.tuning.tune`); bf16 and int8 are then tuned by default where the CPU runs
    them natively.

    ``scenario`` (with ``slo_p99_ms`` or ``slo_p90_ms`` for ``server``) ends the tuning step with
    a serving phase, as :func:`rooftune.tuning.tune` documents.

    ``store`` is a :class:`rooftune.store.Store` (left open) or the URL or file path of one (None:
    the default store).
    """
    from rooftune.tuning.spec import TuneSpec

    started = time.perf_counter()
    budget_s, steps = _check_arguments(budget_s, steps, trial_policy, compare_policy)
    # what tuning is asked, checked as tune() checks it (the budget is the tuning step's, later)
    policies = {k: v for k, v in (("trial_policy", trial_policy), ("compare_policy", compare_policy)) if v is not None}
    spec = TuneSpec(objective=objective, budget_s=budget_s, trials=trials, batch=batch, inputs=inputs, options=options,
                    runtimes=runtimes, precisions=precisions, calibration_size=calibration_size, train=train, data=data,
                    scenario=scenario, slo_p99_ms=slo_p99_ms, slo_p90_ms=slo_p90_ms, **policies)
    spec = _with_precisions(model, spec)
    import torch

    if isinstance(example_inputs, torch.Tensor):  # one input given as itself, not in a tuple
        example_inputs = (example_inputs,)
    from rooftune.fileio import recording_writes

    with recording_writes() as written:  # what this run writes into out: its manifest, for the next run
        run = _Run(model, out, spec, store, started=started, say=progress or (lambda *_: None), written=written,
                   budget_s=budget_s, steps=steps, example_inputs=example_inputs, example_kwargs=example_kwargs)
        return run.execute()


def _check_arguments(budget_s: float, steps: Sequence[str], trial_policy: Policy | None,
                     compare_policy: Policy | None) -> tuple[float, tuple[str, ...]]:
    """What :func:`optimize` takes beyond what :class:`rooftune.tuning.spec.TuneSpec` checks: its
    whole budget, its steps, and a policy None for the tuner's; the budget and the steps as used."""
    from rooftune.bench import Policy

    if not is_real(budget_s) or not math.isfinite(budget_s) or budget_s < MIN_BUDGET_S:
        raise InvalidArgument("budget", budget_s, f"allowed a number of seconds >= {MIN_BUDGET_S:g}")
    names = as_names(steps, "steps") or ()
    for s in names:
        if s not in STEPS:
            raise InvalidArgument("step", s, f"allowed {', '.join(STEPS)}")
    if not names:
        raise InvalidArgument("steps", names, f"allowed one or more of {', '.join(STEPS)}")
    for name, policy in (("trial_policy", trial_policy), ("compare_policy", compare_policy)):
        if policy is not None and not isinstance(policy, Policy):
            raise InvalidArgument(name, policy, "allowed a rooftune.bench.Policy, or None for the tuner's")
    return float(budget_s), names


def _with_precisions(model: str | Any, spec: TuneSpec) -> TuneSpec:
    """``spec`` with the precisions it tunes on this machine named (the report's commands give
    them), refused where this CPU cannot run one; a model a training step cannot take refused."""
    from rooftune.platform import current_platform
    from rooftune.runtimes import chosen_runtimes
    from rooftune.tuning.arguments import check_train_model
    from rooftune.tuning.spec import searched_precisions

    if spec.train is not None:
        check_train_model(model)
    precisions, _ = searched_precisions(spec, current_platform(), chosen_runtimes(spec.runtimes)[0])
    return replace(spec, precisions=precisions)


class _Run:
    """One run of :func:`optimize`: its set-up (the model loaded, the store opened, the folder
    cleared, the result begun), then one method per step, each within its share of the budget."""

    def __init__(self, model: str | Any, out: str | Path, spec: TuneSpec, store: str | os.PathLike[str] | Store | None,
                 *, started: float, say: Progress, written: set[Path], budget_s: float, steps: Sequence[str],
                 example_inputs: Sequence[Any] | None, example_kwargs: dict[str, Any] | None) -> None:
        from rooftune.fileio import remove_written
        from rooftune.store import Store, open_store
        from rooftune.workload import load_workload

        self.started, self.say, self.written = started, say, written
        self.spec = spec
        self.example_inputs, self.example_kwargs = example_inputs, example_kwargs
        self.budget_s = budget_s
        train = cast("TrainSpec | None", spec.train)
        out_dir = _check_out(out)
        # the caller's module, which select rewrites (the .pt2 file's graph has no nn.Conv2d to rewrite)
        self.given = given = None if isinstance(model, str) else model
        self.inputs = inputs = spec.inputs or None
        self.options = options = dict(spec.options or {}) or None
        if given is not None:
            from rooftune.workload.models import module_takes_no_shapes

            module_takes_no_shapes(inputs, options)
            self.name = _export(model, example_inputs, out_dir, example_kwargs)
        else:
            self.name = model
        # a model that cannot load fails here, before anything runs
        self.wl = wl = load_workload(self.name, batch=spec.batch, inputs=inputs, options=options, train=train)
        if train is not None:
            wl.train_step()  # a loss that is not a scalar fails here, before anything runs
        # a bad store URL fails here too; a store given stays open (the caller's)
        self.store = open_store(store)
        self.own_store = self.store is not store
        out_dir.mkdir(parents=True, exist_ok=True)
        # what an earlier run wrote here and this one does not write again (a skipped step's
        # best.json, a selection) would sit beside a report that does not know it: removed, as
        # that run's manifest lists it, but not the model file this run exported or uses
        if given is not None:
            written.add(Path(self.name).absolute())
        remove_written(out_dir, keep={*written, Path(self.name).absolute()})
        self.out_dir = out_dir
        self.result = result = OptimizeResult(
            model=self.name, batch=wl.batch, objective=cast(str, spec.objective), budget_s=self.budget_s, out=out_dir,
            steps={s: Step(s, "pending" if s in steps else "skipped") for s in STEPS},
            call=wl.call.describe() if wl.call is not None else None,
            given=f"{type(given).__name__} (exported to {self.name})" if given is not None else None,
            train=train.as_dict() if train is not None else None)
        from rooftune.selection.graph import selectable
        from rooftune.workload import is_tensorflow

        if "select" in steps and train is not None:
            result.steps["select"].status = "skipped"
            result.steps["select"].message = (
                "a training step: the selection rewrites an inference model's convolutions with primitives that have "
                "no backward pass, and its performance model predicts forward convolutions only")
        elif "select" in steps and is_tensorflow(wl):
            result.steps["select"].status = "skipped"
            result.steps["select"].message = ("a TensorFlow model: select rewrites a PyTorch module's convolutions, "
                                              "TensorFlow picks its own kernels (oneDNN's)")
        elif "select" in steps and not any(selectable(m) for m in (given if given is not None else wl.module).modules()):
            # nothing to select: the step is left out and its share of the budget goes to tuning
            result.steps["select"].status = "skipped"
            result.steps["select"].message = (
                "an exported program (.pt2) holds its convolutions as graph ops, not nn.Conv2d modules to rewrite: "
                "give optimize the module itself (optimize(module, example_inputs=...)) to select primitives"
                if given is None and self.name.endswith(".pt2") else
                "the model has no 2-D convolution: no primitive to select")
        data = cast("DataSpec | None", spec.data)
        url = None if store is None else self.store.url if isinstance(store, Store) else os.fspath(store)
        result.commands = _commands(result, url, tuple(spec.precisions or ("fp32",)),
                                    spec.calibration_size if data is None else data.calibration, steps, inputs,
                                    options, data, spec.runtimes)
        self.select_reserve = (max(20.0, min(SELECT_MAX_S, SELECT_SHARE * self.budget_s))
                               if result.steps["select"].status != "skipped" else 0.0)
        self.threads = 1

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.started)

    def execute(self) -> OptimizeResult:
        """The steps in order; a step that fails is recorded and the next runs; Ctrl-C stops
        them, and the report of what finished is written in any case."""
        result = self.result
        try:
            from rooftune.platform import current_platform

            result.platform = current_platform()
            self.threads = result.platform.usable_cores
            for step, fn in (("machine", self.machine), ("analyze", self.analyze), ("tune", self.tune),
                             ("select", self.select)):
                if result.steps[step].status == "skipped":
                    continue
                self.say(f"{step}", STEPS.index(step), len(STEPS))
                if not self.run(step, fn):
                    break
            for st in result.steps.values():
                if st.status == "pending" and st.name != "report":
                    st.status, st.message = "skipped", "not run: the run was interrupted"
        finally:
            if self.own_store:
                self.store.close()
            result.duration_s = time.perf_counter() - self.started
            _write_outputs(result, self.written)
        return result

    def run(self, step: str, fn: Callable[[], None]) -> bool:
        """Run one step, recording its status, message and seconds; False after Ctrl-C."""
        result = self.result
        st = result.steps[step]
        if st.status == "skipped":
            return True
        t0 = time.perf_counter()
        try:
            fn()
            st.status = "ok"
        except KeyboardInterrupt:
            st.status = "interrupted"
            st.message = "interrupted (Ctrl-C); what finished before is in this report and the store"
            result.interrupted = True
            return False
        except RooftuneError as exc:
            st.status, st.message = "failed", str(exc)
        except Exception as exc:  # a step that breaks is reported; the pipeline goes on with what works
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            st.status, st.message = "failed", f"{type(exc).__name__}: {first}"
            result.notes.append(f"{step} failed:\n" + traceback.format_exc(limit=4))
        finally:
            st.seconds = time.perf_counter() - t0
        return True

    def machine(self) -> None:
        from rooftune.machine import get_ceilings

        result = self.result
        self.say("machine: ceilings (from the store when measured)", 0, 1)
        result.ceilings = get_ceilings(quick=True, store=self.store, platform=result.platform)
        if result.ceilings.from_store:
            result.steps["machine"].message = "ceilings from the store" + (" (quick)" if result.ceilings.quick else "")
        else:
            result.steps["machine"].message = "ceilings measured now (quick); `rooftune machine` measures them fully"

    def analyze(self) -> None:
        import torch

        from rooftune.analysis import analyze

        result = self.result
        if result.ceilings is None:
            raise RooftuneError("no ceilings: the machine step failed")
        self.say("analyze: every op on the roofline", 0, 1)
        b = max(3.0, min(ANALYZE_MAX_S, ANALYZE_SHARE * self.budget_s))
        previous = torch.get_num_threads()
        try:  # stored with its platform, as `rooftune analyze` stores it
            [result.analysis] = analyze(self.wl, ceilings=result.ceilings, threads=self.threads, budget_s=b,
                                        store=self.store)
        finally:
            torch.set_num_threads(previous)

    def tune(self) -> None:
        from rooftune.tuning import NoVerifiedTrial, save_config, tune_spec

        result, out_dir = self.result, self.out_dir
        b = self.left() - self.select_reserve - REPORT_RESERVE_S
        if b < 20:
            raise RooftuneError(f"only {max(b, 0):.0f} s of the budget left for tuning; give a larger --budget")
        try:
            r = tune_spec(self.name, replace(self.spec, budget_s=b, save=out_dir / "best.json"), store=self.store,
                          progress=lambda s, d, t: self.say(f"tune: {s}", d, t), analysis=result.analysis)
        except NoVerifiedTrial as exc:  # the report and the summary list why its trials failed
            result.steps["tune"].errors = list(exc.failures)
            raise
        result.tune = r
        result.files["best configuration"] = "best.json"
        vanilla = r.baselines.get(result.vanilla[0])
        if vanilla is not None and vanilla.ok:
            save_config(vanilla, out_dir / "vanilla.json", r.workload)
            result.files["vanilla configuration"] = "vanilla.json"
        if r.best.artifact:  # the copy beside best.json (tune drops paths into its removed folder)
            result.files["optimized artifact"] = Path(r.best.artifact).name

    def select(self) -> None:
        from rooftune.perfmodel import default_model
        from rooftune.primitives import PRIMITIVES
        from rooftune.selection import save_selection, select
        from rooftune.selection.pools import OPENMP, check_group

        result = self.result
        perf, source = default_model()
        # vanilla, best uniform, oracle; vanilla again when one of those replaces the prediction;
        # half a comparison for each group a selection may be checked for (a thread pool of
        # its own, the fast algorithms)
        groups = {check_group(p) for p in PRIMITIVES} - {OPENMP}
        n_cmp = 4 + 0.5 * len(groups)
        measure_s = max(2.0, min(10.0, (min(self.select_reserve, self.left() - REPORT_RESERVE_S) - 10.0) / n_cmp))
        self.say("select: a primitive per convolution", 0, 1)
        target = ({"model": self.name, "batch": self.wl.batch, "shapes": self.inputs, "options": self.options}
                  if self.given is None
                  else {"model": self.given, "inputs": list(self.example_inputs or ()), "kwargs": self.example_kwargs})
        r = select(**target, threads=self.threads, perfmodel=perf, store=self.store, measure_s=measure_s,
                   progress=lambda m: self.say(f"select: {m}", 0, 1))
        r.notes.append(f"performance model: {source}")
        result.select = r
        save_selection(r, self.out_dir / "selection")
        result.files["rewritten model"] = "selection/load.py"


def _write_outputs(result: OptimizeResult, written: set[Path]) -> None:
    from rooftune.report.html import write_report

    st = result.steps["report"]
    t0 = time.perf_counter()
    try:
        write_report(result)
        st.status = "ok"
    except Exception as exc:  # the summary is still written
        st.status, st.message = "failed", f"{type(exc).__name__}: {exc}"
    st.seconds = time.perf_counter() - t0
    result.duration_s += st.seconds  # the summary and the command's table count the report's time too
    from rooftune.fileio import MANIFEST, json_text, write_atomic, write_manifest

    result.files["summary"] = "summary.json"
    result.files["manifest (what the next run into this folder removes)"] = MANIFEST
    write_atomic(result.out / "summary.json", json_text(result.to_dict(), indent=2, default=str))
    write_manifest(result.out, written)


def _commands(r: OptimizeResult, db: str | None, precisions: Sequence[str] = ("fp32",),
              calibration_size: int | None = None, steps: Sequence[str] = STEPS,
              inputs: Sequence[tuple[int, ...]] | None = None, options: dict[str, Any] | None = None,
              data: Any = None, runtimes: Sequence[str] | None = None) -> list[str]:
    from rooftune.runtimes.quantize import CALIBRATION_SIZE

    q = shlex.quote
    out = q(str(r.out))
    from rooftune.store import redact_url

    dbo = f" --db {q(redact_url(db))}" if db else ""  # the commands are printed and written: no password
    py = q(sys.executable)
    prec = " --fp32" if tuple(precisions) == ("fp32",) else "".join(f" --{p}" for p in ("bf16", "int8") if p in precisions)
    if "int8" in precisions and calibration_size not in (None, CALIBRATION_SIZE):
        prec += f" --calibration {calibration_size}"
    left_out = [n for n in SKIPPABLE if n not in steps]
    skip = f" --skip {','.join(left_out)}" if left_out else ""
    # the model as given: its input shapes (at the run's batch) and options
    given = "".join(f" --input {'x'.join(map(str, s))}" for s in inputs or ())
    given += "".join(f" -o {q(f'{k}={v}')}" for k, v in (options or {}).items())
    if runtimes:  # the runtimes the run was restricted to: what ran
        given += f" --runtime {q(','.join(runtimes))}"
    if data is not None:  # the user's data and budget, as given (the defaults left out)
        given += f" --data {q(data.data)}" + "".join(
            f" --{flag} {q(str(v))}" for flag, v in (("metric", data.metric), ("max-drop", data.max_drop),
                                                      ("transform", data.transform))
            if v is not None and not (flag == "max-drop" and v == 1.0))
    if r.train is not None:
        given += f" --train --optimizer {r.train['optimizer']}" + (f" --loss {q(r.train['loss'])}" if r.train["loss"] != "auto" else "")
    commands = [
        f"rooftune optimize {q(r.model)}{given} --batch {r.batch} --objective {r.objective} --budget {r.budget_s:g}{prec} "
        f"--out {out}{skip}{dbo}"]
    if r.train is not None:  # the replays run an inference; a training configuration is run by one's own script
        return commands

    def runs(step: str) -> bool:
        return step in steps and (step not in r.steps or r.steps[step].status != "skipped")

    if runs("tune"):  # the replays of what tuning saved
        commands += [f"rooftune exec --config {out}/best.json -- {py} -P -m rooftune.tuning.replay {out}/best.json",
                     f"rooftune exec --config {out}/vanilla.json -- {py} -P -m rooftune.tuning.replay {out}/vanilla.json"]
    if runs("select") and r.model.endswith(".pt2"):  # optimize was given a module: select rewrites it, not the file
        commands.append("# the selection: rooftune.select(module, inputs=[...]) on the module given to optimize")
    elif runs("select"):
        commands.append(f"rooftune select {q(r.model)}{given} --batch {r.batch} --save {out}/selection{dbo}")
    return commands

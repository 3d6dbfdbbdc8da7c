"""`rooftune tune`: guideline and baselines first, then an Optuna search within a budget, then
the best re-measured interleaved against every baseline. :func:`tune` builds a :class:`Study`
and calls its phases in order:

    fixed_configurations    evaluate(guideline), evaluate(each baseline)   # each in a fresh subprocess
    guideline_seeds         evaluate(guideline in each reduced precision allowed, and other sources)
    search                  while budget and trials remain: config = TPE.ask(); evaluate(config); TPE.tell(...)
    confirm_best            best = fastest verified trial, confirmed against the runners-up interleaved
    final_comparisons       compare(best, guideline) interleaved -> how far the instant configuration is
                            for each baseline, fastest first: compare(best, baseline) interleaved -> ratio, CI
                            (a baseline faster by the medians becomes the best, once; the others again)
    steady                  the budget left spent on comparisons whose pairs of processes disagreed
    fp32_answer             where the best is not fp32: the fastest fp32 one against the fastest fp32 peer
    save_best               the best's configuration and artifact written for ``rooftune exec``
    result                  the TuneResult, its figures from the interleaved comparisons

Two configurations compared twice pool both comparisons' pairs of processes (Comparisons).

evaluate(config) = a configuration measured before (or one a skip rule refuses, rooftune.tuning.skips)
is not run again; else start a worker with the config's environment; prepare; compare its output
with the reference (a wrong output is a failed trial, never a best); measure with the harness; store.

The Study class is most of this module's length: its phases share one state (the trials, the
best, the comparisons, the notes), which splitting them over modules would pass around instead.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rooftune.bench import Policy
from rooftune.bench.canary import Steal, steal_warning
from rooftune.errors import ClusterError, InvalidArgument
from rooftune.platform.processes import owned_tempdir
from rooftune.tuning.arguments import (
    OBJECTIVES,
    TRAIN_RUNTIMES,
    check_arguments,
    check_precisions,
    check_train_arguments,
    data_precisions,
    default_precisions,
    native_bf16,
    precisions_for,
    validation_spec,
)
from rooftune.tuning.cluster import (
    Claims,
    SharedSampler,
    StudyUnit,
    check_cluster_arguments,
    new_run_id,
    run_study,
)
from rooftune.tuning.compare import (
    COMPARE_POLICY,
    COMPARE_PROCESS_PAIRS,
    Comparisons,
    FinalCost,
    against_baselines,
    comparison_s,
    guideline_wins,
    itself,
    pair_start_s,
    pooled_text,
    steadier,
)
from rooftune.tuning.config import RunConfig, allocator_library
from rooftune.tuning.guidelines import (
    TF_CAPTURE,
    baselines,
    framework_seeds,
    guideline,
    precision_seeds,
    runtime_seeds,
    source_seeds,
    train_guideline,
    train_precision_seeds,
    winograd_share,
)
from rooftune.tuning.result import (
    DRIFT,
    UNSTEADY_PAIR_SPREAD,
    NoVerifiedTrial,
    TrialResult,
    TuneResult,
    failure_groups,
    save_config,
    study_key,
    top1_only_note,
    winograd_note,
)
from rooftune.tuning.setup import TRIAL_POLICY, Setup
from rooftune.tuning.setup import run_trial as _evaluate
from rooftune.tuning.skips import (
    CONVERSION_FAILED,
    NOT_RUN,
    data_notes,
    frontend_refused,
    not_run,
    nothing_quantized_notes,
)
from rooftune.tuning.space import (
    NEIGHBOUR_ORDER,
    THROUGHPUT_BATCHES,
    known_trial,
    neighbours,
    run_key,
    sampler_study,
    search_space,
    suggest,
    told_value,
)
from rooftune.tuning.trial import PREPARE_TIMEOUT_S

#: Default budget of a whole study, in seconds (what benchmarks/tune_suite.py gives each model).
DEFAULT_BUDGET_S = 240.0
#: Runners-up re-measured interleaved against the best before it is reported.
RUNNERS_UP = 2
#: Proposals in a row of configurations already measured after which the search stops.
MAX_REPEATS = 25
#: Seconds a seed or searched trial may always take to prepare, however little budget is left.
MIN_PREPARE_S = 30.0
#: A training trial may take this many times the longest preparation among the study's trials so
#: far (its step built, then checked over TRAIN_CHECK_STEPS steps: the model's own step time
#: decides it): another configuration's step can run slower (another layout, bf16 where the CPU
#: converts, a graph to compile), and a trial cut off while it prepares is lost whole.
TRAIN_PREPARE_MARGIN = 2.0

Progress = Callable[[str, int, int], None]

# the names that lived here before the study's vocabulary moved to its own modules
_validation_spec = validation_spec
__all__ = [
    "DEFAULT_BUDGET_S", "DRIFT", "MAX_REPEATS", "NEIGHBOUR_ORDER", "NOT_RUN", "OBJECTIVES", "RUNNERS_UP",
    "THROUGHPUT_BATCHES", "TRIAL_POLICY", "UNSTEADY_PAIR_SPREAD", "Progress", "Setup", "Study", "TrialResult",
    "TuneResult", "check_precisions", "default_precisions", "known_trial", "neighbours", "precisions_for",
    "run_key", "save_config", "search_space", "study_key", "top1_only_note", "tune", "winograd_note",
]


def _prepare_timeout(left: float, least: float = MIN_PREPARE_S) -> float:
    """What a seed or searched trial may take to prepare with ``left`` seconds of its share of the
    budget left (a large model's torch.compile or quantization takes minutes on few cores), and
    ``least`` however little is left."""
    return max(least, min(PREPARE_TIMEOUT_S, left))


class Study:
    """One tuning study of one model on this machine: its set-up (the checked arguments, the
    workload and its reference output, the search space, the store) made on construction, then one
    public method per phase, which :func:`tune` calls in the order of the module docstring. The
    phases share the trials measured so far (``results``), each configuration's trial by what it
    runs (``done``), the notes for the reader and where the time went (``phase_s``)."""

    def __init__(self, model: str | Any, *, example_inputs: Sequence[Any] | None = None,
                 example_kwargs: dict[str, Any] | None = None, objective: str | None = None,
                 budget_s: float = DEFAULT_BUDGET_S, trials: int | None = None, batch: int | None = None,
                 inputs: Sequence[tuple[int, ...]] | None = None, options: dict[str, Any] | None = None,
                 guidelines_only: bool = False, precisions: Sequence[str] | None = None,
                 runtimes: Sequence[str] | None = None, db: str | None = None, store: Any = None,
                 save: str | Path | None = None, progress: Progress | None = None,
                 trial_policy: Policy = TRIAL_POLICY, compare_policy: Policy = COMPARE_POLICY,
                 validate: str | Callable[..., Any] | None = None, calibration_size: int | None = None,
                 compare_pairs: int = COMPARE_PROCESS_PAIRS, train: Any = None, data: Any = None) -> None:
        from rooftune.platform import current_platform
        from rooftune.runtimes import chosen_runtimes
        from rooftune.workload.data import data_spec
        from rooftune.workload.models import check_batch, check_shapes
        from rooftune.workload.training import train_spec

        self.train = train_spec(train)
        self.data = data_spec(data)
        if self.data is not None and self.train is not None:
            raise InvalidArgument("--data", self.data.data, "allowed only without --train (the accuracy budget is of an "
                                  "inference's outputs)")
        if self.data is not None and validate is not None:
            raise InvalidArgument("--validate", validate if isinstance(validate, str) else repr(validate),
                                  "allowed only without --data (the data's metric and --max-drop decide instead)")
        if self.data is not None and calibration_size is not None:  # it sizes the data's calibration part
            self.data, calibration_size = self.data.with_calibration(calibration_size), None
        if self.train is not None:
            check_train_arguments(runtimes=runtimes, precisions=precisions, validate=validate,
                                  calibration_size=calibration_size, module=not isinstance(model, str))
        # a training step is measured in samples per second by default, an inference by its latency
        objective = objective if objective is not None else "throughput" if self.train is not None else "latency"
        self.started = time.perf_counter()
        self.steal = Steal()
        self.step: Progress = progress or (lambda *_: None)
        precisions, runtimes = check_arguments(
            objective=objective, budget_s=budget_s, compare_pairs=compare_pairs, trials=trials,
            guidelines_only=guidelines_only, precisions=precisions, runtimes=runtimes, trial_policy=trial_policy,
            compare_policy=compare_policy, save=save)
        self.platform = current_platform()
        self.available, notes_by_rt = chosen_runtimes(runtimes)
        if self.train is not None:
            self.available = {k: v for k, v in self.available.items() if k in TRAIN_RUNTIMES}
            notes_by_rt = {k: v for k, v in notes_by_rt.items() if k in TRAIN_RUNTIMES}
            if precisions is None:  # bf16 autocast where the CPU computes it natively, guarded by the loss
                precisions = ("fp32", "bf16") if native_bf16(self.platform) else ("fp32",)
        defaults = data_precisions if self.data is not None else default_precisions
        self.precisions: Sequence[str] = (defaults(self.platform, self.available) if precisions is None
                                          else precisions)
        self.calibration_size = check_precisions(self.precisions, calibration_size, self.platform)
        self.validated = validate is not None
        self.validate_spec = validation_spec(validate)
        check_batch(batch)
        self.objective = objective
        self.budget_s = budget_s
        self.trials = None if trials is None else int(trials)
        self.batch = None if batch is None else int(batch)
        self.compare_pairs = int(compare_pairs)
        self.guidelines_only = guidelines_only
        self.save = save
        self.trial_policy = trial_policy
        self.compare_policy = compare_policy
        self._load(model, example_inputs, example_kwargs, check_shapes(inputs), options, notes_by_rt)
        self.split = self._split_data()
        self._set_up(db, store)
        self.results: list[TrialResult] = []
        #: each configuration's trial (measured, resumed or refused) by what it runs (run_key)
        self.done: dict[str, TrialResult] = {}
        self.resumed = 0
        self.phase_s: dict[str, float] = {}
        self.speedup: dict[str, dict[str, Any]] = {}
        self.guide_vs_best: dict[str, Any] | None = None
        self.fp32_best: TrialResult | None = None
        self.fp32_vs_peer: dict[str, Any] | None = None
        #: configurations compared with the best at the end (twin baselines once); set by the search's plan
        self.compared = 0
        #: stored with every trial's result beside its figures (on a cluster: the node that ran it)
        self.stamp: dict[str, Any] = {}

    def _load(self, model: str | Any, example_inputs: Sequence[Any] | None, example_kwargs: dict[str, Any] | None,
              inputs: list[tuple[int, ...]] | None, options: dict[str, Any] | None,
              notes_by_rt: dict[str, str]) -> None:
        """The workload as every trial's process loads it (an ``nn.Module`` exported to a .pt2 file
        first), its op graph, and the notes a reader needs about what runs it."""
        from rooftune.workload import capture, load_workload

        if not isinstance(model, str):
            from rooftune.store import modules_dir
            from rooftune.workload.keras_models import is_keras_model, save_keras_file
            from rooftune.workload.models import export_module_file, module_takes_no_shapes

            module_takes_no_shapes(inputs if not is_keras_model(model) else None, options)
            folder = Path(self.save).resolve().parent if self.save is not None else modules_dir()
            model = str(save_keras_file(model, folder, example_inputs or example_kwargs) if is_keras_model(model)
                        else export_module_file(model, example_inputs, example_kwargs, folder))
        elif example_inputs is not None or example_kwargs is not None:
            raise InvalidArgument("example_inputs", type(example_inputs if example_inputs is not None else example_kwargs).__name__,
                                  "allowed only with an nn.Module (a model name comes with its own inputs: --input)")
        self.model: str = model
        self.wl = load_workload(model, batch=self.batch, inputs=inputs, options=options, train=self.train)
        if self.train is None and self.batch is None and self.wl.batch != 1:
            # the model's own example inputs set the batch (a callable's, a .pt2's): every
            # configuration runs it, not only the baselines (a .pt2 exported at batch 2 runs no other)
            self.batch = self.wl.batch
        # inputs as Python integers: the trials' processes read them from JSON
        self.workload = {"model": model, "inputs": [list(s) for s in inputs] if inputs else None,
                         "options": options or {}}
        if getattr(self.wl, "imports", ()):  # what a trial's process imports before it loads the model's file
            self.workload["imports"] = list(self.wl.imports)
        # the runtimes that run this framework's models (a TensorFlow model: TensorFlow's own)
        from rooftune.runtimes import RUNTIMES

        self.framework: str = getattr(self.wl, "framework", "torch")
        own = {n for n, rt in RUNTIMES.items() if self.framework in rt.frameworks}
        if not own & set(self.available):
            raise InvalidArgument("runtime", ",".join(self.available) or "none",
                                  f"a {self.framework} model runs on {', '.join(sorted(own))}")
        self.available = {n: rt for n, rt in self.available.items() if n in own}
        notes_by_rt = {n: why for n, why in notes_by_rt.items() if n in own}
        if self.train is not None:
            self.workload["train"] = self.train.as_dict()
        self.notes = [f"{k}: {v}" for k, v in notes_by_rt.items()]
        if "openvino" in self.available:
            self.notes.append("openvino-default runs OpenVINO as installed (it picks its own precision, verified by that "
                              "precision's guard); openvino-latency keeps its defaults except the precision, pinned to f32")
        if not allocator_library("jemalloc") and not allocator_library("tcmalloc"):
            self.notes.append("no jemalloc or tcmalloc installed (apt-get install libjemalloc2 libtcmalloc-minimal4): "
                              "allocator not tuned")
        self.step("capture and reference output", 0, 1)
        self.graph = capture(self.wl)
        if self.train is not None:
            # after the capture, which exports the forward pass in eval mode: a step trains the module
            self.wl.train_step()  # a loss that is not a scalar is refused before any trial runs
        elif self.graph.capture not in ("torch.export", TF_CAPTURE):
            self.notes.append(f"{self.graph.capture_note.split(';', 1)[0]}: the graph runtimes (TorchScript, ONNX Runtime, "
                              "OpenVINO, ncnn) run the model as traced on its example input, which fixes any data-dependent "
                              "branch to the one that input takes, and every configuration was verified on that input alone: "
                              "check the best on inputs of your own (rooftune.load_tuned(best.json) against the model), or "
                              "restrict the study to --runtime eager,compile")

    def _split_data(self) -> Any:
        """The user's data read and split into its calibration and evaluation parts (None without
        data); without data, the note that a reduced precision was checked on random inputs only."""
        from rooftune.workload.data import load_samples, split

        if self.data is None:
            return None
        reduced = sorted(set(self.precisions) - {"fp32"})
        self.step("read the data", 0, 1)
        parts = split(load_samples(self.data, self.wl.inputs), self.data)
        self.notes.append(f"data: {parts.describe()}; {', '.join(reduced) or 'no reduced precision'} accepted "
                          f"within a drop of {self.data.max_drop:g} of the metric against fp32")
        return parts

    def _set_up(self, db: str | None, store: Any) -> None:
        """The study's folder (the reference outputs, the prepared artifacts), the search space, the
        key its trials are stored under, and the store; the folder goes again if any of it fails."""
        from rooftune.runtimes import get_runtime
        from rooftune.store import Store

        # marked with this process, and those of dead studies removed (a study killed outright)
        self.workdir = owned_tempdir("rooftune-tune-")
        try:  # until close() removes it
            self.setup = Setup(self.workload, self.workdir, int8="int8" in self.precisions,
                               calibration_size=self.calibration_size, validate=self.validate_spec,
                               data=self.split, data_spec=self.data)
            self.setup.files(self.wl.batch)
            if "int8" in self.precisions:
                without = sorted(rn for rn, rt in self.available.items()
                                 if rt.unsupported(RunConfig(runtime=rn, precision="int8")))
                for rn in without:
                    self.notes.append(f"int8 not on {rn}: "
                                      f"{get_runtime(rn).unsupported(RunConfig(runtime=rn, precision='int8'))}")
            # a training study's throughput searches the batch unless one is given (TRAIN_BATCHES)
            space_batch = self.batch if self.train is None or self.batch or self.objective == "throughput" \
                else self.wl.batch
            self.space = search_space(self.platform, self.available, self.precisions, objective=self.objective,
                                      batch=space_batch, winograd=winograd_share(self.graph) > 0,
                                      train=self.train is not None)
            if not self.space["runtime"]:
                raise InvalidArgument("precision", ",".join(self.precisions), "no installed runtime runs it")
            self.key = study_key(self.model, self.objective, self.wl.batch, self.platform.id,
                                 {**self.space, "inputs": self.workload["inputs"], "options": self.workload["options"],
                                  "calibration": self.calibration_size if self.setup.int8 else 0,
                                  "validate": self.validate_spec,
                                  # trials judged on other data, or by another budget, are never resumed
                                  **({"data": self.setup.data_key()} if self.split is not None else {}),
                                  # a training study's trials are never an inference study's
                                  **({"train": self.workload["train"]} if self.train is not None else {}),
                                  # a study of a model of several outputs checks every one of them since
                                  # this count entered the key: trials stored before, which checked the
                                  # first alone, are not resumed as checked
                                  **({"outputs": self.setup.outputs} if self.setup.outputs > 1 else {})})
            self.own_store = store is None
            self.store = store if store is not None else Store(db)
        except BaseException:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise

    def resume(self) -> None:
        """The trials stored under this study's key: measured before, they are not run again."""
        for row in self.store.trials(self.key):
            stored = TrialResult.from_stored(row)
            self.done[run_key(stored.config)] = stored
            if stored.ok:  # checked when it ran, against this study's reference
                self.setup.verified.add(stored.config.key())
            self.resumed += 1

    def _normalized(self, cfg: RunConfig) -> RunConfig:
        """``cfg`` as it is run and stored (its key the store's)."""
        from rooftune.runtimes import get_runtime

        if self.train is not None:  # every training configuration names its optimizer's implementation
            cfg = replace(cfg, runtime_options={"optimizer": "default", **cfg.runtime_options})
        return get_runtime(cfg.runtime).normalize(cfg)

    def evaluate(self, cfg: RunConfig, prepare_timeout_s: float = PREPARE_TIMEOUT_S) -> TrialResult:
        """``cfg``'s trial: the stored or earlier one of what it runs (under ``cfg``'s name), a failed
        one where a skip rule shows it will fail (not stored: nothing was measured), else a fresh
        one, measured in its own process and stored."""
        cfg = self._normalized(cfg)
        k, rk = cfg.key(), run_key(cfg)
        if rk in self.done:  # measured before, perhaps under another name (two baselines can coincide)
            r = self.done[rk]
            return r if r.config.name == cfg.name else replace(r, config=replace(r.config, name=cfg.name))
        refused = not_run(cfg, self.done.values())
        if refused is not None:
            self.done[rk] = refused
            return refused
        r = _evaluate(cfg, self.setup, self.trial_policy, prepare_timeout_s)
        self.store.save_trial(self.platform, study_key=self.key, config_key=k, status="ok" if r.ok else "failed",
                              config=cfg.to_dict(), result={**r.to_dict(), **self.stamp})
        self.done[rk] = r
        return r

    def _left(self, until: float) -> float:
        """Seconds from now until ``until`` seconds into the study."""
        return until - (time.perf_counter() - self.started)

    def _slowest_prepare(self) -> float:
        """A training study's longest trial preparation so far (0 for inference, or before any):
        what a trial of it costs before its first timed step."""
        if self.train is None:
            return 0.0
        return max((r.prepare_s for r in self.results if math.isfinite(r.prepare_s)), default=0.0)

    def _room(self, until: float) -> bool:
        """Whether a seed or searched trial starts with ``until`` ahead: some time left, and for a
        training study as much as its slowest preparation so far (a trial started with less
        overruns the share by its steps, or is cut off and lost)."""
        left = self._left(until)
        return left > 0 and left >= self._slowest_prepare()

    def _trial_prepare_timeout(self, until: float) -> float:
        """The preparation time of a seed or searched trial starting now, with ``until`` ahead."""
        return _prepare_timeout(self._left(until), max(MIN_PREPARE_S, TRAIN_PREPARE_MARGIN * self._slowest_prepare()))

    def fixed_configurations(self) -> None:
        """The guideline and every baseline; one that OpenVINO's PyTorch frontend cannot convert
        runs from the model's ONNX export instead (what an OpenVINO user does next)."""
        if self.train is not None:
            self.guide_cfg, self.reasons = train_guideline(self.platform, self.graph, self.wl.batch)
        else:
            self.guide_cfg, self.reasons = guideline(self.platform, self.graph, self.available,
                                                     objective=self.objective, batch=self.batch)
        fixed = [self.guide_cfg, *(replace(b, batch=self.wl.batch) for b in baselines(self.platform, self.available, self.framework))]
        from_onnx: list[str] = []
        why_onnx = ""
        for i, cfg in enumerate(fixed):
            self.step(f"guideline and baselines: {cfg.name}", i, len(fixed))
            r = self.evaluate(cfg)
            refused = next((x for x in self.done.values() if frontend_refused(x, cfg)), None)
            onnx = replace(cfg, runtime_options={**cfg.runtime_options, "source": "onnx"})
            if not r.ok and refused is not None and self.available["openvino"].unsupported(onnx) is None:
                from_onnx.append(cfg.name)
                why_onnx = refused.error.removeprefix(CONVERSION_FAILED)
                r = self.evaluate(onnx)
            twin = next((x.config.name for x in self.results if x.config.key() == r.config.key()), None)
            if twin:
                self.notes.append(f"{cfg.name} is the same configuration as {twin} on this machine")
            self.results.append(r)
        if from_onnx:
            names = from_onnx[0] if len(from_onnx) == 1 else f"{', '.join(from_onnx[:-1])} and {from_onnx[-1]}"
            self.notes.append(f"{names} read{'s' if len(from_onnx) == 1 else ''} the ONNX export: "
                              f"OpenVINO's {'TensorFlow' if self.framework == 'tensorflow' else 'PyTorch'} frontend "
                              f"could not convert the model ({why_onnx})")
        self.guide, self.base = self.results[0], {r.config.name: r for r in self.results[1:]}
        self.phase_s["fixed"] = time.perf_counter() - self.started

    def _precision_seeds(self) -> list[RunConfig]:
        """The guideline in each reduced precision allowed (a training study's on eager)."""
        if self.train is not None:
            return train_precision_seeds(self.guide_cfg, self.precisions)
        return precision_seeds(self.guide_cfg, self.available, self.precisions)

    def _plan(self) -> list[RunConfig]:
        """The seeds in the order they run, and the budget's share kept for the final comparisons
        (``search_until``, ``seeds_until``): what they cost on this machine, measured from the
        fixed trials' process starts."""
        limit = self.trials if self.trials is not None else 10_000
        seeds = self._precision_seeds()
        # the runtime that ran fastest in fp32 here goes first: where the budget leaves time for
        # one seed (a large model's quantization takes minutes on few cores), it is that one
        fastest: dict[str, float] = {}
        for r in self.results:
            fastest[r.config.runtime] = min(fastest.get(r.config.runtime, math.inf), r.score(self.objective))
        seeds.sort(key=lambda c: fastest.get(c.runtime, math.inf))
        seeds += framework_seeds(self.platform, self.graph, self.guide_cfg, objective=self.objective, batch=self.batch)
        seeds += source_seeds(self.guide_cfg, self.available, self.objective)
        seeds += runtime_seeds(self.platform, self.graph, self.available, self.guide_cfg, objective=self.objective,
                               batch=self.batch)
        start_s = pair_start_s(self.results, self.platform.usable_cores)
        self.compared = len({b.config.key() for b in self.base.values() if b.ok})  # twins are compared once
        runners = RUNNERS_UP if limit > 0 or seeds else 0
        # the guideline is compared once (one pair of processes), like a runner-up
        reserve = (self.compared * comparison_s(self.compare_pairs, start_s, self.compare_policy)
                   + (runners + self.guide.ok) * comparison_s(1, start_s, self.compare_policy))
        self.search_until = self.budget_s - reserve
        self.phase_s["reserved"] = reserve
        self.phase_s["pair_start"] = start_s
        # the precision asked for comes before the search and before what the final phase can give
        # up (the runners-up, the second pairs of processes): the seeds may run until the least it
        # needs, one pair each
        self.seeds_until = (self.budget_s
                            - (self.compared + self.guide.ok) * comparison_s(1, start_s, self.compare_policy))
        return seeds

    def guideline_seeds(self) -> None:
        """The guideline in each reduced precision allowed, then from its other sources (OpenVINO
        from the ONNX export) and on the runtimes its rules name, before the search, within the
        budget's share for them. Without a search, the guideline's threads and layout in each
        reduced precision allowed are guideline configurations too, measured and checked like the
        rest, as is a TensorFlow model's guideline on TensorFlow where it runs on another runtime
        (and ncnn's seeds where ncnn's converter refused the model for the guideline)."""
        if self.guidelines_only:
            seeds = self._precision_seeds() + framework_seeds(self.platform, self.graph, self.guide_cfg,
                                                              objective=self.objective, batch=self.batch)
            if not self.guide.ok and self.guide_cfg.runtime == "ncnn":  # its converter refused the model
                seeds += runtime_seeds(self.platform, self.graph, self.available, self.guide_cfg,
                                       objective=self.objective, batch=self.batch)
            for i, cfg in enumerate(seeds):
                self.step(f"guideline seeds: {cfg.name}", i, len(seeds))
                self.results.append(self.evaluate(cfg))
            return
        seeds = self._plan()
        for i, cfg in enumerate(seeds):
            if not self._room(self.seeds_until):
                self.notes.append(f"no time left in the budget for {', '.join(c.name for c in seeds[i:])}")
                break
            self.step(f"guideline seeds: {cfg.name}", i, len(seeds))
            self.results.append(self.evaluate(cfg, prepare_timeout_s=self._trial_prepare_timeout(self.seeds_until)))

    def search(self) -> None:
        """TPE within the budget's share for it (none with ``guidelines_only``): first told every
        configuration measured so far and asked the fastest one's neighbours, then its own draws,
        until ``trials`` ran or it proposes only what was measured."""
        if not self.guidelines_only:
            self._search()
        self.phase_s["search"] = time.perf_counter() - self.started - self.phase_s["fixed"]

    def _search(self) -> None:
        """The search itself: the sampler told what was measured, then asked until the search's
        share of the budget or ``trials`` runs out."""
        study = sampler_study()
        limit = self.trials if self.trials is not None else 10_000
        told: list[Any] = []
        for r in self.results:
            t0 = known_trial(r.config, self.space, told_value(r, self.results, self.objective))
            if t0 is not None:
                study.add_trial(t0)
                told.append(t0)
        self.phase_s["told"] = len(told)
        if told:
            for params in neighbours(min(told, key=lambda t: t.value)):
                study.enqueue_trial(params, skip_if_exists=True)
        n = repeats = 0
        seen = {run_key(r.config) for r in self.results}
        while n < limit and self._room(self.search_until):
            self.step("search", min(int(time.perf_counter() - self.started), int(self.budget_s)), int(self.budget_s))
            t = study.ask()
            cfg = replace(suggest(t, self.space), name=f"trial {t.number - len(told)}")  # the told ones come first
            # a searched trial may not take the final comparisons' share of the budget to prepare
            r = self.evaluate(cfg, prepare_timeout_s=self._trial_prepare_timeout(self.search_until))
            if run_key(cfg) not in seen:
                seen.add(run_key(cfg))
                self.results.append(r)
                n += not (r.error or "").startswith(NOT_RUN)  # --trials counts what ran
                repeats = 0
            else:
                repeats += 1
                if repeats >= MAX_REPEATS:  # TPE keeps proposing measured configurations: the space is exhausted
                    self.notes.append(f"search stopped after {MAX_REPEATS} proposals in a row that were already measured")
                    break
            study.tell(t, told_value(r, self.results, self.objective))

    def shared_search(self, unit: StudyUnit) -> dict[str, Any]:
        """(A search worker of a study on a cluster) the search, its sampler shared through the
        store with the other nodes' workers (:mod:`rooftune.tuning.cluster`), until ``unit``'s
        ``search_until`` or, over all workers, ``trials`` searched trials."""
        from rooftune.fleet import current_node

        node = current_node()[0]
        started = time.time()
        self.stamp = {"node": node, "search": unit.run_id}
        claims = Claims(self.store, self.platform, self.key, unit.run_id, unit.worker, node)
        claims.take_back()
        sampler = SharedSampler(self.space, self.objective, unit.worker, unit.workers)
        self.results = list(self.done.values())  # every trial stored before: the search's start
        for r in self.results:
            sampler.tell_known(r, self.results)
        sampler.start()
        limit = self.trials if self.trials is not None else 10_000
        ran = repeats = taken = 0
        while time.time() < unit.search_until and repeats < MAX_REPEATS:
            for row in self.store.trials(self.key):  # what the other nodes stored since
                stored = TrialResult.from_stored(row)
                if run_key(stored.config) not in self.done:
                    self.done[run_key(stored.config)] = stored
                    self.results.append(stored)
                    sampler.tell_known(stored, self.results)
            t = sampler.ask()
            cfg = self._normalized(replace(suggest(t, self.space), name=f"trial {unit.worker}.{ran}"))
            if run_key(cfg) in self.done or not_run(cfg, self.done.values()) is not None:
                r = self.evaluate(cfg)  # measured before, or refused by a skip rule: nothing runs
                if run_key(cfg) not in {run_key(x.config) for x in self.results}:
                    self.results.append(r)
                repeats += 1
                sampler.tell(t, r, self.results)
                continue
            row = claims.claim(cfg.key(), cfg.to_dict())
            if not row["mine"]:  # another node runs it, or stored it since this node last read
                taken += 1
                repeats += 1
                sampler.tell(t, None, self.results)
                continue
            if claims.rank(row["id"]) >= limit:  # the other workers' trials made up --trials first
                claims.release(row["id"])
                break
            left = unit.search_until - time.time()
            r = self.evaluate(cfg, prepare_timeout_s=_prepare_timeout(left))  # stored over the claim
            self.results.append(r)
            ran += 1
            repeats = 0
            sampler.tell(t, r, self.results)
        if repeats >= MAX_REPEATS:
            self.notes.append(f"search stopped after {MAX_REPEATS} proposals in a row that were already measured "
                              f"or claimed by another node")
        return {"node": node, "worker": unit.worker, "ran": ran, "taken": taken, "started_at": started,
                "ended_at": time.time(), "notes": self.notes}

    def from_store(self, handed: dict[str, Any]) -> None:
        """(The final unit of a study on a cluster) the study as the lead and the search workers
        stored it: the guideline, the baselines (their trials read from the store, nothing run
        again), the budget's plan, then every other stored trial; the lead's notes and times."""
        self.resume()
        self.fixed_configurations()
        if not self.guidelines_only:
            self._plan()
        known = {run_key(r.config) for r in self.results}
        self.results += [r for k, r in self.done.items() if k not in known]
        self.notes += [n for n in handed.get("notes", ()) if n not in self.notes]
        self.phase_s.update(fixed=handed["phase_s"]["fixed"], search=handed.get("search_s", 0.0))

    def confirm_best(self) -> None:
        """The fastest verified trial, then (after a search) the runners-up re-measured interleaved
        against it: one trial's median can be off on a shared machine, and one that is faster with
        its whole CI takes the best's place."""
        self.cost = FinalCost(pair_start_s(self.results, self.platform.usable_cores), self.compare_policy)
        self.comparisons = Comparisons(self.setup, self.objective, self.compare_policy,
                                       deadline=self.started + self.budget_s, cost=self.cost)
        # a peer computing in a precision the study does not search (OpenVINO as installed picks
        # bf16 under --fp32) is compared as a peer, never the answer
        self.verified = [r for r in self.results if r.ok and r.precision in self.precisions]
        if not self.verified:
            raise NoVerifiedTrial(failure_groups(self.results), self.precisions)
        self.best = min(self.verified, key=lambda r: r.score(self.objective))
        if self.guidelines_only:
            return
        ranked = sorted(self.verified, key=lambda r: r.score(self.objective))
        # (the guideline and the baselines are compared with the best in the final comparisons in any case)
        fixed_keys = {r.config.key() for r in (self.guide, *self.base.values())}
        runners_up = [r for r in ranked[1:] if r.config.key() not in fixed_keys][:RUNNERS_UP]
        for i, other in enumerate(runners_up):
            # what the comparisons after these need at the least (one pair of processes each): a
            # runner-up, which may take the best's place, goes before a slow baseline's second pair
            if self.started + self.budget_s - time.perf_counter() < (self.compared + self.guide.ok + 1) * self.cost(1):
                self.notes.append(f"no time left in the budget to re-measure {len(runners_up) - i} runner(s)-up "
                                  "against the best, interleaved")
                break
            self.step("confirming the best against the runners-up, interleaved", i, len(runners_up))

            def again(b: RunConfig = self.best.config, o: RunConfig = other.config) -> dict[str, Any]:
                return self.comparisons(b, o, 1)

            c = self.cost.timed(again)
            if c.get("ci_high", math.inf) < 1.0:  # median(other) / median(best), all of it below 1
                self.notes.append(f"re-measured interleaved, {other.config.describe()} was {1 / c['ratio']:.2f}x faster "
                                  f"than {self.best.config.describe()} (trial medians said otherwise): it is the best")
                self.best = other

    def final_comparisons(self) -> None:
        """The guideline, then every baseline, against the best, interleaved: the reported figures.
        A baseline faster by the medians takes the best's place (once each); the guideline is then
        measured against the new best, and takes the place back by the rule of ``guideline_wins``."""
        best, guide = self.best, self.guide
        if guide.ok:
            # the guideline's distance from the best is a reported figure: interleaved, like the
            # speedups (two trial medians taken minutes apart are not comparable on a shared machine)
            self.step("the guideline against the best, interleaved", 0, 1)
            self.guide_vs_best = self.cost.timed(lambda: self.comparisons(best.config, guide.config, 1))
            if self.guide_vs_best.get("ci_high", math.inf) < 1.0:  # median(guideline) / median(best), all below 1
                self.notes.append(f"re-measured interleaved, the guideline was {1 / self.guide_vs_best['ratio']:.2f}x "
                                  f"faster than {best.config.describe()} (trial medians said otherwise): it is the best")
                best = guide
                self.guide_vs_best = itself()
            elif "error" in self.guide_vs_best:
                self.notes.append(f"the guideline could not be compared with the best: {self.guide_vs_best['error']}")
        promoted: set[str] = set()
        lost_to: dict[str, str] = {}
        taken_back: set[str] = set()
        retaken = False
        while True:
            compared_with = best.config.key()
            best, self.speedup = against_baselines(
                best, self.base, self.setup, self.objective, self.compare_policy, self.compare_pairs, self.notes,
                self.step, deadline=self.started + self.budget_s, cost=self.cost, comparisons=self.comparisons,
                promoted=promoted, eligible=lambda t: t.precision in self.precisions, lost_to=lost_to,
                retaken=taken_back)
            if self.guide_vs_best is None or best.config.key() == compared_with:
                break
            # a baseline took the best's place: the guideline is measured against it (pooled with
            # the comparison that handed it back where the guideline was the best then)
            self.step("the guideline against the new best, interleaved", 0, 1)
            self.guide_vs_best = g = self.comparisons(best.config, guide.config, 1)
            was_best = compared_with == guide.config.key()
            if retaken or not guideline_wins(g, was_best):
                break
            self.notes.append(f"the guideline, measured against {best.config.name or best.config.describe()}, read "
                              f"{1 / g['ratio']:.2f}x faster by the medians{pooled_text(g)} "
                              f"(95 % CI of guideline/best {g['ci_low']:.2f}-{g['ci_high']:.2f}): "
                              f"it is the best{' again' if was_best else ''}")
            best, self.guide_vs_best, retaken = guide, itself(), True
        self.best = best

    def steady(self) -> None:
        """The budget left spent on the comparisons whose pairs of processes disagreed."""
        self.notes += steadier(self.best, self.base, self.speedup, self.comparisons, self.cost,
                               self.started + self.budget_s, UNSTEADY_PAIR_SPREAD, self.step)

    def fp32_answer(self) -> None:
        """Where the best computes in a reduced precision: the fp32 answer beside it
        (:func:`_fp32_answer`)."""
        self.fp32_best, self.fp32_vs_peer = _fp32_answer(
            self.best, self.verified, self.base, self.speedup, self.comparisons, self.compare_pairs, self.objective,
            self.step, self.notes)

    def finish(self) -> None:
        """The final phase's time, and the notes read from the whole study's trials."""
        self.phase_s["final"] = time.perf_counter() - self.started - self.phase_s["fixed"] - self.phase_s["search"]
        self.phase_s["pairs"] = self.comparisons.pairs_run
        if shortened := self.comparisons.shortened_note():
            self.notes.append(shortened)
        if rewritten := winograd_note(self.best):
            self.notes.append(rewritten)
        if top1_only := top1_only_note(self.results, self.validated):
            self.notes.append(top1_only)
        self.notes += nothing_quantized_notes(self.results)
        self.notes += data_notes(self.best, self.split is not None, self.train is not None)

    def final_phases(self) -> None:
        """Every phase after the search, in order, on this machine: what one node of a cluster
        runs too, once the study is read back from the store."""
        self.confirm_best()
        self.final_comparisons()
        self.steady()
        self.fp32_answer()
        self.finish()
        self.save_best()

    def save_best(self) -> None:
        """With ``save``: the best's configuration, with the figures the result reports, and its
        prepared artifact (prepared again where the best came from the store)."""
        from rooftune.runtimes import get_runtime

        if not self.save:
            return
        best = self.best
        if (not best.artifact or not Path(best.artifact).exists()) and \
                get_runtime(best.config.runtime).artifact_file(best.config, self.workdir) is not None:
            # the best came from the store, its artifact with the earlier study's folder:
            # prepared (and verified) again, so that the saved configuration runs what was measured
            self.step("preparing the best's artifact again", 0, 1)
            prepared = _evaluate(best.config, self.setup, self.trial_policy)
            if prepared.ok and prepared.artifact:
                self.best = best = replace(best, artifact=prepared.artifact)
                self.notes.append("the best was measured in an earlier study (from the store): its artifact "
                                  "was prepared again for --save")
            else:
                self.notes.append(f"the best's artifact could not be prepared again for --save: "
                                  f"{prepared.error or 'not verified'}")
        # best.json gives the figures the result reports (the interleaved ones where compared)
        reported = TuneResult(model=self.model, objective=self.objective, batch=self.wl.batch, best=best,
                              guideline=self.guide, guideline_reasons=(), baselines=self.base, speedup=self.speedup,
                              trials=(), notes=(), duration_s=0.0,
                              guideline_vs_best=self.guide_vs_best).with_interleaved_figures()
        save_config(reported.best, Path(self.save), self.workload, calibration_size=self.calibration_size,
                    validate=self.validate_spec)

    def close(self) -> None:
        """The store closed where the study opened it, and the study's folder removed."""
        if self.own_store:
            self.store.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def result(self) -> TuneResult:
        """The study's result, after :meth:`close`: the prepared artifacts went with the study's
        folder, so the best's is its copy beside ``save`` and the others' paths are dropped rather
        than left pointing at nothing; its figures from the interleaved comparisons."""
        save = self.save
        saved_artifact = json.loads(Path(save).read_text()).get("artifact") if save else None

        def kept(t: TrialResult) -> TrialResult:
            if save and t.config.key() == self.best.config.key():
                return replace(t, artifact=saved_artifact)
            return t if not t.artifact or Path(t.artifact).exists() else replace(t, artifact=None)

        notes = list(self.notes)
        stolen = steal_warning(self.steal.share(), "the study")
        if stolen:
            notes.append(stolen + "; the interleaved ratios hold better than the times")
        took = time.perf_counter() - self.started
        if took > 1.1 * self.budget_s + 5:
            # the guideline, the baselines and one comparison each are measured whatever the budget
            p = self.phase_s
            notes.append(f"the study took {took:.0f} s against a budget of {self.budget_s:.0f} s: the guideline, the "
                         f"baselines and their comparisons with the best alone took "
                         f"{p.get('fixed', 0) + p.get('final', 0):.0f} s on this model; a budget below that buys no "
                         f"search")
        return TuneResult(model=self.model, objective=self.objective, batch=self.wl.batch, best=kept(self.best),
                          guideline=kept(self.guide), guideline_reasons=tuple(self.reasons),
                          baselines={k: kept(v) for k, v in self.base.items()}, speedup=self.speedup,
                          trials=tuple(kept(t) for t in self.results), notes=tuple(notes),
                          duration_s=time.perf_counter() - self.started, resumed=self.resumed,
                          workload=self.workload, guideline_vs_best=self.guide_vs_best, phase_s=self.phase_s,
                          batches=tuple(self.space["batch"]),
                          fp32_best=kept(self.fp32_best) if self.fp32_best is not None else None,
                          fp32_vs_peer=self.fp32_vs_peer).with_interleaved_figures()



def tune(
    model: str | Any,
    *,
    example_inputs: Sequence[Any] | None = None,
    example_kwargs: dict[str, Any] | None = None,
    objective: str | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    trials: int | None = None,
    batch: int | None = None,
    inputs: Sequence[tuple[int, ...]] | None = None,
    options: dict[str, Any] | None = None,
    guidelines_only: bool = False,
    precisions: Sequence[str] | None = None,
    runtimes: Sequence[str] | None = None,
    db: str | None = None,
    store: Any = None,
    save: str | Path | None = None,
    progress: Progress | None = None,
    trial_policy: Policy = TRIAL_POLICY,
    compare_policy: Policy = COMPARE_POLICY,
    validate: str | Callable[..., Any] | None = None,
    calibration_size: int | None = None,
    compare_pairs: int = COMPARE_PROCESS_PAIRS,
    train: Any = None,
    cluster: str | None = None,
    data: Any = None,
) -> TuneResult:
    """Tune ``model``'s runtime configuration on this machine (see the module docstring).

    ``model`` is a name as ``rooftune analyze`` takes it, or an ``nn.Module`` with its
    ``example_inputs`` (and ``example_kwargs``), which every trial's process must load: it is
    exported by torch.export to a .pt2 file named by its content, beside ``save`` where given,
    else in rooftune's data folder (where the default store lives), and the study, its result and
    a saved configuration name that file. The same module tuned again resumes.

    ``precisions`` None searches what :func:`default_precisions` gives: fp32 and the reduced
    precisions a peer computes in by default on this machine (bf16 where the CPU has it natively
    and OpenVINO is installed), each under the accuracy guard; ``("fp32",)`` keeps to fp32.
    ``precisions`` may add ``bf16`` (where the ISA has it) and ``int8`` (post-training static
    quantization by each runtime's quantizer, calibrated on ``calibration_size`` inputs drawn like
    the workload's; a trial passes the guard - mean cosine >= 0.99, top-1 agreement >= 99 % on the
    calibration inputs - or ``validate``, an importable ``module:function(outputs, references)``
    returning a bool or (bool, why), called in the trial's process).

    Each comparison of the best against a baseline is spread over ``compare_pairs`` fresh pairs
    of processes, or one where the budget is short (the time kept for the final comparisons comes
    from the trials' measured process starts; see :class:`FinalCost`). Every trial is stored as
    it finishes; calling again with the same model, objective and search space resumes: stored
    configurations are not run again.

    ``train`` (True or a :class:`rooftune.workload.training.TrainSpec`) tunes a training step
    instead (objective ``throughput``, samples per second, by default; ``latency`` is the step's
    time): eager and torch.compile, fp32 and bf16 autocast where the CPU has native bf16, the
    optimizer's implementation (default, foreach, fused) and the batch (throughput, unless given)
    searched beside threads, allocator, OpenMP settings and layout; each configuration's first
    steps checked against vanilla fp32 training (:func:`rooftune.tuning.verify.check_training`).

    ``data`` (a :class:`rooftune.workload.data.DataSpec`, or the data's folder, ``.npz`` or
    ``MODULE:CALLABLE``) judges every reduced-precision configuration on the user's own samples:
    int8 calibrates on the data's calibration part, and a configuration is accepted only where its
    metric on the evaluation part drops at most ``max_drop`` below fp32's (its interval reported);
    bf16 and int8 are searched by default where the CPU runs them natively.

    ``cluster`` (a Ray cluster's head, ``HOST:PORT``) spreads the study's trials over the nodes of
    one platform (:mod:`rooftune.tuning.cluster`): ``model`` a name every node loads, ``db`` a
    store every node reaches, ``save`` written by the node of the final comparisons.
    """
    if cluster is not None:
        if data is not None:
            raise InvalidArgument("--data", str(getattr(data, "data", data)), "allowed only without --cluster (the nodes "
                                  "do not share the data's files)")
        kwargs = dict(objective=objective, budget_s=budget_s, trials=trials, batch=batch, inputs=inputs,
                      options=options, guidelines_only=guidelines_only, precisions=precisions, runtimes=runtimes,
                      save=save, trial_policy=trial_policy, compare_policy=compare_policy, validate=validate,
                      calibration_size=calibration_size, compare_pairs=compare_pairs, train=train)
        return _tune_on_cluster(cluster, model, kwargs, example_inputs=example_inputs, example_kwargs=example_kwargs,
                                db=db, store=store, progress=progress)
    study = Study(model, example_inputs=example_inputs, example_kwargs=example_kwargs, objective=objective,
                  budget_s=budget_s, trials=trials, batch=batch, inputs=inputs, options=options,
                  guidelines_only=guidelines_only, precisions=precisions, runtimes=runtimes, db=db, store=store,
                  save=save, progress=progress, trial_policy=trial_policy, compare_policy=compare_policy,
                  validate=validate, calibration_size=calibration_size, compare_pairs=compare_pairs, train=train,
                  data=data)
    try:
        study.resume()
        study.fixed_configurations()
        study.guideline_seeds()
        study.search()
        study.final_phases()
    finally:
        study.close()
    return study.result()


def _tune_on_cluster(cluster: str, model: Any, kwargs: dict[str, Any], *, example_inputs: Any, example_kwargs: Any,
                     db: str | None, store: Any, progress: Progress | None) -> TuneResult:
    """:func:`tune` on a Ray cluster's nodes: the arguments checked here first (what a node would
    refuse, the same words), then the study's units (:func:`rooftune.tuning.cluster.run_study`)."""
    from rooftune.fleet import RayExecutor, check_address, check_shareable, shared_store
    from rooftune.platform import current_platform

    check_address(cluster)
    model = check_cluster_arguments(model, example_inputs=example_inputs, example_kwargs=example_kwargs, store=store)
    kwargs = {**kwargs, "validate": validation_spec(kwargs["validate"])}
    train = kwargs["train"]
    objective = kwargs["objective"] or ("throughput" if train else "latency")
    check_arguments(objective=objective, budget_s=kwargs["budget_s"], compare_pairs=kwargs["compare_pairs"],
                    trials=kwargs["trials"], guidelines_only=kwargs["guidelines_only"],
                    precisions=kwargs["precisions"], runtimes=kwargs["runtimes"],
                    trial_policy=kwargs["trial_policy"], compare_policy=kwargs["compare_policy"], save=kwargs["save"])
    check_shareable(db)
    executor = RayExecutor(cluster)  # an unreachable cluster is named before anything is written
    try:
        unit = StudyUnit(db=shared_store(executor, db), model=model, kwargs=kwargs, run_id=new_run_id(), started_at=time.time())
        return run_study(executor, unit, search=search_unit, final=final_unit,
                         own_platform=current_platform().id, cluster=executor.address, progress=progress)
    finally:
        executor.close()


def _node_study(unit: StudyUnit) -> Study:
    """(On a node) the study of ``unit``, its budget counted from the study's start, its trials
    stamped with this node; refused where the node finds another study key than the lead's."""
    from rooftune.fleet import current_node

    study = Study(unit.model, db=unit.db, **unit.kwargs)
    study.started = time.perf_counter() - (time.time() - unit.started_at)
    study.stamp = {"node": current_node()[0]}
    if unit.key and study.key != unit.key:
        study.close()
        raise ClusterError(f"node {current_node()[1]} ({current_node()[0][:12]}) finds another study key than the "
                           f"lead node: its platform or installed runtimes differ")
    return study


def search_unit(unit: StudyUnit) -> dict[str, Any]:
    """(On a node) one worker of a study on a cluster. Worker 0 is the lead: it runs the
    guideline, the baselines and the seeds, and marks its part done in the store; the others build
    their study meanwhile, then wait for that mark and read the lead's plan of the budget from
    the stored trials. Then each searches (:meth:`Study.shared_search`)."""
    from rooftune.fleet import current_node

    study = _node_study(unit)
    try:
        node = current_node()[0]
        if unit.role == "lead":
            study.resume()
            study.fixed_configurations()
            study.guideline_seeds()
            study.store.update_fleet_run(unit.run_id, done=1)
        elif not _lead_done(study, unit):  # the lead's node was lost: its unit, run again, searches
            return {"key": study.key, "node": node, "worker": unit.worker, "ran": 0, "taken": 0,
                    "started_at": time.time(), "ended_at": time.time(), "notes": []}
        else:
            study.resume()  # what the lead stored
            if not study.done:  # the lead stored its trials under another key
                raise ClusterError(f"node {current_node()[1]} ({node[:12]}) finds another study key than the lead "
                                   f"node: its platform or installed runtimes differ")
            study.fixed_configurations()  # (from the store: nothing runs again)
            study._plan()
        handed = {"key": study.key, "search_started": time.time(),
                  "lead": {"notes": list(study.notes), "phase_s": {"fixed": study.phase_s["fixed"]}, "node": node}
                  if unit.role == "lead" else None}
        if study.guidelines_only:
            return {**handed, "node": node, "worker": unit.worker, "ran": 0, "taken": 0, "started_at": time.time(),
                    "ended_at": time.time(), "notes": []}
        return {**handed, **study.shared_search(replace(unit, search_until=unit.started_at + study.search_until))}
    finally:
        study.close()


#: How often a search worker looks whether the lead's part of the study is done.
LEAD_POLL_S = 0.5


def _lead_done(study: Study, unit: StudyUnit) -> bool:
    """Wait until the lead marked its part done (True), or the study's budget ran out (False)."""
    end = unit.started_at + study.budget_s
    while time.time() < end:
        run = study.store.fleet_run(unit.run_id)
        if run is not None and run["done"] >= 1:
            return True
        time.sleep(LEAD_POLL_S)
    return False


def final_unit(unit: StudyUnit) -> tuple[TuneResult, str]:
    """(On a node) the final part of a study on a cluster, every comparison on this one node: the
    study read back from the store, the runners-up, the guideline and the baselines compared with
    the best, interleaved; the result and this node's id."""
    from rooftune.fleet import current_node

    study = _node_study(unit)
    try:
        study.from_store(unit.handed)
        study.final_phases()
    finally:
        study.close()
    return study.result(), current_node()[0]


def _fp32_answer(best: TrialResult, verified: Sequence[TrialResult], base: dict[str, TrialResult],
                 speedup: dict[str, dict[str, Any]], comparisons: Any, pairs: int, objective: str,
                 step: Callable[[str, int, int], None],
                 notes: list[str]) -> tuple[TrialResult | None, dict[str, Any] | None]:
    """Where the best computes in a reduced precision: the fastest verified fp32 configuration
    (by its trial) and its interleaved comparison with the fp32 peer that ran fastest against the
    best (the smallest ratio), over ``pairs`` pairs of processes: the answer for a user who must
    keep fp32, beside the overall one; the peer itself where it reads faster. (None, None) where
    the best is fp32 or nothing compares."""
    if best.precision == "fp32":
        return None, None
    fp32 = [r for r in verified if r.precision == "fp32"]
    peers = [(c["ratio"], n) for n, c in speedup.items()
             if base[n].ok and base[n].precision == "fp32" and math.isfinite(c.get("ratio", math.nan))]
    if not fp32 or not peers:
        return None, None
    ours = min(fp32, key=lambda r: r.trial_score(objective))
    peer = min(peers)[1]
    step("the fp32 best against the fastest fp32 peer, interleaved", 0, 1)
    c = comparisons(ours.config, base[peer].config, pairs)
    if "error" in c:
        notes.append(f"the fp32 best could not be compared with {peer}: {c['error']}")
        return ours, None
    if c.get("pairs") and c["ratio"] < 1.0:
        # the peer read faster by the medians: the fp32 answer is the peer itself, as a baseline
        # that reads faster takes the best's place, so it is never slower than a user's own pick
        notes.append(f"the fastest fp32 trial, {ours.describe()}, read {1 / c['ratio']:.2f}x slower than {peer} "
                     f"interleaved (95 % CI of {peer}/it {c['ci_low']:.2f}-{c['ci_high']:.2f}): the fp32 best is {peer}")
        return base[peer], {**itself(), "peer": peer}
    return ours, {**c, "peer": peer}

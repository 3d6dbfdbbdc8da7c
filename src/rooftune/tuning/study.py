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
The Study's phases share one state (the trials, the best, the comparisons, the notes): the class
is put together from its parts, each a module: the set-up (:mod:`rooftune.tuning.prepare`), the
phases up to the search (:mod:`rooftune.tuning.phases`) and after it
(:mod:`rooftune.tuning.final_phases`); this module holds the state, the measuring of one
configuration, the result, and :func:`tune`.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rooftune.bench import Policy
from rooftune.bench.canary import Steal, steal_warning
from rooftune.errors import ClusterError, InvalidArgument
from rooftune.runconfig import RunConfig
from rooftune.tuning.arguments import (
    OBJECTIVES,
    TRAIN_RUNTIMES,
    check_precisions,
    check_train_model,
    default_precisions,
    precisions_for,
    validation_spec,
)
from rooftune.tuning.cluster import StudyUnit, check_cluster_arguments, new_run_id, run_study
from rooftune.tuning.compare import COMPARE_POLICY, COMPARE_PROCESS_PAIRS
from rooftune.tuning.final_phases import RUNNERS_UP, FinalPhases
from rooftune.tuning.phases import MAX_REPEATS, MIN_PREPARE_S, TRAIN_PREPARE_MARGIN, SearchPhases
from rooftune.tuning.prepare import StudySetUp
from rooftune.tuning.result import (
    DRIFT,
    UNSTEADY_PAIR_SPREAD,
    TrialResult,
    TuneResult,
    save_config,
    study_key,
    top1_only_note,
    winograd_note,
)
from rooftune.tuning.serving import STUDY_SHARE, ServingPhase
from rooftune.tuning.setup import TRIAL_POLICY, Setup
from rooftune.tuning.setup import run_trial as _evaluate
from rooftune.tuning.skips import NOT_RUN, not_run
from rooftune.tuning.space import (
    NEIGHBOUR_ORDER,
    THROUGHPUT_BATCHES,
    known_trial,
    neighbours,
    run_key,
    search_space,
)
from rooftune.tuning.spec import DEFAULT_BUDGET_S, TuneSpec, searched_precisions
from rooftune.tuning.trial import PREPARE_TIMEOUT_S

if TYPE_CHECKING:
    from rooftune.store import Store
    from rooftune.workload.data import DataSpec
    from rooftune.workload.training import TrainSpec

Progress = Callable[[str, int, int], None]

# the names that lived here before the study's vocabulary moved to its own modules
_validation_spec = validation_spec
__all__ = [
    "DEFAULT_BUDGET_S", "DRIFT", "MAX_REPEATS", "MIN_PREPARE_S", "NEIGHBOUR_ORDER", "NOT_RUN", "OBJECTIVES",
    "PREPARE_TIMEOUT_S", "RUNNERS_UP", "THROUGHPUT_BATCHES", "TRAIN_PREPARE_MARGIN", "TRIAL_POLICY",
    "UNSTEADY_PAIR_SPREAD", "Progress", "Setup", "Study", "TrialResult", "TuneResult", "TuneSpec", "check_precisions",
    "default_precisions", "known_trial", "neighbours", "precisions_for", "run_key", "save_config", "search_space",
    "study_key", "top1_only_note", "tune", "tune_spec", "winograd_note",
]


class Study(StudySetUp, SearchPhases, FinalPhases, ServingPhase):
    """One tuning study of one model on this machine, as ``spec`` asks: constructed, it knows what
    it will search here (the runtimes installed, the precisions this CPU runs); :meth:`prepare`
    sets it up (the model exported and loaded, its reference output, the search space, the
    store); then one public method per phase, which :func:`tune` calls in the order of the module
    docstring. The phases share the trials measured so far (``results``), each configuration's
    trial by what it runs (``done``), the notes for the reader and where the time went
    (``phase_s``).

    ``store`` is a :class:`rooftune.store.Store`, which stays open (the caller's), or the URL or
    file path of one (None: the default store), which the study opens and :meth:`close` closes."""

    def __init__(self, model: str | Any, spec: TuneSpec, store: str | os.PathLike[str] | Store | None = None, *,
                 example_inputs: Sequence[Any] | None = None, example_kwargs: dict[str, Any] | None = None,
                 progress: Progress | None = None, analysis: Any = None) -> None:
        from rooftune.platform import current_platform
        from rooftune.runtimes import chosen_runtimes

        if spec.train is not None:
            check_train_model(model)
        self.spec = spec
        self.given = (model, example_inputs, example_kwargs)
        self.store_given = store
        #: the model's analysis on this machine's roofline (rooftune.analysis.Analysis), where the
        #: caller made one: the sensitivity pass reads each layer's time and int8 gain from it
        self.analysis = analysis
        self.sensitivity: Any = None  # set by prepare() with the user's data and int8
        self.train = cast("TrainSpec | None", spec.train)  # (the spec made it one)
        self.data = cast("DataSpec | None", spec.data)
        self.started = time.perf_counter()
        self.steal = Steal()
        self.step: Progress = progress or (lambda *_: None)
        self.platform = current_platform()
        self.available, self.runtime_notes = chosen_runtimes(spec.runtimes)
        if self.train is not None:
            self.available = {k: v for k, v in self.available.items() if k in TRAIN_RUNTIMES}
            self.runtime_notes = {k: v for k, v in self.runtime_notes.items() if k in TRAIN_RUNTIMES}
        self.precisions, self.calibration_size = searched_precisions(spec, self.platform, self.available)
        self.validated = spec.validate is not None
        self.validate_spec = cast("str | None", spec.validate)
        self.objective = cast(str, spec.objective)
        # a serving phase (rooftune.tuning.serving) takes its share of the budget after the others
        self.budget_s = cast(float, spec.budget_s) * (STUDY_SHARE if spec.scenario in ("server", "offline") else 1.0)
        self.trials = spec.trials
        self.batch = spec.batch
        self.compare_pairs = spec.compare_pairs
        self.guidelines_only = spec.guidelines_only
        self.save = spec.save
        self.trial_policy: Policy = spec.trial_policy
        self.compare_policy: Policy = spec.compare_policy
        self.own_store = False  # until prepare() opens one
        #: the copy of the best's artifact that save_best wrote beside ``save``
        self.saved_best_artifact: str | None = None
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
                    validate=self.validate_spec, data_spec=self._data_record())
        self.saved_best_artifact = json.loads(Path(self.save).read_text()).get("artifact")

    def _data_record(self) -> dict[str, Any] | None:
        """The user's data as best.json records it: a folder or file by its absolute path, so that
        the file loads from any working folder."""
        if self.data is None:
            return None
        record = self.data.as_dict()
        if Path(record["data"]).exists():
            record["data"] = str(Path(record["data"]).resolve())
        return record


    def close(self) -> None:
        """The store closed where the study opened it, and the study's folder removed."""
        if self.own_store:
            self.store.close()
        if hasattr(self, "workdir"):  # prepare() made it
            shutil.rmtree(self.workdir, ignore_errors=True)

    def result(self) -> TuneResult:
        """The study's result, after :meth:`close`: the prepared artifacts went with the study's
        folder, so the best's is its copy beside ``save`` and the others' paths are dropped rather
        than left pointing at nothing; its figures from the interleaved comparisons."""
        save = self.save
        # (a serving phase saved its best setup over the study's best: the study's own copy is kept)
        saved_artifact = self.saved_best_artifact if save else None

        def kept(t: TrialResult) -> TrialResult:
            if save and t.config.key() == self.best.config.key():
                return replace(t, artifact=saved_artifact)
            return t if not t.artifact or Path(t.artifact).exists() else replace(t, artifact=None)

        notes = list(self.notes)
        stolen = steal_warning(self.steal.share(), "the study")
        if stolen:
            notes.append(stolen + "; the interleaved ratios hold better than the times")
        took = time.perf_counter() - self.started
        if took > 1.1 * cast(float, self.spec.budget_s) + 5:
            # the guideline, the baselines and one comparison each are measured whatever the budget
            p = self.phase_s
            notes.append(f"the study took {took:.0f} s against a budget of {self.spec.budget_s:.0f} s: the guideline, the "
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
                          fp32_vs_peer=self.fp32_vs_peer,
                          sensitivity=self.sensitivity.to_dict() if self.sensitivity is not None else None,
                          serving=self.serving_result).with_interleaved_figures()



def tune(
    model: str | Any,
    *,
    example_inputs: Sequence[Any] | None = None,
    example_kwargs: dict[str, Any] | None = None,
    objective: str | None = None,
    budget_s: float | None = None,
    trials: int | None = None,
    batch: int | None = None,
    inputs: Sequence[tuple[int, ...]] | None = None,
    options: dict[str, Any] | None = None,
    guidelines_only: bool = False,
    precisions: Sequence[str] | None = None,
    runtimes: Sequence[str] | None = None,
    store: str | os.PathLike[str] | Store | None = None,
    save: str | Path | None = None,
    progress: Progress | None = None,
    trial_policy: Policy = TRIAL_POLICY,
    compare_policy: Policy = COMPARE_POLICY,
    validate: str | Callable[..., Any] | None = None,
    calibration_size: int | None = None,
    compare_pairs: int = COMPARE_PROCESS_PAIRS,
    train: TrainSpec | bool | None = None,
    cluster: str | None = None,
    data: DataSpec | str | None = None,
    scenario: str | None = None,
    slo_p99_ms: float | None = None,
    slo_p90_ms: float | None = None,
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

    ``scenario`` serves the model as MLPerf's scenarios do (:mod:`rooftune.tuning.serving`):
    ``single-stream`` is the latency objective with its p90 and p99; ``server`` (with
    ``slo_p99_ms`` or ``slo_p90_ms``) finds the most requests per second, arriving as a Poisson
    process, that keep that latency percentile within the target, searching instances, threads,
    streams, batch and dynamic batching over the study's fastest configurations, against the
    serving peers as their users run them; ``offline`` the most samples per second with every
    request queued at once. ``budget_s`` None: 240 s, 480 s with a server or offline scenario
    (60 % of it for the serving phase).

    ``cluster`` (a Ray cluster's head, ``HOST:PORT``) spreads the study's trials over the nodes of
    one platform (:mod:`rooftune.tuning.cluster`): ``model`` a name every node loads, ``store`` the
    URL of a store every node reaches, ``save`` written by the node of the final comparisons.

    ``store`` is a :class:`rooftune.store.Store` (left open) or the URL or file path of one (None:
    the default store). The arguments but the model, its example inputs, the store, the progress
    and the cluster make a :class:`~rooftune.tuning.spec.TuneSpec` (checked there), which
    :func:`tune_spec` runs.
    """
    if cluster is not None and scenario is not None:
        raise InvalidArgument("--scenario", scenario, "allowed only without --cluster (a server is measured on one "
                              "machine)")
    if cluster is not None and data is not None:
        raise InvalidArgument("--data", str(getattr(data, "data", data)), "allowed only without --cluster (the nodes "
                              "do not share the data's files)")
    spec = TuneSpec(objective=objective, budget_s=budget_s, trials=trials, batch=batch, inputs=inputs, options=options,
                    guidelines_only=guidelines_only, precisions=precisions, runtimes=runtimes, save=save,
                    trial_policy=trial_policy, compare_policy=compare_policy, validate=validate,
                    calibration_size=calibration_size, compare_pairs=compare_pairs, train=train, data=data,
                    scenario=scenario, slo_p99_ms=slo_p99_ms, slo_p90_ms=slo_p90_ms)
    return tune_spec(model, spec, store=store, example_inputs=example_inputs, example_kwargs=example_kwargs,
                     progress=progress, cluster=cluster)


def tune_spec(model: str | Any, spec: TuneSpec, *, store: str | os.PathLike[str] | Store | None = None,
              example_inputs: Sequence[Any] | None = None, example_kwargs: dict[str, Any] | None = None,
              progress: Progress | None = None, cluster: str | None = None, analysis: Any = None) -> TuneResult:
    """:func:`tune` of a spec built already: the study's phases in order, on this machine or on the
    Ray cluster ``cluster``. ``analysis``, the model's :class:`rooftune.analysis.Analysis` at the
    study's batch where the caller has one, gives the sensitivity pass (with the user's data and
    int8) each layer's time and roofline position."""
    if cluster is not None:
        return _tune_on_cluster(cluster, model, spec, example_inputs=example_inputs, example_kwargs=example_kwargs,
                                store=store, progress=progress)
    study = Study(model, spec, store, example_inputs=example_inputs, example_kwargs=example_kwargs, progress=progress,
                  analysis=analysis)
    try:
        study.prepare()
        study.resume()
        study.fixed_configurations()
        study.guideline_seeds()
        study.search()
        study.final_phases()
        study.serving()
        study.save_serving()
    finally:
        study.close()
    return study.result()


def _tune_on_cluster(cluster: str, model: str | Any, spec: TuneSpec, *, example_inputs: Sequence[Any] | None,
                     example_kwargs: dict[str, Any] | None, store: str | os.PathLike[str] | Store | None,
                     progress: Progress | None) -> TuneResult:
    """:func:`tune` on a Ray cluster's nodes: what a node would refuse checked here first (the
    same words; ``spec`` is checked already), then the study's units
    (:func:`rooftune.tuning.cluster.run_study`)."""
    from rooftune.fleet import RayExecutor, check_address, check_shareable, shared_store
    from rooftune.platform import current_platform

    check_address(cluster)
    model = check_cluster_arguments(model, example_inputs=example_inputs, example_kwargs=example_kwargs, store=store)
    url = None if store is None else os.fspath(store)  # a Store object is refused above
    check_shareable(url)
    executor = RayExecutor(cluster)  # an unreachable cluster is named before anything is written
    try:
        unit = StudyUnit(store=shared_store(executor, url), model=model, spec=spec, run_id=new_run_id(),
                         started_at=time.time())
        return run_study(executor, unit, search=search_unit, final=final_unit,
                         own_platform=current_platform().id, cluster=executor.address, progress=progress)
    finally:
        executor.close()


def _node_study(unit: StudyUnit) -> Study:
    """(On a node) the study of ``unit``, prepared, its budget counted from the study's start, its
    trials stamped with this node; refused where the node finds another study key than the lead's."""
    from rooftune.fleet import current_node

    study = Study(unit.model, unit.spec, unit.store)
    study.started = time.perf_counter() - (time.time() - unit.started_at)
    study.stamp = {"node": current_node()[0]}
    try:
        study.prepare()
    except BaseException:
        study.close()
        raise
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

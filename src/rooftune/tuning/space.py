"""The search space of a tuning study and the sampler's plumbing: the dimensions a search may set
on this machine (:func:`search_space`), a configuration drawn from them (:func:`suggest`), a
configuration measured outside the search told to the sampler as a finished trial
(:func:`known_trial`), a local search around the fastest one (:func:`neighbours`), and the
identity of what a configuration runs (:func:`run_key`), by which a study measures each once.

    sampler = TPE(seed=SEED, n_startup_trials=STARTUP_TRIALS)
    for each configuration measured before the search: sampler.add(known_trial(config, value))
    enqueue neighbours(the fastest of those)
    config = suggest(sampler.ask(), space); ...; sampler.tell(told_value(trial))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rooftune.runconfig import ALLOCATORS, RunConfig, allocator_library
from rooftune.tuning.result import TrialResult

if TYPE_CHECKING:
    from rooftune.platform import Platform

#: Seed of the TPE sampler: the same study on the same machine asks the same questions.
SEED = 0
#: Finished trials (told ones included) before TPE samples from its model rather than at random.
STARTUP_TRIALS = 3
#: A failed trial is told to the sampler as this many times the slowest verified one.
FAILED_PENALTY = 10.0
#: Batch sizes the throughput objective searches when the user fixes none.
THROUGHPUT_BATCHES = (1, 2, 4, 8, 16, 32)
#: Batch sizes a training study's throughput objective searches when the user fixes none: a step
#: below 16 says little of training speed, and each doubling doubles the activations kept.
TRAIN_BATCHES = (16, 32, 64)


def sampler_study(seed: int = SEED) -> Any:
    """A new Optuna study minimising the told values with the seeded TPE sampler: TPE from the
    third finished trial on, so that the configurations told before the search (the guideline,
    baselines and seeds) are its start rather than the same seeded random draws on every model."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=STARTUP_TRIALS)
    return optuna.create_study(direction="minimize", sampler=sampler)


def told_value(trial: TrialResult, results: Sequence[TrialResult], objective: str) -> float:
    """What the sampler is told of ``trial``: its score, or, for a failed one, FAILED_PENALTY
    times the slowest verified score in ``results``. A failure is a bad value rather than Optuna's
    FAIL, which TPE ignores: the sampler learns to avoid its region instead of proposing it again."""
    if trial.ok:
        return trial.score(objective)
    return FAILED_PENALTY * max((x.score(objective) for x in results if x.ok), default=1.0)


def search_space(platform: Platform, available: dict[str, Any], allow: Sequence[str], *, objective: str = "latency",
                 batch: int | None = None, winograd: bool = True, train: bool = False) -> dict[str, Any]:
    """The dimensions the search may set on this machine (what is not installed is left out);
    ``winograd`` False: the model has no convolution Winograd computes, and the runtimes'
    ``conv`` option would change nothing. ``train``: a training step's space (the runtimes that
    train, their training options as well, one process: a step's throughput is one job's)."""
    cores = platform.usable_cores
    precisions = {}
    for n, rt in available.items():
        ok = [p for p in allow if (rt.unsupported_train(RunConfig(runtime=n, precision=p)) if train else
                                   rt.unsupported(RunConfig(runtime=n, precision=p))) is None]
        if ok:
            precisions[n] = ok
    throughput = objective == "throughput"
    if train:
        return {
            "runtime": sorted(precisions),
            "precisions": precisions,
            "batch": [batch] if batch else list(TRAIN_BATCHES) if throughput else [32],
            "instances": [1, 1],
            "intra_threads": [1, cores],
            "inter_threads": [1, cores],
            "memory_format": ["contiguous", "channels_last"],
            "allocator": [a for a in ALLOCATORS if a == "glibc" or allocator_library(a)],
            "bind": ["none", "close", "spread"],
            "wait": _waits(platform),
            "runtime_options": {n: {**rt.options, **rt.train_options} for n, rt in available.items() if n in precisions},
            "train": True,
        }
    allocators = [a for a in ALLOCATORS if a == "glibc" or allocator_library(a)]
    return {
        "runtime": sorted(precisions),
        "precisions": precisions,
        "batch": [batch] if batch else list(THROUGHPUT_BATCHES) if throughput else [1],
        "instances": [1, cores] if throughput else [1, 1],
        "intra_threads": [1, cores],
        "inter_threads": [1, cores],
        "memory_format": ["contiguous", "channels_last"],
        "allocator": allocators,
        "bind": ["none", "close", "spread"],
        "wait": _waits(platform),
        # each runtime's own knobs, less the values it cannot run here (OpenVINO from ONNX without onnx)
        "runtime_options": {n: {k: [x for x in v if _runs(rt, n, {k: x})] for k, v in rt.options.items()
                                if winograd or k != "conv"}
                            for n, rt in available.items()},
    }


def _waits(platform: Platform) -> list[str]:
    """The OpenMP wait settings searched; "default": nothing set, the OpenMP runtime's own
    spin-then-sleep (what a baseline runs)."""
    omp_lib = ((platform.openmp or {}).get("library") or "")
    if omp_lib.startswith(("libiomp", "libomp")):
        return ["default", "blocktime0", "blocktime1", "blocktime200"]
    return ["default", "passive", "active"]


def _runs(rt: Any, name: str, options: dict[str, Any]) -> bool:
    return rt.unsupported(RunConfig(runtime=name, runtime_options=options)) is None


def suggest(trial: Any, space: dict[str, Any]) -> RunConfig:
    """A configuration from the space, asking only what matters for the chosen runtime (the OpenMP
    environment and the layout for runtimes on the OpenMP pool, inter-op threads where a runtime
    uses them), so that TPE does not spend trials on settings that change nothing."""
    from rooftune.runtimes import get_runtime

    runtime = trial.suggest_categorical("runtime", space["runtime"])
    rt = get_runtime(runtime)
    options = {}
    for key, values in space["runtime_options"].get(runtime, {}).items():
        options[key] = trial.suggest_categorical(f"{runtime}.{key}", values)
    batch = trial.suggest_categorical("batch", space["batch"])
    instances = trial.suggest_int("instances", *space["instances"])
    lo, hi = space["intra_threads"]
    # instances x threads stays within the usable cores
    intra = trial.suggest_int(f"intra_threads.{instances}", lo, max(lo, hi // instances)) if instances > 1 else \
        trial.suggest_int("intra_threads", lo, hi)
    allocator = trial.suggest_categorical("allocator", space["allocator"])
    allowed = space["precisions"][runtime]
    precision = trial.suggest_categorical(f"{runtime}.precision", allowed) if len(allowed) > 1 else allowed[0]
    cfg = RunConfig(runtime=runtime, intra_threads=intra, batch=batch, instances=instances, precision=precision,
                    allocator=allocator, runtime_options=options, name=f"trial {trial.number}")
    if rt.uses_inter_threads(cfg):
        cfg = replace(cfg, inter_threads=trial.suggest_int(f"{runtime}.inter_threads", *space["inter_threads"]))
    if rt.uses_openmp:
        layout = trial.suggest_categorical("memory_format", space["memory_format"])
        bind = trial.suggest_categorical("bind", space["bind"])
        wait = trial.suggest_categorical("wait", space["wait"])
        omp: dict[str, str] = {}
        if bind != "none":
            omp.update({"OMP_PROC_BIND": bind, "OMP_PLACES": "cores"})
        if wait in ("passive", "active"):
            omp["OMP_WAIT_POLICY"] = wait.upper()
        elif wait != "default":
            omp["KMP_BLOCKTIME"] = wait.removeprefix("blocktime")
        cfg = replace(cfg, memory_format=layout, omp=omp)
    return rt.normalize(cfg)


class _Measured:
    """Stands in for an Optuna trial and answers ``suggest``'s questions with a measured
    configuration's own settings, noting each parameter's distribution, so that the configuration
    can be told to the study as a finished trial (``known_trial``)."""

    number = -1

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.params: dict[str, Any] = {}
        self.distributions: dict[str, Any] = {}

    def _value(self, name: str) -> Any:
        c = self.config
        head, _, tail = name.partition(".")
        if name == "runtime":
            return c.runtime
        if head in ("batch", "instances", "allocator", "memory_format"):
            return getattr(c, head)
        if head == "intra_threads":
            return c.intra_threads
        if tail == "precision":
            return c.precision
        if tail == "inter_threads":
            return c.inter_threads
        if name == "bind":
            return c.omp.get("OMP_PROC_BIND", "none")
        if name == "wait":
            if "OMP_WAIT_POLICY" in c.omp:
                return c.omp["OMP_WAIT_POLICY"].lower()
            return f"blocktime{c.omp['KMP_BLOCKTIME']}" if "KMP_BLOCKTIME" in c.omp else "default"
        return c.option(tail)  # as set, else what the runtime runs without it

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        import optuna

        value = self._value(name)
        if value not in choices:
            raise LookupError(name)
        self.params[name] = value
        self.distributions[name] = optuna.distributions.CategoricalDistribution(list(choices))
        return value

    def suggest_int(self, name: str, low: int, high: int) -> int:
        import optuna

        value = self._value(name)
        if not low <= value <= high:
            raise LookupError(name)
        self.params[name] = value
        self.distributions[name] = optuna.distributions.IntDistribution(low, high)
        return int(value)


def known_trial(config: RunConfig, space: dict[str, Any], value: float) -> Any:
    """A finished Optuna trial for a configuration measured outside the search (the guideline, a
    baseline, a seed), or None where the search space cannot express it (threads or settings left
    to the runtime's defaults, a value the space does not hold): the sampler starts from what was
    measured instead of from the same seeded random draws on every model. Only a configuration
    that ``suggest`` gives back as the same run (``run_key``) is told."""
    import optuna

    if config.vendor_defaults or not config.set_threads:
        return None
    m = _Measured(config)
    try:
        again = suggest(m, space)
    except (LookupError, KeyError):
        return None
    if run_key(again) != run_key(config):
        return None
    return optuna.trial.create_trial(params=m.params, distributions=m.distributions, value=value)


#: The order in which ``neighbours`` changes a configuration's settings: the allocator first, the
#: runtime's own options next, the threads last. A heuristic fitted to a few machines (the searched
#: bests that beat their seed differed from it in the allocator most often); benchmarks/tune_suite.py
#: checks it (BENCHMARKS.md, tuning runs 35-38 and 41).
NEIGHBOUR_ORDER = ("allocator", "option", "memory_format", "bind", "wait", "inter_threads", "intra_threads")


def neighbours(trial: Any) -> list[dict[str, Any]]:
    """The parameters of ``trial`` (a finished trial of the study) with one setting changed to each
    of its other values, in ``NEIGHBOUR_ORDER``: a local search around the fastest configuration
    measured before the search, which a budget of a few trials reaches sooner than TPE's draws.
    The runtime, batch and instances stay; a setting that only some values ask for (inter-op
    threads under ONNX Runtime's parallel mode) is left to the sampler."""
    def rank(name: str) -> int:
        head, _, tail = name.partition(".")
        kind = ("inter_threads" if tail == "inter_threads" else "intra_threads" if head == "intra_threads"
                else "option" if tail and tail != "precision" else head)
        return NEIGHBOUR_ORDER.index(kind) if kind in NEIGHBOUR_ORDER else len(NEIGHBOUR_ORDER)

    out = []
    for name in sorted(trial.params, key=rank):
        if rank(name) == len(NEIGHBOUR_ORDER):
            continue
        dist = trial.distributions[name]
        values = dist.choices if hasattr(dist, "choices") else range(dist.low, dist.high + 1)
        out += [{**trial.params, name: v} for v in values if v != trial.params[name]]
    return out


def run_key(config: RunConfig) -> str:
    """The identity of what ``config`` runs: its key with each runtime option it leaves out set to
    what the runtime runs without it, so that the guideline's ``hint=LATENCY, streams=1`` and a
    searched ``hint=LATENCY, streams=1, pinning=False`` are one configuration (measured once)."""
    from rooftune.runtimes import get_runtime

    if config.vendor_defaults:
        return config.key()
    rt = get_runtime(config.runtime)
    options = {**{k: v for k, v in rt.absent.items() if k in rt.options}, **config.runtime_options}
    return rt.normalize(replace(config, runtime_options=options)).key()


"""`rooftune tune`: guideline and baselines first, then an Optuna search within a budget, then
the best re-measured interleaved against every baseline.

    reference = fp32 eager output of the workload (saved for the trials)
    evaluate(guideline), evaluate(each baseline)            # each in a fresh subprocess
    while budget and trials remain: config = TPE.ask(); evaluate(config); TPE.tell(...)
    best = fastest verified trial
    for each baseline: compare(best, baseline) interleaved in two live subprocesses -> ratio, CI

evaluate(config) = start a worker with the config's environment; prepare; compare its output with
the reference (a wrong output is a failed trial, never a best); measure with the harness; store.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from rooftune.bench import Measurement, Policy, compare, stats
from rooftune.errors import InvalidArgument
from rooftune.tuning.config import ALLOCATORS, RunConfig, allocator_library
from rooftune.tuning.guidelines import baselines, guideline, physical_usable
from rooftune.tuning.trial import PREPARE_TIMEOUT_S, TrialFailed, VirtualClock, Worker

OBJECTIVES = ("latency", "throughput")
#: Default budget of a whole study (the issue's suite allows 5 minutes per model).
DEFAULT_BUDGET_S = 240.0
#: Timing of one trial: latency samples are single inferences, so p90/p99 are per inference.
TRIAL_POLICY = Policy(number=1, warmup_s=0.3, budget_s=2.0, min_samples=10, target_rel_ci=0.02)
#: The final interleaved comparison of the best against each baseline.
COMPARE_POLICY = Policy(number=1, warmup_s=0.3, budget_s=4.0, min_samples=10, target_rel_ci=0.02)
#: Seed of the TPE sampler: the same study on the same machine asks the same questions.
SEED = 0
#: Seconds to start a trial's subprocess (interpreter, torch, model, prepared artifact from cache):
#: measured 4-6 s on a 2-core machine; the budget keeps this much per final comparison side.
WORKER_START_S = 6.0

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class TrialResult:
    """One evaluated configuration: its figures, or why it failed."""

    config: RunConfig
    ok: bool
    error: str = ""
    latency_s: float = math.nan
    p90_s: float = math.nan
    p99_s: float = math.nan
    throughput: float = math.nan
    verify: dict[str, Any] = field(default_factory=dict)
    prepare_s: float = math.nan
    artifact: str | None = None
    measurement: dict[str, Any] | None = None

    def score(self, objective: str) -> float:
        """Lower is better: latency, or inverse throughput."""
        if not self.ok:
            return math.inf
        return self.latency_s if objective == "latency" else 1.0 / self.throughput

    def figures(self) -> dict[str, Any]:
        return {"latency_s": self.latency_s, "p90_s": self.p90_s, "p99_s": self.p99_s,
                "throughput": self.throughput}

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "ok": self.ok, "error": self.error, **self.figures(),
                "verify": self.verify, "prepare_s": self.prepare_s, "artifact": self.artifact}

    @classmethod
    def from_stored(cls, row: dict[str, Any]) -> TrialResult:
        r = row["result"]

        def num(key: str) -> float:
            v = r.get(key)
            return math.nan if v is None else float(v)

        return cls(config=RunConfig(**row["config"]), ok=row["status"] == "ok", error=r.get("error", ""),
                   latency_s=num("latency_s"), p90_s=num("p90_s"), p99_s=num("p99_s"), throughput=num("throughput"),
                   verify=r.get("verify", {}), prepare_s=num("prepare_s"), artifact=r.get("artifact"))


@dataclass(frozen=True)
class TuneResult:
    model: str
    objective: str
    batch: int
    best: TrialResult
    guideline: TrialResult
    guideline_reasons: tuple[str, ...]
    baselines: dict[str, TrialResult]
    speedup: dict[str, dict[str, float]]
    trials: tuple[TrialResult, ...]
    notes: tuple[str, ...]
    duration_s: float
    resumed: int = 0

    def to_dict(self) -> dict[str, Any]:
        failed = [t for t in self.trials if not t.ok]
        return {
            "model": self.model, "objective": self.objective, "batch": self.batch,
            "best": {"name": self.best.config.name, "description": self.best.config.describe(), **self.best.to_dict()},
            "guideline": {"reasons": list(self.guideline_reasons), "description": self.guideline.config.describe(),
                          **self.guideline.to_dict(),
                          "vs_best": (self.guideline.score(self.objective) / self.best.score(self.objective))
                          if self.guideline.ok else None},
            "baselines": {k: v.to_dict() for k, v in self.baselines.items()},
            "speedup": self.speedup,
            "trials": {"count": len(self.trials), "failed": len(failed), "resumed": self.resumed,
                       "failures": [{"config": t.config.describe(), "error": t.error} for t in failed],
                       "all": [t.to_dict() for t in self.trials]},
            "notes": list(self.notes), "duration_s": self.duration_s,
        }


def study_key(model: str, objective: str, batch: int, platform_id: str, space: dict[str, Any]) -> str:
    text = json.dumps({"model": model, "objective": objective, "batch": batch, "platform": platform_id, "space": space},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _evaluate(config: RunConfig, workload: dict[str, Any], reference: Path, workdir: Path, objective: str,
              policy: Policy = TRIAL_POLICY, prepare_timeout_s: float = PREPARE_TIMEOUT_S) -> TrialResult:
    try:
        with Worker(config, workload, reference, workdir, prepare_timeout_s=prepare_timeout_s) as w:
            info = w.info
            verify = info["verify"]
            if not verify["ok"]:
                return TrialResult(config, False, error=f"wrong output: {verify['why']}", verify=verify,
                                   prepare_s=info["prepare_s"])
            md = w.measure(_policy_dict(policy), label=f"trial.{config.runtime}")
    except TrialFailed as exc:
        return TrialResult(config, False, error=str(exc))
    m = Measurement.from_dict(md)
    xs = list(m.samples)
    return TrialResult(
        config, True, latency_s=m.median, p90_s=stats.quantile(xs, 0.9), p99_s=stats.quantile(xs, 0.99),
        throughput=config.batch / m.median, verify=verify, prepare_s=info["prepare_s"],
        artifact=info.get("artifact"), measurement=md,
    )


def _policy_dict(policy: Policy) -> dict[str, Any]:
    return {k: getattr(policy, k) for k in ("number", "warmup_s", "budget_s", "min_samples", "target_rel_ci")}


def search_space(platform: Any, available: dict[str, Any], allow: Sequence[str]) -> dict[str, Any]:
    """The dimensions the search may set on this machine (what is not installed is left out)."""
    cores = platform.usable_cores
    allocators = [a for a in ALLOCATORS if a == "glibc" or allocator_library(a)]
    omp_lib = ((platform.openmp or {}).get("library") or "")
    intel = omp_lib.startswith(("libiomp", "libomp"))
    return {
        "runtime": sorted(available),
        "intra_threads": [1, cores],
        "inter_threads": [1, cores],
        "memory_format": ["contiguous", "channels_last"],
        "precision": list(allow),
        "allocator": allocators,
        "bind": ["none", "close", "spread"],
        "wait": ["passive", "active"] if not intel else ["blocktime0", "blocktime1", "blocktime200"],
        "runtime_options": {n: {k: list(v) for k, v in rt.options.items()} for n, rt in available.items()},
    }


def _suggest(trial: Any, space: dict[str, Any], batch: int) -> RunConfig:
    """A configuration from the space, asking only what matters for the chosen runtime (the OpenMP
    environment and the layout for runtimes on the OpenMP pool, inter-op threads where a runtime
    uses them), so that TPE does not spend trials on settings that change nothing."""
    from rooftune.runtimes import get_runtime

    runtime = trial.suggest_categorical("runtime", space["runtime"])
    rt = get_runtime(runtime)
    options = {}
    for key, values in space["runtime_options"].get(runtime, {}).items():
        options[key] = trial.suggest_categorical(f"{runtime}.{key}", values)
    lo, hi = space["intra_threads"]
    intra = trial.suggest_int("intra_threads", lo, hi)
    allocator = trial.suggest_categorical("allocator", space["allocator"])
    precision = trial.suggest_categorical("precision", space["precision"])
    cfg = RunConfig(runtime=runtime, intra_threads=intra, batch=batch, precision=precision, allocator=allocator,
                    runtime_options=options, name=f"trial {trial.number}")
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
        else:
            omp["KMP_BLOCKTIME"] = wait.removeprefix("blocktime")
        cfg = replace(cfg, memory_format=layout, omp=omp)
    return rt.normalize(cfg)


def tune(
    model: str,
    *,
    objective: str = "latency",
    budget_s: float = DEFAULT_BUDGET_S,
    trials: int | None = None,
    batch: int | None = None,
    inputs: Sequence[tuple[int, ...]] | None = None,
    options: dict[str, Any] | None = None,
    guidelines_only: bool = False,
    precisions: Sequence[str] = ("fp32",),
    runtimes: Sequence[str] | None = None,
    db: str | None = None,
    store: Any = None,
    save: str | Path | None = None,
    progress: Progress | None = None,
    trial_policy: Policy = TRIAL_POLICY,
    compare_policy: Policy = COMPARE_POLICY,
) -> TuneResult:
    """Tune ``model``'s runtime configuration on this machine (see the module docstring).

    Every trial is stored as it finishes; calling again with the same model, objective and
    search space resumes: stored configurations are not run again.
    """
    import optuna

    from rooftune.platform import current_platform
    from rooftune.runtimes import RUNTIMES, available_runtimes, get_runtime
    from rooftune.store import Store
    from rooftune.workload import capture, load_workload

    started = time.perf_counter()
    step = progress or (lambda *_: None)
    if objective not in OBJECTIVES:
        raise InvalidArgument("objective", objective, f"allowed {', '.join(OBJECTIVES)}")
    if not (isinstance(budget_s, (int, float)) and math.isfinite(budget_s) and budget_s > 0):
        raise InvalidArgument("budget", budget_s, "allowed a positive number of seconds")
    if trials is not None and (isinstance(trials, bool) or not isinstance(trials, int) or trials < 0):
        raise InvalidArgument("trials", trials, "allowed an integer >= 0")
    for p in precisions:
        if p not in ("fp32", "bf16"):
            raise InvalidArgument("precision", p, "allowed fp32, bf16 (int8 tuning is not built yet)")
    platform = current_platform()
    if "bf16" in precisions and not set(platform.effective_isa) & {"avx512_bf16", "amx_bf16"}:
        raise InvalidArgument("precision", "bf16", "this CPU has no native bf16 (avx512_bf16 or amx_bf16)")
    available, notes_by_rt = available_runtimes()
    if runtimes:
        for r in runtimes:
            if r not in RUNTIMES:
                raise InvalidArgument("runtime", r, f"allowed {', '.join(RUNTIMES)}")
            if r not in available:
                raise InvalidArgument("runtime", r, notes_by_rt[r])
        available = {k: v for k, v in available.items() if k in runtimes}
    wl = load_workload(model, batch=batch if objective == "latency" else batch or 1, inputs=inputs, options=options)
    workload = {"model": model, "inputs": [list(s) for s in inputs] if inputs else None, "options": options or {}}
    notes = [f"{k}: {v}" for k, v in notes_by_rt.items()]
    if "openvino" in available:
        notes.append("openvino-latency keeps OpenVINO's defaults except the precision, pinned to the study's "
                     "(on a bf16 CPU its default would be bf16; search bf16 with --bf16)")
    if not allocator_library("jemalloc") and not allocator_library("tcmalloc"):
        notes.append("no jemalloc or tcmalloc installed (apt-get install libjemalloc2 libtcmalloc-minimal4): allocator not tuned")

    step("capture and reference output", 0, 1)
    graph = capture(wl)
    with torch.no_grad():
        reference_out = wl.module(*wl.inputs)
    from rooftune.runtimes import first_tensor

    workdir = Path(tempfile.mkdtemp(prefix="rooftune-tune-"))
    reference = workdir / "reference.pt"
    torch.save(first_tensor(reference_out).float(), reference)

    space = search_space(platform, available, precisions)
    key = study_key(model, objective, wl.batch, platform.id, {**space, "inputs": workload["inputs"], "options": workload["options"]})
    own_store = store is None
    store = store if store is not None else Store(db)
    results: list[TrialResult] = []
    done: dict[str, TrialResult] = {}
    resumed = 0
    try:
        for row in store.trials(key):
            t = TrialResult.from_stored(row)
            done[row["config_key"]] = t
            resumed += 1

        def evaluate(cfg: RunConfig, prepare_timeout_s: float = PREPARE_TIMEOUT_S) -> TrialResult:
            cfg = get_runtime(cfg.runtime).normalize(replace(cfg, batch=wl.batch))
            k = cfg.key()
            if k in done:
                return done[k]
            r = _evaluate(cfg, workload, reference, workdir, objective, trial_policy, prepare_timeout_s)
            store.save_trial(platform, study_key=key, config_key=k, status="ok" if r.ok else "failed",
                             config=cfg.to_dict(), result=r.to_dict())
            done[k] = r
            return r

        guide_cfg, reasons = guideline(platform, graph, available, objective=objective)
        fixed = [guide_cfg, *baselines(platform, available)]
        for i, cfg in enumerate(fixed):
            step(f"guideline and baselines: {cfg.name}", i, len(fixed))
            results.append(evaluate(cfg))
        guide, base = results[0], {r.config.name: r for r in results[1:]}

        if not guidelines_only:
            sampler = optuna.samplers.TPESampler(seed=SEED)
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            study = optuna.create_study(direction="minimize", sampler=sampler)
            limit = trials if trials is not None else 10_000
            # The interleaved comparisons at the end are part of the budget.
            reserve = sum(1 for b in base.values() if b.ok) * (compare_policy.budget_s + compare_policy.warmup_s + 2 * WORKER_START_S)
            search_until = budget_s - reserve
            n = 0
            while n < limit and time.perf_counter() - started < search_until:
                step("search", min(int(time.perf_counter() - started), int(budget_s)), int(budget_s))
                t = study.ask()
                cfg = _suggest(t, space, wl.batch)
                # A searched trial may not take the final comparisons' share of the budget to prepare
                # (torch.compile of a large model takes minutes on two cores).
                left = search_until - (time.perf_counter() - started)
                r = evaluate(cfg, prepare_timeout_s=max(30.0, min(PREPARE_TIMEOUT_S, left)))
                results.append(r)
                score = r.score(objective)
                study.tell(t, score if math.isfinite(score) else None,
                           state=optuna.trial.TrialState.COMPLETE if r.ok else optuna.trial.TrialState.FAIL)
                n += 1
        verified = [r for r in results if r.ok]
        if not verified:
            raise TrialFailed("no configuration ran and verified; see the failures in the trials")
        best = min(verified, key=lambda r: r.score(objective))

        step("best against every baseline, interleaved", 0, len(base))
        speedup: dict[str, dict[str, float]] = {}
        for i, (name, b) in enumerate(base.items()):
            step("best against every baseline, interleaved", i, len(base))
            if not b.ok:
                continue
            speedup[name] = _interleaved(best.config, b.config, workload, reference, workdir, compare_policy)
        if save:
            _save_best(best, Path(save))
    finally:
        if own_store:
            store.close()
    return TuneResult(model=model, objective=objective, batch=wl.batch, best=best, guideline=guide,
                      guideline_reasons=tuple(reasons), baselines=base, speedup=speedup, trials=tuple(results),
                      notes=tuple(notes), duration_s=time.perf_counter() - started, resumed=resumed)


def _interleaved(a: RunConfig, b: RunConfig, workload: dict[str, Any], reference: Path, workdir: Path,
                 policy: Policy = COMPARE_POLICY) -> dict[str, float]:
    """median(b) / median(a) from A B A B ... samples of two live subprocesses, with the 95 % CI."""
    if a.key() == b.key():
        return {"ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0, "pairs": 0}
    try:
        with Worker(a, workload, reference, workdir) as wa, Worker(b, workload, reference, workdir) as wb:
            clock = VirtualClock()
            c = compare(clock.timed(wb, idle=(wa,)), clock.timed(wa, idle=(wb,)), label_a=b.name,
                        label_b=a.name or "best", policy=policy, clock=clock)
    except TrialFailed as exc:
        return {"ratio": math.nan, "ci_low": math.nan, "ci_high": math.nan, "error": str(exc)}
    return {"ratio": c.ratio, "ci_low": c.ci[0], "ci_high": c.ci[1], "pairs": c.a.n,
            "baseline_latency_s": c.a.median, "best_latency_s": c.b.median}


def _save_best(best: TrialResult, path: Path) -> None:
    """The configuration as JSON; its prepared artifact copied beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"config": best.config.to_dict(), "figures": best.figures(), "verify": best.verify}
    if best.artifact and Path(best.artifact).exists():
        src = Path(best.artifact)
        dst = path.with_name(path.stem + "_" + src.name)
        shutil.copy2(src, dst)
        if src.suffix == ".xml" and src.with_suffix(".bin").exists():
            shutil.copy2(src.with_suffix(".bin"), dst.with_suffix(".bin"))
        data["artifact"] = str(dst)
    path.write_text(json.dumps(data, indent=2))

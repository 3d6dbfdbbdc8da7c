"""What every trial of a study shares (:class:`Setup`): the workload, its inputs, the fp32 eager
reference output and the int8 calibration set, written once per batch size into the study's
folder, and one trial run against them (:func:`run_trial`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from rooftune.bench import Measurement, Policy, stats
from rooftune.runconfig import RunConfig
from rooftune.tuning.result import TrialResult, winograd_layers
from rooftune.tuning.trial import PREPARE_TIMEOUT_S, Group, TrialFailed

#: Timing of one trial: latency samples are single inferences, so p90/p99 are per inference.
TRIAL_POLICY = Policy(number=1, warmup_s=0.3, budget_s=2.0, min_samples=10, target_rel_ci=0.02)


@dataclass
class Setup:
    """What every trial of a study shares: the workload, its inputs, the fp32 eager reference output
    and, for int8, the calibration set with its reference outputs (files per batch size, made on
    demand). The inputs' file lets a process that runs a prepared artifact skip building the model."""

    workload: dict[str, Any]
    workdir: Path
    int8: bool = False
    calibration_size: int = 0
    validate: str | None = None
    #: How many output tensors the model returns (known once a reference is made).
    outputs: int = 0
    #: The user's data split into calibration and evaluation parts (rooftune.workload.data.Split),
    #: and its DataSpec: int8 calibrates on the first, every reduced precision is judged on the
    #: second (the evaluation file per batch size, which the trials' processes read).
    data: Any = None
    data_spec: Any = None
    #: The configurations (by key) whose trial in this study passed its check (run here, or
    #: stored under the study's key): a later process of one, a final comparison's, is not
    #: checked again where the check costs more than the warm-up it needs anyway (a training
    #: step's checked steps).
    verified: set[str] = field(default_factory=set)
    _files: dict[int, tuple[Path, Path | None]] = field(default_factory=dict)

    def files(self, batch: int) -> tuple[Path, Path | None]:
        if batch not in self._files:
            from rooftune.runtimes import output_tensors
            from rooftune.runtimes.quantize import calibration_inputs
            from rooftune.workload import load_workload
            from rooftune.workload.data import batches

            w = self.workload
            reference = self.workdir / f"reference-b{batch}.pt"
            if w.get("train"):
                self._files[batch] = (self._train_reference(batch, reference), None)
                return self._files[batch]
            wl = load_workload(w["model"], batch=batch, inputs=w.get("inputs"), options=w.get("options"), check=False)
            torch.save(tuple(wl.inputs), self.workdir / f"inputs-b{batch}.pt")
            with torch.no_grad():
                ref = output_tensors(wl.module(*wl.inputs))
            torch.save(ref, reference)
            self.outputs = len(ref)
            calibration = None
            if self.data is not None:
                self._evaluation(wl, batch)
            if self.int8:
                xs = (batches(self.data.calibration.inputs, batch) if self.data is not None
                      else calibration_inputs(wl.inputs, self.calibration_size))
                with torch.no_grad():
                    outs = [output_tensors(wl.module(*x)) for x in xs]
                calibration = self.workdir / f"calibration-b{batch}.pt"
                torch.save({"inputs": xs, "outputs": outs}, calibration)
            self._files[batch] = (reference, calibration)
        return self._files[batch]

    def _evaluation(self, wl: Any, batch: int) -> None:
        """The evaluation part at ``batch`` for the trials' processes: its batches, the fp32 eager
        model's first output on each sample, the labels, the metric and the budget; the labels and
        the metric are checked against the model's output here, before any trial runs."""
        from rooftune.runtimes import output_tensors
        from rooftune.workload.data import batches, unbatch
        from rooftune.workload.metrics import check_labels, evaluate, metric_name

        part, spec = self.data.evaluation, self.data_spec
        metric = metric_name(spec.metric, part.labels is not None)
        xs = batches(part.inputs, batch)
        with torch.no_grad():
            ref = unbatch([output_tensors(wl.module(*x)) for x in xs], len(part))
        check_labels(ref, part.labels, metric, part.source)
        fp32 = evaluate(ref, ref, part.labels, metric, spec.max_drop, spec.seed)
        torch.save({"batches": xs, "n": len(part), "reference": ref, "labels": part.labels, "metric": metric,
                    "max_drop": spec.max_drop, "seed": spec.seed, "fp32": fp32},
                   self.workdir / f"evaluation-b{batch}.pt")

    def data_key(self) -> dict[str, Any]:
        """What identifies the user's data and budget in a study's key: the spec and a digest of
        the samples of both parts, in order."""
        import hashlib

        h = hashlib.sha256()
        for part in (self.data.calibration, self.data.evaluation):
            for xs in part.inputs:
                for x in xs:
                    h.update(x.contiguous().numpy().tobytes())
            if part.labels is not None:
                h.update(part.labels.numpy().tobytes())
        return {**self.data_spec.as_dict(), "digest": h.hexdigest()[:16]}

    def _train_reference(self, batch: int, path: Path) -> Path:
        """A training workload's reference: vanilla fp32 eager training's first steps
        (:func:`rooftune.tuning.verify.train_reference`) at ``batch``."""
        from rooftune.tuning.verify import train_reference
        from rooftune.workload import load_workload
        from rooftune.workload.training import TrainSpec

        w = self.workload
        wl = load_workload(w["model"], batch=batch, inputs=w.get("inputs"), options=w.get("options"), check=False,
                           train=TrainSpec(**w["train"]))
        torch.save(train_reference(wl.train_step()), path)
        self.outputs = 1
        return path

    def group(self, config: RunConfig, prepare_timeout_s: float = PREPARE_TIMEOUT_S, wait: bool = True) -> Group:
        reference, calibration = self.files(config.batch)
        return Group(config, self.workload, reference, self.workdir, prepare_timeout_s, calibration, self.validate,
                     wait=wait, inputs=self.workdir / f"inputs-b{config.batch}.pt",
                     verified=config.key() in self.verified)


def _policy_dict(policy: Policy) -> dict[str, Any]:
    return {k: getattr(policy, k) for k in ("number", "warmup_s", "budget_s", "min_samples", "target_rel_ci")}


def run_trial(config: RunConfig, setup: Setup, policy: Policy = TRIAL_POLICY,
              prepare_timeout_s: float = PREPARE_TIMEOUT_S) -> TrialResult:
    """One trial: ``config`` started in its own process group, prepared, its output checked against
    the reference (a wrong output is a failed trial), measured under ``policy``. A study calls it
    through its own module's ``_evaluate`` (tests stand in for the trial processes there)."""
    try:
        with setup.group(config, prepare_timeout_s) as g:
            info = g.info
            verify = info["verify"]
            if not verify["ok"]:
                return TrialResult(config, False, error=f"wrong output: {verify['why']}", verify=verify,
                                   prepare_s=info["prepare_s"], start_s=info.get("start_s", math.nan))
            setup.verified.add(config.key())
            md = g.measure(_policy_dict(policy), label=f"trial.{config.runtime}")
            items = g.items_per_call
    except TrialFailed as exc:
        return TrialResult(config, False, error=str(exc))
    m = Measurement.from_dict(md)
    xs = list(m.samples)
    r = TrialResult(
        config, True, latency_s=m.median, p90_s=stats.quantile(xs, 0.9), p99_s=stats.quantile(xs, 0.99),
        throughput=items / m.median, verify=verify, prepare_s=info["prepare_s"],
        start_s=info.get("start_s", math.nan), artifact=info.get("artifact"), measurement=md,
        ran_precision=info["precision"] if info.get("precision", config.precision) != config.precision else "",
    )
    layers = winograd_layers(r)  # the artifact's folder goes with the study
    return r if layers is None else replace(r, rewritten=(sum(1 for x in layers if x.get("chosen")), len(layers)))

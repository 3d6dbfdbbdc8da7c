"""What a tuning study is asked to do, apart from the model and the store: a frozen
:class:`TuneSpec`, checked once on construction (each refusal names the parameter, the value and
what is allowed, before anything is measured), and the precisions it searches on this machine.

:func:`rooftune.tuning.tune`, :func:`rooftune.pipeline.optimize` and a study on a cluster each
build one spec and pass it on; :class:`rooftune.tuning.study.Study` takes it as given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rooftune.bench import Policy
from rooftune.errors import InvalidArgument
from rooftune.tuning.arguments import (
    check_arguments,
    check_precisions,
    check_scenario,
    check_train_arguments,
    data_precisions,
    default_precisions,
    native_bf16,
    validation_spec,
)
from rooftune.tuning.compare import COMPARE_POLICY, COMPARE_PROCESS_PAIRS
from rooftune.tuning.setup import TRIAL_POLICY

if TYPE_CHECKING:
    from rooftune.platform import Platform
    from rooftune.workload.data import DataSpec
    from rooftune.workload.training import TrainSpec

#: Default budget of a whole study, in seconds (what benchmarks/tune_suite.py gives each model),
#: and of one with a serving phase (``--scenario server`` or ``offline``), which gets 60 % of it.
DEFAULT_BUDGET_S = 240.0
SERVING_BUDGET_S = 480.0


@dataclass(frozen=True)
class TuneSpec:
    """A study's arguments as :func:`rooftune.tuning.tune` documents them, checked and in the form
    the study uses: ``objective`` decided (``throughput`` for a training step, else ``latency``),
    ``precisions`` and ``runtimes`` tuples of names (None: the defaults), ``validate`` a
    ``module:function`` string, ``train`` a TrainSpec or None, ``data`` a DataSpec or None (sized by
    ``calibration_size``, which is then None), ``inputs`` a list of shapes or None, ``budget_s``
    the default where None (:data:`SERVING_BUDGET_S` with a serving phase). ``scenario`` (with
    ``slo_p99_ms`` or ``slo_p90_ms`` for a server) adds the serving phase
    (:mod:`rooftune.tuning.serving`) and decides the objective. Building a spec from a spec's own
    fields (``dataclasses.replace``) gives the same spec."""

    objective: str | None = None
    budget_s: float | None = None
    trials: int | None = None
    batch: int | None = None
    inputs: Sequence[tuple[int, ...]] | None = None
    options: dict[str, Any] | None = None
    guidelines_only: bool = False
    precisions: Sequence[str] | None = None
    runtimes: Sequence[str] | None = None
    save: str | Path | None = None
    trial_policy: Policy = TRIAL_POLICY
    compare_policy: Policy = COMPARE_POLICY
    validate: str | Callable[..., Any] | None = None
    calibration_size: int | None = None
    compare_pairs: int = COMPARE_PROCESS_PAIRS
    train: TrainSpec | bool | None = None
    data: DataSpec | str | None = None
    scenario: str | None = None
    slo_p99_ms: float | None = None
    slo_p90_ms: float | None = None

    @property
    def slo(self) -> tuple[str, float]:
        """A server's latency target: the quantile's name and its milliseconds."""
        return ("p99", float(self.slo_p99_ms)) if self.slo_p99_ms is not None else ("p90", float(self.slo_p90_ms or 0))

    def __post_init__(self) -> None:
        """Refuses what a study cannot run, in the words :mod:`rooftune.tuning.arguments` gives,
        and stores each field in its checked form."""
        from rooftune.workload.data import data_spec
        from rooftune.workload.models import check_batch, check_shapes
        from rooftune.workload.training import train_spec

        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        train, data, calibration_size = train_spec(self.train), data_spec(self.data), self.calibration_size
        if data is not None and train is not None:
            raise InvalidArgument("--data", data.data, "allowed only without --train (the accuracy budget is of an "
                                  "inference's outputs)")
        if data is not None and self.validate is not None:
            raise InvalidArgument("--validate", self.validate if isinstance(self.validate, str) else repr(self.validate),
                                  "allowed only without --data (the data's metric and --max-drop decide instead)")
        if data is not None and calibration_size is not None:  # it sizes the data's calibration part
            data, calibration_size = data.with_calibration(calibration_size), None
        if train is not None:
            check_train_arguments(runtimes=self.runtimes, precisions=self.precisions, validate=self.validate,
                                  calibration_size=calibration_size)
        scenario, objective = check_scenario(self.scenario, self.objective, self.slo_p99_ms, self.slo_p90_ms,
                                             training=train is not None)
        # a training step is measured in samples per second by default, an inference by its latency
        objective = objective if objective is not None else "throughput" if train is not None else "latency"
        budget_s = self.budget_s if self.budget_s is not None else (
            SERVING_BUDGET_S if scenario in ("server", "offline") else DEFAULT_BUDGET_S)
        precisions, runtimes = check_arguments(
            objective=objective, budget_s=budget_s, compare_pairs=self.compare_pairs, trials=self.trials,
            guidelines_only=self.guidelines_only, precisions=self.precisions, runtimes=self.runtimes,
            trial_policy=self.trial_policy, compare_policy=self.compare_policy, save=self.save)
        check_batch(self.batch)
        put("train", train)
        put("data", data)
        put("calibration_size", calibration_size)
        put("objective", objective)
        put("scenario", scenario)
        put("budget_s", float(budget_s))
        for name in ("slo_p99_ms", "slo_p90_ms"):
            if getattr(self, name) is not None:
                put(name, float(getattr(self, name)))
        put("precisions", precisions)
        put("runtimes", runtimes)
        put("validate", validation_spec(self.validate))
        put("trials", None if self.trials is None else int(self.trials))
        put("batch", None if self.batch is None else int(self.batch))
        put("compare_pairs", int(self.compare_pairs))
        put("inputs", check_shapes(self.inputs))


def searched_precisions(spec: TuneSpec, platform: Platform, available: dict[str, Any]) -> tuple[tuple[str, ...], int]:
    """The precisions ``spec`` searches on ``platform`` with the runtimes ``available`` (its own, or
    the defaults: fp32 and bf16 autocast where the CPU computes bf16 natively for a training step,
    :func:`~rooftune.tuning.arguments.data_precisions` with the user's data, else
    :func:`~rooftune.tuning.arguments.default_precisions`), and the int8 calibration size; a
    precision this CPU cannot run refused."""
    precisions = spec.precisions
    if precisions is None and spec.train is not None:  # bf16 autocast where native, guarded by the loss
        precisions = ("fp32", "bf16") if native_bf16(platform) else ("fp32",)
    if precisions is None:
        precisions = (data_precisions if spec.data is not None else default_precisions)(platform, available)
    return tuple(precisions), check_precisions(precisions, spec.calibration_size, platform)

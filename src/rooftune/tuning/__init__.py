"""Black-box tuning of the runtime configuration: space, guidelines, baselines, search, trials."""

from __future__ import annotations

from rooftune.runconfig import RunConfig, allocator_library
from rooftune.tuning.arguments import OBJECTIVES, default_precisions, precisions_for
from rooftune.tuning.deploy import TunedModel, load_tuned
from rooftune.tuning.guidelines import average_width, baselines, guideline
from rooftune.tuning.result import NoVerifiedTrial, TrialResult, TuneResult, save_config
from rooftune.tuning.spec import TuneSpec
from rooftune.tuning.study import Study, tune, tune_spec
from rooftune.tuning.trial import TrialFailed, Worker

__all__ = [
    "OBJECTIVES",
    "NoVerifiedTrial",
    "RunConfig",
    "Study",
    "TrialFailed",
    "TrialResult",
    "TuneResult",
    "TuneSpec",
    "TunedModel",
    "Worker",
    "allocator_library",
    "average_width",
    "baselines",
    "default_precisions",
    "guideline",
    "load_tuned",
    "precisions_for",
    "save_config",
    "tune",
    "tune_spec",
]

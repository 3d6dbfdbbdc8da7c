"""Profiling campaigns over convolution primitives: specs from models and from sampling, verified
and timed per (platform, spec, primitive, threads), stored, exported and imported.

    rooftune.profile(models=["resnet50"], sample=100, batches=[1], threads=[1, 2], budget_s=600)
"""

from __future__ import annotations

from rooftune.profiling.campaign import EXTRA_PASSES as EXTRA_PASSES
from rooftune.profiling.campaign import (
    PROFILE_PASSES,
    PROFILE_POLICY,
    CampaignResult,
    profile_spec,
    run_campaign,
)
from rooftune.profiling.campaign import check_campaign as check_campaign
from rooftune.profiling.campaign import check_passes as check_passes
from rooftune.profiling.dataset import export_profiles, import_profiles, read_profiles, summarize
from rooftune.profiling.run import INTERRUPT_GRACE_S as INTERRUPT_GRACE_S
from rooftune.profiling.run import ISA_VARIANTS, collect_specs, profile, profile_fleet, run_isa_variant
from rooftune.profiling.specs import Layer, dedupe, model_layers, sample_specs

__all__ = [
    "ISA_VARIANTS", "PROFILE_PASSES", "PROFILE_POLICY", "CampaignResult", "Layer", "collect_specs", "dedupe", "export_profiles",
    "import_profiles", "model_layers", "profile", "profile_fleet", "profile_spec", "read_profiles", "run_campaign", "run_isa_variant",
    "sample_specs", "summarize",
]

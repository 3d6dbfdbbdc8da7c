"""Property-based fuzzing of every parser of outside input (hypothesis).

Two profiles: ``suite`` (the default, a few dozen examples per property, so the README's test command
stays within its time) and ``thorough`` (10,000 examples per property, or ``ROOFTUNE_FUZZ_EXAMPLES``), which
``benchmarks/fuzz_parsers.py`` selects through ``ROOFTUNE_FUZZ_PROFILE``. Each property states what
must hold for any input: a valid value, or a one-line :class:`rooftune.errors.RooftuneError`, and no
secret in any output. No deadline: a loaded host may take long over one example, and these tests
check behaviour, never speed.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("suite", max_examples=40, derandomize=True, **_COMMON)
settings.register_profile("thorough", max_examples=int(os.environ.get("ROOFTUNE_FUZZ_EXAMPLES", "10000")), **_COMMON)
settings.load_profile(os.environ.get("ROOFTUNE_FUZZ_PROFILE", "suite"))

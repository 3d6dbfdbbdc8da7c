"""A tuning study's spec: for any values of its scalar arguments (what ``rooftune tune`` and
``rooftune.tune`` pass on), :class:`TuneSpec` is built in its checked form or refused with a
one-line :class:`RooftuneError`, and nothing else."""

from __future__ import annotations

import dataclasses
import math

from hypothesis import given
from hypothesis import strategies as st

from rooftune.errors import RooftuneError
from rooftune.tuning.spec import TuneSpec

VALUE = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(), st.text(max_size=12),
                  st.lists(st.text(max_size=8), max_size=3))
NAMES = st.one_of(st.none(), st.text(max_size=20), st.lists(st.sampled_from(["fp32", "bf16", "int8", "eager", "x", ""]),
                                                            max_size=4))


@given(objective=VALUE, budget_s=VALUE, trials=VALUE, batch=VALUE, compare_pairs=VALUE, guidelines_only=st.booleans(),
       precisions=NAMES, runtimes=NAMES, train=st.sampled_from([None, False, True]))
def test_a_spec_is_checked_or_refused_in_one_line(objective: object, budget_s: object, trials: object, batch: object,
                                                  compare_pairs: object, guidelines_only: bool, precisions: object,
                                                  runtimes: object, train: object) -> None:
    kwargs = {k: v for k, v in (("objective", objective), ("budget_s", budget_s), ("compare_pairs", compare_pairs))
              if v is not None}
    try:
        spec = TuneSpec(trials=trials, batch=batch, guidelines_only=guidelines_only, precisions=precisions,  # type: ignore[arg-type]
                        runtimes=runtimes, train=train, **kwargs)  # type: ignore[arg-type]
    except RooftuneError as e:
        assert str(e) and "\n" not in str(e)
        return
    assert spec.objective in ("latency", "throughput")
    assert math.isfinite(spec.budget_s) and spec.budget_s > 0
    assert spec.trials is None or (type(spec.trials) is int and spec.trials >= 0)
    assert type(spec.compare_pairs) is int and spec.compare_pairs >= 1
    assert spec.precisions is None or (type(spec.precisions) is tuple and spec.precisions)
    assert dataclasses.replace(spec) == spec

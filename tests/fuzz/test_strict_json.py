"""rooftune.fileio.json_text: whatever a result holds (NaN, infinities, nested lists and dicts),
what rooftune prints or writes is strict JSON, with null where a number was not finite."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from rooftune.fileio import json_ready, json_text

_KEYS = st.sampled_from(["ci", "ci_low", "ci_high", "ratio", "latency_s", "x", "x_note", "interval", ""])
_LEAVES = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
_VALUES = st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                       | st.dictionaries(_KEYS, inner, max_size=4), max_leaves=20)


def _refuse(token: str) -> Any:
    raise ValueError(f"not JSON: {token}")


def _notes_where_not_finite(original: Any, written: Any) -> None:
    if isinstance(original, dict):
        for k, v in original.items():
            bad = isinstance(v, float) and not math.isfinite(v) or isinstance(v, (list, tuple)) and any(
                isinstance(x, float) and not math.isfinite(x) for x in v)
            if bad:
                assert any(isinstance(written.get(n), str) and "written as null" in written[n]
                           for n in (f"{k}_note", f"{k}_null_note")) or f"{k}_note" in original, (k, written)
            _notes_where_not_finite(v, written[k])
    elif isinstance(original, (list, tuple)):
        for a, b in zip(original, written, strict=True):
            _notes_where_not_finite(a, b)


@given(_VALUES)
def test_any_value_is_written_as_strict_json(value: Any) -> None:
    bare = json.loads(json_text(value, notes=False), parse_constant=_refuse)
    assert bare == json_ready(value, notes=False)
    noted = json.loads(json_text(value, indent=1, sort_keys=True), parse_constant=_refuse)
    _notes_where_not_finite(value, noted)

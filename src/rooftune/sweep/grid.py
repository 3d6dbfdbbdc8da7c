"""The values of a swept parameter, as the command line and the Python API give them.

    "1,8,64"          a list
    "16:1024:*2"      a geometric range: 16, 32, ..., 1024 (the end is kept when the factor reaches it)
    "8:64:+8"         an arithmetic range: 8, 16, ..., 64
    8, [1, 8, 64]     the Python API's integers

Every value is an integer >= the parameter's minimum; a range must have a factor > 1 or a step
> 0, and a start no larger than its end. A malformed one is refused with the text given.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rooftune.errors import InvalidArgument, is_int

#: The most values one parameter may take: a range like 1:10**9:+1 is a mistake, not a study.
MAX_VALUES = 64

_RANGE = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*:\s*([*+x])\s*(\d+)\s*$")
_ALLOWED = "a list (1,8,64), a geometric range (16:1024:*2) or an arithmetic range (8:64:+8) of integers"


def parse_values(text: str | int | Sequence[int], name: str, minimum: int = 1) -> tuple[int, ...]:
    """The values of parameter ``name`` (see the module docstring), in the order given, without
    repeats."""
    if is_int(text):
        values: list[int] = [int(text)]  # type: ignore[arg-type]
    elif isinstance(text, str):
        values = _parse_text(text, name)
    elif isinstance(text, Sequence) and text and all(is_int(v) for v in text):
        values = [int(v) for v in text]
    else:
        raise InvalidArgument(name, text, _ALLOWED)
    bad = [v for v in values if v < minimum]
    if bad:
        raise InvalidArgument(name, text, f"values must be integers >= {minimum}; {bad[0]} is not")
    if len(values) > MAX_VALUES:
        raise InvalidArgument(name, text, f"at most {MAX_VALUES} values per parameter ({len(values)} given)")
    return tuple(dict.fromkeys(values))


#: Digits in one value at most: Python refuses to read an integer of more than 4,300 digits, and
#: no swept parameter comes near 18.
MAX_DIGITS = 18


def _parse_text(text: str, name: str) -> list[int]:
    if re.search(rf"\d{{{MAX_DIGITS + 1},}}", text):
        raise InvalidArgument(name, text[:60] + ("..." if len(text) > 60 else ""),
                              f"each value has at most {MAX_DIGITS} digits")
    m = _RANGE.match(text)
    if m:
        start, end, op, step = int(m.group(1)), int(m.group(2)), m.group(3), int(m.group(4))
        if start > end:
            raise InvalidArgument(name, text, f"a range's start ({start}) must not exceed its end ({end})")
        if op in "*x":
            if step < 2 or start < 1:
                raise InvalidArgument(name, text, "a geometric range needs a start >= 1 and an integer factor >= 2 "
                                      "(16:1024:*2)")
            out: list[int] = []
            v = start
            while v <= end and len(out) <= MAX_VALUES:
                out.append(v)
                v *= step
            return out
        if step < 1:
            raise InvalidArgument(name, text, "an arithmetic range needs a step >= 1 (8:64:+8)")
        # counted before any value is made: 0:10**10:+1 would fill the memory first
        return [start + i * step for i in range(min((end - start) // step + 1, MAX_VALUES + 1))]
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or not all(re.fullmatch(r"\d+", p) for p in parts):
        raise InvalidArgument(name, text, _ALLOWED)
    return [int(p) for p in parts]

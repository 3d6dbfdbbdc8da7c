"""The one error hierarchy of rooftune.

Library code raises these; only :func:`rooftune.cli.main` turns them into an exit code and a
one-line message. Every message names the offending value, says what is allowed and how to fix it.
"""

from __future__ import annotations

import numbers


class RooftuneError(Exception):
    """Base of every error rooftune raises on purpose."""


class InvalidArgument(RooftuneError, ValueError):
    """A parameter has a value outside what is allowed."""

    def __init__(self, name: str, value: object, allowed: str, hint: str | None = None) -> None:
        self.name = name
        self.value = value
        self.allowed = allowed
        message = f"invalid {name} {value!r}: {allowed}"
        if hint:
            message += f"; {hint}"
        super().__init__(message)


class StoreError(RooftuneError):
    """The store cannot be opened, read or written."""


class MeasurementError(RooftuneError):
    """A measurement could not be taken (the timed code failed, crashed or timed out)."""


class WorkloadError(RooftuneError):
    """A model cannot be loaded, or fails on the inputs it was given."""


class ClusterError(RooftuneError):
    """A fleet's cluster cannot be reached, has no node for the work, or lost more than it can rerun."""


def one_line(error: BaseException | str, limit: int = 300) -> str:
    """The line of an error's message that says what went wrong, at most ``limit`` characters.

    Usually the first. Where the first only says where the check sat (OpenVINO's frontends open
    with "Check 'false' failed at src/...cpp:151:" and end with what they could not convert), the
    last line is kept instead."""
    lines = [ln.strip() for ln in str(error).strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    line = lines[0]
    if len(lines) > 1 and (line.endswith(":") or line.startswith("Check '")):
        line = lines[-1].removeprefix("-- ")
    return line if len(line) <= limit else line[:limit - 3] + "..."


def is_int(value: object) -> bool:
    """An integer, numpy's included, and not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: object) -> bool:
    """A real number, numpy's included, and not a bool (NaN and infinities are real numbers)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def as_names(value: object, name: str) -> tuple[str, ...] | None:
    """A list-of-names argument of the Python API as a tuple: a lone string is one name (not its
    characters, which would each be refused as an unknown name); None stays None (the default)."""
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise InvalidArgument(name, value, "allowed a name or a list of names")


def as_ints(value: object, name: str) -> tuple[int, ...] | None:
    """A list-of-integers argument (thread counts, batches): a lone integer is one; numpy's
    integers count as integers; None stays None."""
    if value is None:
        return None
    items = [value] if isinstance(value, numbers.Integral) else value
    if isinstance(items, (list, tuple, set, frozenset)) and all(is_int(v) for v in items):
        return tuple(int(v) for v in items)  # type: ignore[call-overload]
    raise InvalidArgument(name, value, "allowed an integer or a list of integers")


def thread_counts(value: object, usable: int, name: str = "threads",
                  each: str = "thread count") -> tuple[int, ...]:
    """Thread counts given to the Python API or a command: an integer or a list of them (numpy's
    too, not a bool; else refused as ``name``), each in 1..``usable`` (else refused as ``each``),
    as a tuple in the order given without repeats; empty where none were given (None, or an
    empty list: the caller's default)."""
    counts = as_ints(value, name) or ()
    for t in counts:
        if not 1 <= t <= usable:
            raise InvalidArgument(each, t, f"allowed 1..{usable} (the usable cores of this machine)")
    return tuple(dict.fromkeys(counts))

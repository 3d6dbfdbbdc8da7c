"""The registry of kernel families a sweep studies: a name maps to the class that knows the
family's parameters, how to build one point of it, and its FLOPs and bytes per pass.

A new family is one module with a :class:`rooftune.sweep.base.Family` subclass and one line in
:data:`FAMILIES`.
"""

from __future__ import annotations

from collections.abc import Callable

from rooftune.errors import InvalidArgument
from rooftune.sweep.base import Family
from rooftune.sweep.conv2d import Conv2d
from rooftune.sweep.lstm import Lstm

FAMILIES: dict[str, Callable[[], Family]] = {
    "conv2d": Conv2d,
    "lstm": Lstm,
}


def get_family(name: str) -> Family:
    """A new instance of the family ``name``; an unknown name lists the valid ones."""
    if not isinstance(name, str) or name not in FAMILIES:
        raise InvalidArgument("family", name, f"allowed {', '.join(FAMILIES)}")
    return FAMILIES[name]()

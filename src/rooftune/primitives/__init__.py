"""Convolution primitives behind one registry (see :mod:`rooftune.primitives.base` for the
contract) and the layout/precision transforms between them.

A new primitive is one class plus one line in :data:`PRIMITIVES`
(:mod:`rooftune.primitives.registry`).
"""

from __future__ import annotations

from rooftune.primitives.base import LAYOUTS, Kernel, Primitive, in_layout, to_layout
from rooftune.primitives.registry import PRIMITIVES, all_primitives, get_primitive
from rooftune.primitives.spec import ConvSpec
from rooftune.primitives.transforms import TRANSFORMS, Transform, transform_between

__all__ = [
    "LAYOUTS", "PRIMITIVES", "TRANSFORMS", "ConvSpec", "Kernel", "Primitive", "Transform", "all_primitives",
    "get_primitive", "in_layout", "to_layout", "transform_between",
]

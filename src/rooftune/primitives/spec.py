"""ConvSpec: one convolution layer's shape, the unit primitives are checked, timed and selected on."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from rooftune.errors import InvalidArgument
from rooftune.fileio import json_text

DTYPES = ("fp32", "int8")


def _pair(name: str, v: Any) -> tuple[int, int]:
    if isinstance(v, bool):
        raise InvalidArgument(name, v, "allowed an integer or a pair of integers")
    if isinstance(v, int):
        return (v, v)
    try:
        a, b = v
    except (TypeError, ValueError):
        raise InvalidArgument(name, v, "allowed an integer or a pair of integers") from None
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int) or not isinstance(b, int):
        raise InvalidArgument(name, v, "allowed an integer or a pair of integers")
    return (a, b)


@dataclass(frozen=True)
class ConvSpec:
    """A 2-D convolution: input N x C x H x W, K filters of C/groups x R x S, stride, padding and
    dilation as (height, width) pairs, groups, and the precision it runs in."""

    N: int
    C: int
    H: int
    W: int
    K: int
    R: int
    S: int
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    dtype: str = "fp32"

    if TYPE_CHECKING:
        # stride, padding and dilation are read as pairs but may be given as one int for both
        # (__post_init__ makes the pair): the signature the type checker is to see. At run time
        # the dataclass's own __init__ is the one there.
        def __init__(self, N: int, C: int, H: int, W: int, K: int, R: int, S: int,
                     stride: int | tuple[int, int] = (1, 1), padding: int | tuple[int, int] = (0, 0),
                     dilation: int | tuple[int, int] = (1, 1), groups: int = 1,
                     dtype: str = "fp32") -> None: ...

    def __post_init__(self) -> None:
        for key in ("stride", "padding", "dilation"):
            object.__setattr__(self, key, _pair(key, getattr(self, key)))
        for key in ("N", "C", "H", "W", "K", "R", "S", "groups"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidArgument(key, v, "allowed an integer >= 1")
        if min(self.stride) < 1 or min(self.dilation) < 1:
            raise InvalidArgument("stride/dilation", (self.stride, self.dilation), "allowed integers >= 1")
        if min(self.padding) < 0:
            raise InvalidArgument("padding", self.padding, "allowed integers >= 0")
        if self.C % self.groups or self.K % self.groups:
            raise InvalidArgument("groups", self.groups, f"must divide C={self.C} and K={self.K}")
        if self.dtype not in DTYPES:
            raise InvalidArgument("dtype", self.dtype, f"allowed {', '.join(DTYPES)}")
        eff_r = self.dilation[0] * (self.R - 1) + 1
        eff_s = self.dilation[1] * (self.S - 1) + 1
        if eff_r > self.H + 2 * self.padding[0] or eff_s > self.W + 2 * self.padding[1]:
            raise InvalidArgument("kernel", f"{self.R}x{self.S}",
                                  f"larger than the padded input {self.H + 2 * self.padding[0]}x{self.W + 2 * self.padding[1]}")

    @property
    def P(self) -> int:
        return (self.H + 2 * self.padding[0] - self.dilation[0] * (self.R - 1) - 1) // self.stride[0] + 1

    @property
    def Q(self) -> int:
        return (self.W + 2 * self.padding[1] - self.dilation[1] * (self.S - 1) - 1) // self.stride[1] + 1

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (self.N, self.C, self.H, self.W)

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        return (self.K, self.C // self.groups, self.R, self.S)

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.N, self.K, self.P, self.Q)

    @property
    def flops(self) -> int:
        """2 x multiply-adds (torch.utils.flop_counter's convention)."""
        return 2 * self.N * self.K * self.P * self.Q * (self.C // self.groups) * self.R * self.S

    @property
    def depthwise(self) -> bool:
        return self.groups == self.C and self.groups > 1

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("stride", "padding", "dilation"):
            d[key] = list(d[key])
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ConvSpec:
        known = set(cls.__dataclass_fields__)
        if not isinstance(d, dict):
            raise InvalidArgument("ConvSpec", type(d).__name__, f"allowed a mapping of its fields ({', '.join(sorted(known))})")
        unknown = set(d) - known
        if unknown:
            raise InvalidArgument("ConvSpec field", sorted(unknown)[0], f"allowed {', '.join(sorted(known))}")
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
        return cls(**values)

    def key(self) -> str:
        """Stable identity (hash of every field)."""
        return hashlib.sha256(json_text(self.to_dict(), notes=False, sort_keys=True).encode()).hexdigest()[:20]

    def describe(self) -> str:
        s = f"{self.N}x{self.C}x{self.H}x{self.W} -> K{self.K} {self.R}x{self.S}"
        if self.stride != (1, 1):
            s += f" s{self.stride[0]}" if self.stride[0] == self.stride[1] else f" s{self.stride}"
        if self.padding != (0, 0):
            s += f" p{self.padding[0]}" if self.padding[0] == self.padding[1] else f" p{self.padding}"
        if self.dilation != (1, 1):
            s += f" d{self.dilation[0]}" if self.dilation[0] == self.dilation[1] else f" d{self.dilation}"
        if self.groups > 1:
            s += f" g{self.groups}"
        return s + ("" if self.dtype == "fp32" else f" {self.dtype}")


def explicit_padding(conv: Any) -> tuple[int, int, int, int] | None:
    """The (left, right, top, bottom) amounts a ``torch.nn.Conv2d`` pads its input by before a
    primitive may run it with no padding of its own: its padding mode ('reflect', 'replicate',
    'circular') or an uneven 'same' padding, which a primitive's symmetric zero padding cannot
    express. None when the spec's padding says it all."""
    left, right, top, bottom = (int(v) for v in conv._reversed_padding_repeated_twice)
    if conv.padding_mode == "zeros" and left == right and top == bottom:
        return None
    return left, right, top, bottom


def layer_spec(conv: Any, shape: tuple[int, ...], dtype: str = "fp32") -> ConvSpec | None:
    """The spec a primitive runs for ``conv`` (a ``torch.nn.Conv2d``) on an input of ``shape``:
    after :func:`explicit_padding` where there is one (the padded input, no padding), else with the
    layer's own padding ('same' and 'valid' resolved). None for an input that is not 4-D."""
    if len(shape) != 4:
        return None
    n, c, h, w = (int(v) for v in shape)
    pad = explicit_padding(conv)
    if pad is None:
        left, _, top, _ = (int(v) for v in conv._reversed_padding_repeated_twice)
        padding = (top, left)
    else:
        h, w, padding = h + pad[2] + pad[3], w + pad[0] + pad[1], (0, 0)
    return ConvSpec(n, c, h, w, conv.out_channels, conv.kernel_size[0], conv.kernel_size[1], stride=tuple(conv.stride),
                    padding=padding, dilation=tuple(conv.dilation), groups=conv.groups, dtype=dtype)

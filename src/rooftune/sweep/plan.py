"""What a sweep runs: the grid of parameter values, and every point of it in each pass, precision
and variant, or the reason a combination is skipped.

A grid is a list of axes; each axis sets one or more parameters together (``channels`` sets in and
out channels to the same values, zipped). The points are the product of the axes, each other
parameter at its default. The default study is the union of the family's one-axis studies.

A point's key is the hash of (family, parameters, pass, precision, variant, platform id): a sweep
skips the keys its store already holds, so it resumes and adds to earlier sweeps.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rooftune.errors import InvalidArgument, as_names, is_int
from rooftune.fileio import json_text
from rooftune.sweep.base import PASSES, Family
from rooftune.sweep.grid import parse_values

CPU_PRECISIONS = ("fp32", "bf16", "fp16", "int8")
#: On a CUDA device fp32 runs with TF32 off; ``tf32`` is fp32 with TF32 allowed.
CUDA_PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
#: What a sweep runs without a ``precisions`` argument: fp32 and bf16, whose crossover the
#: findings state (bf16 is skipped with its reason where the machine lacks it).
DEFAULT_PRECISIONS = ("fp32", "bf16")
#: How a CUDA point is launched: one call at a time, or replayed from a captured CUDA graph.
LAUNCHES = ("eager", "graph")
DEFAULT_ALGORITHM = "default"
#: x86 and ARM features that give native fp16 arithmetic (none is among the features rooftune's
#: ISA detection reports on x86 today, so fp16 is skipped there: it would run converted to fp32).
FP16_FEATURES = ("avx512_fp16", "amx_fp16", "fp16")


@dataclass(frozen=True)
class Variant:
    """How a point runs besides its precision: the algorithm (``default``: the framework's choice,
    else a primitive's name), the memory layout, the threads; on CUDA the autotuning of cuDNN
    (``torch.backends.cudnn.benchmark``) and the launch mode."""

    algorithm: str = DEFAULT_ALGORITHM
    layout: str = "-"
    threads: int = 1
    autotune: bool = False
    launch: str = "eager"

    def key(self) -> str:
        return f"{self.algorithm}|{self.layout}|t{self.threads}|{'bench' if self.autotune else 'nobench'}|{self.launch}"

    def label(self) -> str:
        parts = [self.algorithm] + ([self.layout] if self.layout != "-" else []) + [f"{self.threads}t"]
        if self.autotune:
            parts.append("autotune")
        if self.launch != "eager":
            parts.append(self.launch)
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "layout": self.layout, "threads": self.threads,
                "autotune": self.autotune, "launch": self.launch}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Variant:
        return cls(str(d["algorithm"]), str(d["layout"]), int(d["threads"]), bool(d["autotune"]), str(d["launch"]))


@dataclass(frozen=True)
class PointSpec:
    """One point to run: a family's parameters in one pass, precision and variant, on a device."""

    family: str
    params: tuple[tuple[str, int], ...]
    pass_: str
    precision: str
    variant: Variant
    device: str = "cpu"

    @property
    def param_dict(self) -> dict[str, int]:
        return dict(self.params)

    def key(self, platform_id: str) -> str:
        text = json_text([self.family, sorted(self.params), self.pass_, self.precision, self.variant.key(),
                           self.device, platform_id])
        return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Skipped:
    """A combination not run, and why (a precision the machine lacks, a primitive that cannot run
    the point)."""

    family: str
    params: dict[str, int]
    pass_: str
    precision: str
    variant: str
    reason: str


@dataclass(frozen=True)
class Plan:
    points: tuple[PointSpec, ...]
    skipped: tuple[Skipped, ...] = field(default_factory=tuple)


def grid_axes(family: Family, grid: Mapping[str, Any] | None) -> list[dict[str, tuple[int, ...]]] | None:
    """The axes of a grid given as parameter (or alias) -> values; None: the default study."""
    if not grid:
        return None
    if not isinstance(grid, Mapping):
        raise InvalidArgument("grid", grid, "allowed a mapping of parameter name to values")
    axes = []
    for name, text in grid.items():
        targets = family.expand({name: None})
        values: tuple[int, ...] | None = None
        for target in targets:
            lo, hi = family.minimum.get(target, 1), family.maximum.get(target)
            values = parse_values(text, name, minimum=lo)
            if hi is not None and max(values) > hi:
                raise InvalidArgument(name, text, f"values must lie in {lo}..{hi}")
        axes.append({t: values or () for t in targets})
    return axes


def grid_points(family: Family, axes: list[dict[str, tuple[int, ...]]] | None) -> list[dict[str, int]]:
    """Every point's resolved parameters, in order and without repeats."""
    studies = [[axis] for axis in family.default_study] if axes is None else [axes]
    seen: dict[tuple[tuple[str, int], ...], dict[str, int]] = {}
    for study in studies:
        zipped = [[dict(zip(axis, values, strict=True)) for values in zip(*axis.values(), strict=True)]
                  for axis in study]
        for combo in itertools.product(*zipped):
            given: dict[str, int] = {}
            for part in combo:
                given.update(part)
            p = family.resolve(given)
            seen.setdefault(tuple(sorted(p.items())), p)
    return list(seen.values())


def check_names(value: Any, name: str, allowed: Sequence[str], default: Sequence[str]) -> tuple[str, ...]:
    names = as_names(value, name)
    if names is None:
        return tuple(default)
    if not names:
        raise InvalidArgument(name, value, f"allowed one or more of {', '.join(allowed)}")
    for n in names:
        if n not in allowed:
            raise InvalidArgument(name, n, f"allowed {', '.join(allowed)}")
    return tuple(dict.fromkeys(names))


def fp16_reason(isa: frozenset[str] | set[str]) -> str | None:
    if set(FP16_FEATURES) & set(isa):
        return None
    return (f"no native fp16 arithmetic ({', '.join(FP16_FEATURES)}) in the effective ISA; "
            "fp16 would run converted to fp32")


def precision_reasons(platform: Any, precisions: Sequence[str]) -> dict[str, str | None]:
    """On a CPU: precision -> None when the machine runs it natively, else why it is skipped."""
    from rooftune.machine import native_support

    out: dict[str, str | None] = {}
    for p in precisions:
        if p == "fp16":
            out[p] = fp16_reason(platform.effective_isa)
        else:
            out[p] = native_support(platform, p) if p in ("bf16", "int8") else None
    return out


def plan(
    family: Family,
    points: list[dict[str, int]],
    *,
    passes: Sequence[str],
    precisions: Sequence[str],
    algorithms: Sequence[str],
    layouts: Sequence[str],
    threads: Sequence[int],
    device: str = "cpu",
    precision_skip: Mapping[str, str | None] | None = None,
    autotune: Sequence[bool] = (False,),
    launches: Sequence[str] = ("eager",),
) -> Plan:
    """Every (point, pass, precision, variant) to run, and what is skipped with its reason.

    On a CPU ``precision_skip`` says which precisions the machine lacks; int8 runs the forward
    pass only, on the family's int8 algorithm; a primitive runs the forward pass at its own
    precision and layout. On CUDA every precision is planned (the device decides when it runs)
    with each autotuning setting and launch mode; CUDA graphs are captured for the forward pass.
    """
    skip = dict(precision_skip or {})
    out: list[PointSpec] = []
    skipped: list[Skipped] = []
    on_cuda = device != "cpu"
    for p, pass_, precision in itertools.product(points, passes, precisions):
        params = tuple(sorted(p.items()))

        def add(variant: Variant, reason: str | None = None, *, p: dict[str, int] = p, params: Any = params,
                pass_: str = pass_, precision: str = precision) -> None:
            if reason:
                skipped.append(Skipped(family.name, p, pass_, precision, variant.label(), reason))
            else:
                out.append(PointSpec(family.name, params, pass_, precision, variant, device))

        if skip.get(precision):  # once per point and pass: the machine lacks the precision
            add(Variant(algorithms[0], layouts[0], threads[0]), skip[precision])
            continue
        primitives = [a for a in algorithms if a != DEFAULT_ALGORITHM]
        if primitives and pass_ != "fwd" and precision != "int8":
            add(Variant(", ".join(primitives), "-", threads[0]), "primitives run the forward pass only")
        for t, algorithm in itertools.product(threads, algorithms):
            base = Variant(algorithm, layouts[0], t)
            if on_cuda:
                if algorithm != DEFAULT_ALGORITHM:
                    add(base, "rooftune's primitives run on the CPU only")
                    continue
                for layout, bench, launch in itertools.product(layouts, autotune, launches):
                    v = Variant(algorithm, layout, t, bench, launch)
                    add(v, "CUDA graphs are captured for the forward pass only"
                        if launch == "graph" and pass_ != "fwd" else None)
                continue
            if precision == "int8":
                if algorithm != DEFAULT_ALGORITHM:
                    continue  # int8 runs on the family's own int8 algorithm, once
                why = "int8 runs the forward pass only: there are no int8 training kernels" if pass_ != "fwd" \
                    else family.int8_reason(p)
                if why:
                    add(base, why)
                    continue
                name = family.int8_algorithm(p)
                add(Variant(name, family.primitive_layout(name), t))
                continue
            if algorithm == DEFAULT_ALGORITHM:
                for layout in layouts:
                    add(Variant(algorithm, layout, t))
                continue
            if pass_ != "fwd":
                continue  # said once above
            reasons = family.algorithms(p, precision)
            if algorithm not in reasons:
                continue  # a primitive of another precision (an int8 one at fp32): not this precision's
            layout = family.primitive_layout(algorithm)
            add(Variant(algorithm, layout, t), reasons[algorithm])
    return Plan(tuple(out), tuple(skipped))


def check_passes(value: Any) -> tuple[str, ...]:
    return check_names(value, "pass", PASSES, ("fwd",))


def check_threads(value: Any, usable: int) -> tuple[int, ...]:
    from rooftune.errors import thread_counts

    if value is not None and not (is_int(value) or (isinstance(value, (list, tuple)) and value)):
        raise InvalidArgument("threads", value, f"allowed integers in 1..{usable}")
    return tuple(thread_counts(value, usable)) or (usable,)

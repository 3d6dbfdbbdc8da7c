"""Immutable results of the harness: what was measured, where, how, and the raw samples."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import rooftune.bench.stats as stats
from rooftune.units import fmt_time


@dataclass(frozen=True)
class Policy:
    """How a measurement is taken. Every default has a reason.

    ``number`` fixes the calls per sample; None calibrates it so one sample lasts at least
    ``min_sample_time_s`` (timer resolution and call overhead then stay far below 1 %).
    """

    #: 10 ms per sample: perf_counter resolves ~50 ns, so quantisation error is < 0.001 %.
    min_sample_time_s: float = 0.01
    #: Time spent running before samples count: caches, page faults, JIT and thread pools settle.
    warmup_s: float = 0.05
    #: Stop when the 95 % confidence interval of the median is within +-2 % of it.
    target_rel_ci: float = 0.02
    #: Wall-clock budget of one measurement, warm-up included.
    budget_s: float = 2.0
    #: 6 is the fewest samples whose [min, max] covers the median with 95 % confidence.
    min_samples: int = 6
    max_samples: int = 2000
    number: int | None = None

    def __post_init__(self) -> None:
        """Refuses a policy the timer could not follow (``number=0`` divided by zero, a negative one
        gave negative times): seconds are real numbers >= 0 (the budget may be infinite), counts
        integers >= 1, and max_samples at least min_samples."""
        from rooftune.errors import InvalidArgument, is_int, is_real

        for name in ("min_sample_time_s", "warmup_s", "target_rel_ci", "budget_s"):
            v = getattr(self, name)
            if (not is_real(v) or math.isnan(v) or v < 0
                    or (math.isinf(v) and name != "budget_s")):
                allowed = "a number >= 0" + (" (inf: no limit)" if name == "budget_s" else ", finite")
                raise InvalidArgument(f"policy {name}", v, f"allowed {allowed}")
            if type(v) not in (int, float):  # numpy's (float64 is a float): the policy is written to JSON
                object.__setattr__(self, name, float(v))
        for name in ("min_samples", "max_samples", "number"):
            v = getattr(self, name)
            if v is None and name == "number":
                continue
            if not is_int(v) or v < 1:
                raise InvalidArgument(f"policy {name}", v, "allowed an integer >= 1"
                                      + (", or None to calibrate it" if name == "number" else ""))
            object.__setattr__(self, name, int(v))
        if self.max_samples < self.min_samples:
            raise InvalidArgument("policy max_samples", self.max_samples,
                                  f"allowed an integer >= min_samples ({self.min_samples})")


@dataclass(frozen=True)
class Method:
    """How a given measurement was actually taken (the policy plus what happened)."""

    policy: Policy
    isolation: str = "in-process"
    clock: str = "perf_counter"
    stop_reason: str = "stable"
    warmup_samples: int = 0


#: A run whose interquartile range exceeds 10 % of the median is flagged noisy (the threshold
#: torch.utils.benchmark uses for its "may be unstable" warning).
NOISY_IQR_FRACTION = 0.10


@dataclass(frozen=True)
class Measurement:
    """Raw samples (seconds per call) of one timed callable, with what/where/how.

    Statistics are computed lazily from ``samples`` and never stored separately, so they cannot
    disagree with the data.
    """

    label: str
    samples: tuple[float, ...]
    number: int
    method: Method
    params: dict[str, Any] = field(default_factory=dict)
    platform_id: str | None = None
    host: str | None = None
    started_at: float = 0.0
    warnings: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        return len(self.samples)

    @cached_property
    def median(self) -> float:
        return stats.median(self.samples)

    @cached_property
    def mean(self) -> float:
        return math.fsum(self.samples) / len(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    @cached_property
    def iqr(self) -> float:
        return stats.iqr(self.samples)

    @cached_property
    def cv(self) -> float:
        """Coefficient of variation (stdev / mean)."""
        return stats.coefficient_of_variation(self.samples)

    @cached_property
    def ci(self) -> tuple[float, float]:
        """95 % confidence interval of the median."""
        return stats.median_ci(self.samples)

    @property
    def rel_ci(self) -> float:
        """Half-width of :attr:`ci` relative to the median."""
        lo, hi = self.ci
        return stats.relative_half_width(lo, hi, self.median)

    @property
    def noisy(self) -> bool:
        return bool(self.warnings)

    def rate(self, work_per_call: float, *, best: bool = False) -> float:
        """``work_per_call`` per second at the median time (or the fastest sample with ``best``)."""
        return work_per_call / (self.min if best else self.median)

    def summary(self) -> dict[str, float]:
        return {
            "median": self.median,
            "min": self.min,
            "iqr": self.iqr,
            "cv": self.cv,
            "ci_low": self.ci[0],
            "ci_high": self.ci[1],
            "n": self.n,
        }

    def to_dict(self) -> dict[str, Any]:
        d = {
            "label": self.label,
            "samples": list(self.samples),
            "number": self.number,
            "method": asdict(self.method),
            "params": dict(self.params),
            "platform_id": self.platform_id,
            "host": self.host,
            "started_at": self.started_at,
            "warnings": list(self.warnings),
        }
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Measurement:
        m = dict(d["method"])
        method = Method(policy=Policy(**m.pop("policy")), **m)
        return cls(
            label=d["label"],
            samples=tuple(float(x) for x in d["samples"]),
            number=int(d["number"]),
            method=method,
            params=dict(d.get("params", {})),
            platform_id=d.get("platform_id"),
            host=d.get("host"),
            started_at=float(d.get("started_at", 0.0)),
            warnings=tuple(d.get("warnings", ())),
        )

    def __repr__(self) -> str:
        return (
            f"Measurement({self.label!r}: median {fmt_time(self.median)}, IQR {fmt_time(self.iqr)}, "
            f"n={self.n}x{self.number}{', noisy' if self.warnings else ''})"
        )


@dataclass(frozen=True)
class Comparison:
    """An interleaved A/B comparison: ``ratio = median(A) / median(B)`` (> 1: B is faster)."""

    a: Measurement
    b: Measurement
    ratio: float
    ci: tuple[float, float]
    stop_reason: str
    warnings: tuple[str, ...] = ()

    @property
    def rel_ci(self) -> float:
        return stats.relative_half_width(self.ci[0], self.ci[1], self.ratio)

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a.to_dict(),
            "b": self.b.to_dict(),
            "ratio": self.ratio,
            "ci": list(self.ci),
            "stop_reason": self.stop_reason,
            "warnings": list(self.warnings),
        }

    def __str__(self) -> str:
        lo, hi = self.ci
        return f"{self.b.label} vs {self.a.label}: {self.ratio:.3f}x (95% CI {lo:.3f}-{hi:.3f})"

"""The CPU's ceilings: the result type, the precisions and thread counts they are measured for, and
what the platform decides about them (its caches, its native instructions)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rooftune.errors import thread_counts
from rooftune.machine.roofline import Roofline, chosen_precisions
from rooftune.platform import Platform

PRECISIONS = ("fp32", "fp64", "bf16", "int8")


@dataclass(frozen=True, kw_only=True)
class Ceilings(Roofline):
    """The roofline of one platform: what the hardware can do, measured.

    ``peak_flops`` holds FLOP/s (ops/s for int8) on ``max(threads)`` threads for ``fp32``/``fp64``
    (FMA microkernels) and ``gemm_fp32``/``gemm_bf16``/``gemm_int8`` (torch GEMM);
    ``peak_flops_per_thread`` the same for every measured thread count. ``bandwidth`` holds bytes/s
    per memory level on all threads. ``skipped`` says why a roof is missing.
    """

    platform: Platform
    threads: tuple[int, ...]
    peak_flops_per_thread: dict[str, dict[int, float]]

    @property
    def max_threads(self) -> int:
        return max(self.threads)

    def describe(self) -> str:
        """What was measured, in a few words (titles of the figures)."""
        p = self.platform
        return f"{p.cpu_model} ({p.microarchitecture or 'unknown'}), {self.max_threads} threads"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``rooftune machine --json``); :meth:`from_dict` reads it back."""
        per_thread = {k: {str(t): v for t, v in d.items()} for k, d in self.peak_flops_per_thread.items()}
        d = super().to_dict()
        d["threads"] = list(self.threads)
        d["peak_flops"]["per_thread"] = per_thread
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, from_store: bool = False) -> Ceilings:
        per_thread = {k: {int(t): float(v) for t, v in pt.items()}
                      for k, pt in d["peak_flops"]["per_thread"].items()}
        return cls(platform=Platform.from_dict(d["platform"]), threads=tuple(d["threads"]),
                   peak_flops_per_thread=per_thread, **cls.shared_from_dict(d, from_store))


def default_threads(usable: int) -> tuple[int, ...]:
    """1, 2, 4, ... and ``usable``: every count on a small machine (1, 2 on two cores; 1, 2, 3 on
    three), a geometric set on a large one, where each count costs a peak and three GEMM roofs
    (1..64 would be 64 of each; a run on another count is placed by scaling, see Roofs)."""
    counts = {usable}
    t = 1
    while t < usable:
        counts.add(t)
        t *= 2
    return tuple(sorted(counts))


def validate_threads(threads: Sequence[int] | None, usable: int) -> tuple[int, ...]:
    """Thread counts to measure, in increasing order: default :func:`default_threads`; each must
    lie in 1..usable (:func:`rooftune.errors.thread_counts`)."""
    return tuple(sorted(thread_counts(threads, usable))) or default_threads(usable)


def validate_precisions(precisions: Sequence[str] | None) -> tuple[str, ...]:
    """The precisions to measure, in the order of :data:`PRECISIONS` (all of them by default)."""
    return chosen_precisions(precisions, PRECISIONS, "allowed")


def native_support(platform: Platform, precision: str) -> str | None:
    """None when ``precision``'s GEMM roof runs on native instructions, else the reason it does not."""
    isa = set(platform.effective_isa)
    needs = {
        "bf16": ({"avx512_bf16", "amx_bf16", "bf16"}, "avx512_bf16, amx_bf16 or ARM bf16"),
        "int8": ({"avx512_vnni", "avx_vnni", "amx_int8", "i8mm"},
                 "avx512_vnni, avx_vnni, amx_int8 or ARM i8mm"),
    }
    if precision not in needs:
        return None
    features, names = needs[precision]
    if isa & features:
        return None
    return (f"no native {precision} instructions ({names}) in the effective ISA; "
            "the roof would measure emulation")


def level_capacities(platform: Platform, cpus: tuple[int, ...]) -> dict[str, int]:
    """Bytes of each cache level available to a team on ``cpus`` ('L1' is the data cache)."""
    caps: dict[str, int] = {}
    for cache in platform.caches:
        if cache.kind == "Instruction":
            continue
        caps[f"L{cache.level}"] = cache.capacity_for(cpus)
    return caps

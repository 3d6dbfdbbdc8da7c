"""The result of a roofline analysis: each op timed and placed (:class:`OpResult`), the model's
totals, shares and opportunities derived from them (:class:`Analysis`), and the CSV of a trajectory.

Apart from the measurement (:mod:`rooftune.analysis.analyze`), which builds these: what reads an
analysis (the report, the command's tables, ``Analysis.from_dict`` over a stored row) reads only
this.
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rooftune.analysis.findings import opportunity_groups, top_opportunities

#: Opportunities listed by default.
TOP_N = 10


@dataclass(frozen=True)
class OpResult:
    """One op of an analysis: what it is, what it costs, how long it took, where it sits."""

    index: int
    name: str
    target: str
    kind: str
    module: str
    shapes: dict[str, Any]
    dtype: str
    flops: float | None
    bytes: float | None
    formula: str
    time_s: float
    time_iqr_s: float
    level: str
    roof_name: str
    roof_flops: float | None
    lower_bound_s: float
    efficiency: float | None
    bound: str
    headroom_s: float | None
    reason: str
    #: Bytes moved where more than the compulsory ``bytes`` (a recurrent op's steps each read its
    #: recurrent weights again: :class:`rooftune.costs.OpCost`); None: the compulsory bytes.
    traffic: float | None = None

    @property
    def moved_bytes(self) -> float | None:
        """The bytes its placement counts: ``traffic`` where given, else the compulsory bytes."""
        return self.traffic if self.traffic is not None else self.bytes

    @property
    def attained_flops(self) -> float | None:
        return self.flops / self.time_s if self.flops is not None and self.time_s > 0 else None

    @property
    def attained_bandwidth(self) -> float | None:
        moved = self.moved_bytes
        return moved / self.time_s if moved is not None and self.time_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["attained_flops"] = self.attained_flops
        d["attained_bytes_per_s"] = self.attained_bandwidth
        return d


@dataclass(frozen=True)
class Analysis:
    """The roofline analysis of one model at one batch and thread count."""

    model: str
    workload_kind: str
    batch: int
    threads: int
    input_shapes: tuple[tuple[int, ...], ...]
    capture: str
    capture_note: str
    platform_id: str
    end_to_end_s: float
    end_to_end_iqr_s: float
    ops_sum_s: float
    accounting_ratio: float
    accounting_ci: tuple[float, float]
    runs: int
    ops: tuple[OpResult, ...]
    roofs: dict[str, Any]
    duration_s: float
    warnings: tuple[str, ...] = ()
    ceilings_quick: bool = False
    created_at: float = field(default_factory=time.time)
    #: "cpu", or the CUDA device the model ran on ("cuda:0 NVIDIA H200"); ``threads`` are the host's.
    device: str = "cpu"
    #: A training step's analysis: its spec (optimizer, loss; TrainSpec.as_dict), else None.
    train: dict[str, Any] | None = None
    #: A training step's time by phase (forward with the loss, backward, optimizer): the median of
    #: each phase over the end-to-end runs, which read the clock between them.
    phases_s: dict[str, float] = field(default_factory=dict)

    @property
    def samples_per_s(self) -> float:
        """Samples (batch rows) per second of end-to-end time."""
        return self.batch / self.end_to_end_s if self.end_to_end_s > 0 else math.nan

    def by_phase(self) -> list[dict[str, Any]]:
        """A training step's phases: measured time and share of the step, the sum of their ops'
        median times, FLOPs and compulsory bytes, op count; empty for an inference analysis."""
        if not self.phases_s:
            return []
        total = math.fsum(self.phases_s.values()) or 1.0
        rows = []
        for phase, t in self.phases_s.items():
            ops = [o for o in self.ops if o.name.startswith(f"{phase}.")]
            rows.append({"phase": phase, "time_s": t, "share": t / total, "ops": len(ops),
                         "ops_time_s": math.fsum(o.time_s for o in ops), "flops": math.fsum(o.flops or 0.0 for o in ops),
                         "bytes": math.fsum(o.bytes or 0.0 for o in ops)})
        return rows

    # -- model totals --------------------------------------------------------------------
    @property
    def flops(self) -> float:
        return math.fsum(o.flops for o in self.ops if o.flops is not None)

    @property
    def bytes(self) -> float:
        return math.fsum(o.bytes for o in self.ops if o.bytes is not None)

    @property
    def lower_bound_s(self) -> float:
        return math.fsum(o.lower_bound_s for o in self.ops)

    @property
    def unattributed_s(self) -> float:
        """End-to-end time no op accounts for: Python, module calls, the framework between ops."""
        return self.end_to_end_s - self.ops_sum_s

    @property
    def between_ops_s(self) -> float | None:
        """The end-to-end time between ops, where it is measurable: None when the op times add
        up to all of it within their interval, or to more (a negative remainder is noise, not time)."""
        hi = self.accounting_ci[1]
        if self.unattributed_s <= 0 or (math.isfinite(hi) and hi >= 1):
            return None
        return self.unattributed_s

    @property
    def ops_median_sum_s(self) -> float:
        """The sum of the per-op medians (the op table's total)."""
        return math.fsum(o.time_s for o in self.ops)

    @property
    def efficiency(self) -> float:
        return self.lower_bound_s / self.end_to_end_s if self.end_to_end_s > 0 else math.nan

    @property
    def unknown_ops(self) -> list[OpResult]:
        return [o for o in self.ops if o.flops is None]

    def opportunities(self, n: int = TOP_N) -> list[OpResult]:
        by_index = {o.index: o for o in self.ops}
        return [by_index[d["index"]] for d in top_opportunities([o.to_dict() for o in self.ops], n)]

    def opportunity_groups(self, n: int = TOP_N) -> list[dict[str, Any]]:
        """The largest headrooms with alike ops taken together (a block repeated down the network
        is one line): see :func:`rooftune.analysis.findings.opportunity_groups`."""
        return opportunity_groups([o.to_dict() for o in self.ops], n)

    def by_kind(self) -> list[dict[str, Any]]:
        """Time, FLOPs and op count per op kind, largest time first."""
        acc: dict[str, dict[str, Any]] = {}
        for o in self.ops:
            k = acc.setdefault(o.kind, {"kind": o.kind, "ops": 0, "time_s": 0.0, "flops": 0.0, "headroom_s": 0.0})
            k["ops"] += 1
            k["time_s"] += o.time_s
            k["flops"] += o.flops or 0.0
            k["headroom_s"] += max(o.headroom_s or 0.0, 0.0)
        total = self.end_to_end_s or 1.0
        for k in acc.values():
            k["share"] = k["time_s"] / total
        return sorted(acc.values(), key=lambda k: -k["time_s"])

    def by_bound(self) -> dict[str, float]:
        """Share of the end-to-end time spent in ops of each bound class."""
        acc: dict[str, float] = {}
        for o in self.ops:
            acc[o.bound] = acc.get(o.bound, 0.0) + o.time_s
        total = self.end_to_end_s or 1.0
        return {k: v / total for k, v in sorted(acc.items(), key=lambda kv: -kv[1])}

    def to_dict(self, top: int = TOP_N) -> dict[str, Any]:
        return {
            "model": self.model,
            "workload_kind": self.workload_kind,
            "batch": self.batch,
            "threads": self.threads,
            "input_shapes": [list(s) for s in self.input_shapes],
            "capture": self.capture,
            "capture_note": self.capture_note,
            "platform_id": self.platform_id,
            "end_to_end_s": self.end_to_end_s,
            "end_to_end_iqr_s": self.end_to_end_iqr_s,
            "ops_sum_s": self.ops_sum_s,
            "ops_median_sum_s": self.ops_median_sum_s,
            "unattributed_s": self.unattributed_s,
            "accounting_ratio": self.accounting_ratio,
            "accounting_ratio_ci": list(self.accounting_ci),
            "lower_bound_s": self.lower_bound_s,
            "efficiency": self.efficiency,
            "flops": self.flops,
            "bytes": self.bytes,
            "runs": self.runs,
            "roofs": self.roofs,
            "ceilings_quick": self.ceilings_quick,
            "by_kind": self.by_kind(),
            "by_bound": self.by_bound(),
            "unknown_ops": [{"name": o.name, "target": o.target, "time_s": o.time_s, "why": o.formula} for o in self.unknown_ops],
            "opportunities": [
                {"index": o.index, "name": o.name, "headroom_s": o.headroom_s, "reason": o.reason}
                for o in self.opportunities(top)
            ],
            "opportunity_groups": self.opportunity_groups(top),
            "ops": [o.to_dict() for o in self.ops],
            "warnings": list(self.warnings),
            "duration_s": self.duration_s,
            "created_at": self.created_at,
            "device": self.device,
            "train": self.train,
            "phases_s": dict(self.phases_s),
            "by_phase": self.by_phase(),
            "samples_per_s": self.samples_per_s,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Analysis:
        fields = OpResult.__dataclass_fields__
        ops = tuple(OpResult(**{k: v for k, v in o.items() if k in fields}) for o in d["ops"])
        return cls(
            model=d["model"], workload_kind=d["workload_kind"], batch=d["batch"], threads=d["threads"],
            input_shapes=tuple(tuple(s) for s in d["input_shapes"]), capture=d["capture"],
            capture_note=d["capture_note"], platform_id=d["platform_id"], end_to_end_s=d["end_to_end_s"],
            end_to_end_iqr_s=d["end_to_end_iqr_s"], ops_sum_s=d["ops_sum_s"],
            accounting_ratio=d["accounting_ratio"], accounting_ci=tuple(d["accounting_ratio_ci"]), runs=d["runs"], ops=ops, roofs=d["roofs"],  # type: ignore[arg-type]
            duration_s=d["duration_s"], warnings=tuple(d["warnings"]), ceilings_quick=d["ceilings_quick"],
            created_at=d["created_at"], device=d.get("device", "cpu"), train=d.get("train"),
            phases_s=dict(d.get("phases_s") or {}),
        )


def write_csv(analyses: Sequence[Analysis], path: str | Path) -> Path:
    """One row per op and analysis point: the point's batch and threads, then every figure of
    :meth:`OpResult.to_dict` (shapes as JSON text)."""
    from rooftune.fileio import atomic_open, json_text

    p = Path(path)
    columns = ["model", "batch", "threads", "device", *OpResult.__dataclass_fields__, "attained_flops",
               "attained_bytes_per_s"]
    with atomic_open(p, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for a in analyses:
            for o in a.ops:
                row = {"model": a.model, "batch": a.batch, "threads": a.threads, "device": a.device, **o.to_dict()}
                w.writerow({k: json_text(v) if isinstance(v, (dict, list)) else v for k, v in row.items()})
    return p

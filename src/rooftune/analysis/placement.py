"""Where one op sits on the roofline: the roof that binds it, its efficiency, bound class and headroom.

For an op with F FLOPs and B compulsory bytes timed at t seconds, on P FLOP/s and the bandwidth BW
of the smallest memory level its working set (B) fits in:

    roof        = min(P, F/B * BW)                 attainable FLOP/s
    lower bound = max(F/P, B/BW, dispatch)         the time-based roofline (Yang et al. 2020)
    efficiency  = max(F/P, B/BW) / t               = attained / roof
    bound       = 'overhead' if t <= OVERHEAD_FACTOR * dispatch, or the dispatch floor binds the
                  lower bound (the op's work takes the hardware less than one dispatch: a view,
                  a matrix-vector product of a few hundred bytes), else
                  'compute' if F/P >= B/BW, else 'memory-<level>'
    headroom    = t - lower bound
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rooftune.costs import OpCost

if TYPE_CHECKING:
    from rooftune.machine import Ceilings
    from rooftune.machine.gpu import GpuCeilings

#: An op within 2x the framework's dispatch floor is limited by overhead, not by the hardware.
OVERHEAD_FACTOR = 2.0
#: Memory levels from the closest; a working set beyond the last cache is served by DRAM.
LEVEL_ORDER = ("L1", "L2", "L3", "DRAM")
#: Which measured peak bounds an op of each dtype: FMA microkernels for fp32/fp64, the native GEMM
#: roofs for bf16 and int8 (no FMA microkernel exists for them). fp16 has no roof of its own: fp32's.
DTYPE_ROOF = {
    "float32": "fp32", "float64": "fp64", "float16": "fp32", "bfloat16": "gemm_bf16",
    "int8": "gemm_int8", "uint8": "gemm_int8", "qint8": "gemm_int8", "quint8": "gemm_int8",
}


def tf32_allowed(backend: str, op: str) -> bool:
    """Whether torch lets an fp32 ``op`` use TF32 on a CUDA device: ``("cudnn", "conv")``,
    ``("cudnn", "rnn")`` or ``("cuda", "matmul")``. The ``fp32_precision`` settings decide, the
    op's own first, then its backend's, then torch's ("none" defers to the next); where all say
    "none" (or torch predates them), the legacy flags: ``torch.backends.cudnn.allow_tf32`` and the
    float32 matmul precision. torch refuses to read a legacy flag once the new settings were mixed
    in; then TF32 is taken as allowed (the higher roof: no op is placed above it)."""
    import operator

    import torch

    for path in (f"backends.{backend}.{op}.fp32_precision", f"backends.{backend}.fp32_precision",
                 "backends.fp32_precision"):
        try:
            value = operator.attrgetter(path)(torch)
        except (AttributeError, RuntimeError):
            continue
        if value in ("tf32", "ieee"):
            return value == "tf32"
    try:
        if backend == "cudnn":
            return bool(torch.backends.cudnn.allow_tf32)
        return torch.get_float32_matmul_precision() != "highest"
    except RuntimeError:
        return True


@dataclass(frozen=True)
class Roofs:
    """The ceilings that apply to a run on ``threads`` threads."""

    threads: int
    peak: dict[str, float]
    bandwidth: dict[str, float]
    capacity: dict[str, int]
    dispatch_s: float
    notes: tuple[str, ...] = ()
    #: On a CUDA device: op kind -> dtype -> the matrix roof its kernels run on (convolutions and
    #: products run on the matrix units, everything else on the vector units: ``vector``).
    matrix: dict[str, dict[str, str]] | None = None
    vector: dict[str, str] | None = None

    @classmethod
    def from_ceilings(cls, ceilings: Ceilings, threads: int) -> Roofs:
        notes = []
        peak: dict[str, float] = {}
        for name in set(ceilings.peak_flops) | set(ceilings.peak_flops_per_thread):
            per = ceilings.peak_flops_per_thread.get(name, {})
            below = [n for n in per if n < threads]
            above = [n for n in per if n > threads]
            if threads in per:
                peak[name] = per[threads]
            elif below:
                # Not measured on this count (a large machine measures 1, 2, 4, ...): linear scaling
                # from the nearest count below, at most the nearest count above: still a roof.
                lo = max(below)
                peak[name] = per[lo] * threads / lo
                if above:
                    peak[name] = min(peak[name], per[min(above)])
                notes.append(f"{name} peak on {threads} threads scaled from its {lo}-thread value")
            elif name in ceilings.peak_flops:
                peak[name] = ceilings.peak_flops[name]
                notes.append(f"{name} peak measured on {ceilings.max_threads} threads, not {threads}")
        if threads != ceilings.max_threads:
            notes.append(f"bandwidths measured on {ceilings.max_threads} threads, used for {threads}")
        levels = [lv for lv in LEVEL_ORDER if lv in ceilings.bandwidth]
        return cls(
            threads=threads,
            peak=peak,
            bandwidth={lv: ceilings.bandwidth[lv] for lv in levels},
            capacity={lv: ceilings.capacity_bytes[lv] for lv in levels if lv in ceilings.capacity_bytes},
            dispatch_s=ceilings.dispatch_overhead_s,
            notes=tuple(notes),
        )

    @classmethod
    def from_gpu(cls, ceilings: GpuCeilings, threads: int) -> Roofs:
        """The roofs of a CUDA device: its matrix roof by dtype for convolutions, products,
        attention and recurrent layers, in fp32 the tf32 roof where torch lets that kind use TF32
        (:func:`tf32_allowed`); the vector FMA peak for every other op."""

        def fp32(tf32: bool) -> str:
            return "gemm_tf32" if tf32 else "gemm_fp32"

        conv, rnn, matmul = tf32_allowed("cudnn", "conv"), tf32_allowed("cudnn", "rnn"), tf32_allowed("cuda", "matmul")
        low = {"float16": "gemm_fp16", "bfloat16": "gemm_bf16", "int8": "gemm_int8", "float8_e4m3fn": "gemm_fp8"}
        matrix = {kind: {"float32": fp32(tf), **low} for kind, tf in
                  (("conv", conv), ("rnn", rnn), ("linear", matmul), ("matmul", matmul), ("attention", matmul))}
        return cls(
            threads=threads,
            peak={k: v for k, v in ceilings.peak_flops.items() if v > 0},
            bandwidth={lv: ceilings.bandwidth[lv] for lv in LEVEL_ORDER if lv in ceilings.bandwidth},
            capacity={lv: c for lv, c in ceilings.capacity_bytes.items() if lv in ceilings.bandwidth},
            dispatch_s=ceilings.dispatch_overhead_s,
            matrix=matrix,
            vector={"float64": "fp64"},
        )

    def peak_for(self, dtype: str, kind: str = "") -> tuple[str, float]:
        if self.matrix is not None:  # a CUDA device
            name = self.matrix.get(kind, {}).get(dtype) or (self.vector or {}).get(dtype, "fp32")
            if name not in self.peak:
                name = "fp32"
            return name, self.peak.get(name, 0.0)
        name = DTYPE_ROOF.get(dtype, "fp32")
        if name not in self.peak:
            name = "fp32"
        return name, self.peak.get(name, 0.0)

    def level_for(self, working_set: float) -> str:
        """The closest level whose capacity holds the working set; DRAM (or the last level) else."""
        for lv in self.bandwidth:
            cap = self.capacity.get(lv)
            if cap is not None and working_set <= cap:
                return lv
        return "DRAM" if "DRAM" in self.bandwidth else list(self.bandwidth)[-1]


@dataclass(frozen=True)
class Placement:
    level: str
    roof_name: str
    roof_flops: float | None
    compute_s: float
    memory_s: float
    lower_bound_s: float
    efficiency: float | None
    bound: str
    headroom_s: float | None


def place(cost: OpCost, time_s: float, dtype: str, roofs: Roofs) -> Placement:
    """Place one op (see the module docstring). An op without a cost formula gets only its
    dispatch floor as lower bound and no efficiency or headroom."""
    roof_name, peak = roofs.peak_for(dtype, cost.kind)
    overhead = time_s <= OVERHEAD_FACTOR * roofs.dispatch_s
    if not cost.known:
        return Placement("", roof_name, None, 0.0, 0.0, roofs.dispatch_s, None,
                         "overhead" if overhead else "unknown", None)
    flops = float(cost.flops or 0.0)
    # the bytes moved (a recurrent op's steps each read its recurrent weights again) from the
    # level that holds what they re-read
    nbytes = float(cost.traffic if cost.traffic is not None else cost.bytes or 0.0)
    level = roofs.level_for(float(cost.working_set if cost.working_set is not None else nbytes))
    bw = roofs.bandwidth.get(level, 0.0)
    compute_s = flops / peak if peak > 0 else 0.0
    memory_s = nbytes / bw if bw > 0 else 0.0
    roofline_s = max(compute_s, memory_s)
    lower = max(roofline_s, roofs.dispatch_s)
    roof = min(peak, flops / nbytes * bw) if nbytes > 0 and flops > 0 else (peak if flops > 0 else None)
    # no work (a view), or less than one dispatch's worth: the dispatch floor binds, not the hardware
    if overhead or (flops == 0 and nbytes == 0) or roofline_s < roofs.dispatch_s:
        bound = "overhead"
    elif compute_s >= memory_s and flops > 0:
        bound = "compute"
    else:
        bound = f"memory-{level}"
    efficiency = roofline_s / time_s if time_s > 0 else None
    return Placement(level, roof_name, roof, compute_s, memory_s, lower, efficiency, bound, time_s - lower)

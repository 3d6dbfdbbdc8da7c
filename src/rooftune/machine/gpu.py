"""The roofline of a CUDA device: ``rooftune machine --device cuda``.

What is measured, each through the one harness with a clock that synchronizes the device before
it reads the host's (a sample is ``number`` launches queued back to back, then one wait):

- ``fp32``/``fp64``: FMA peaks of the vector units, a Triton microkernel (:mod:`gpu_kernels`);
- ``gemm_fp32`` (tf32 off), ``gemm_tf32``, ``gemm_fp16``, ``gemm_bf16``, ``gemm_int8``
  (``torch._int_mm``), ``gemm_fp8`` (``torch._scaled_mm``, compute capability 8.9 and later): the
  matrix roofs of the library torch calls, on random square operands, each product checked against
  float64 on a corner before its rate is kept;
- bandwidth of L2 and device memory (``DRAM``) from a working-set sweep of Triton read, copy and
  triad kernels, plateaus detected and named as the CPU's are;
- the dispatch overhead: the time of one tiny op (``torch.add`` of two 1-element tensors) in a
  stream of them, the floor of the time-based roofline for eager execution on the device; and the
  latency of one op waited for.

Ceilings are upper bounds, so each rate comes from its fastest sample, as on the CPU. The probes
are in :mod:`rooftune.machine.gpu_probes`; this module runs them (:class:`GpuRun`, one method per
phase) and assembles the result as the CPU's is (:mod:`rooftune.machine.roofline`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import rooftune.machine.gpu_probes as gpu_probes
from rooftune.bench import Measurement
from rooftune.errors import MeasurementError, RooftuneError, one_line
from rooftune.machine.plateaus import Plateau, level_warnings, sweep_sizes
from rooftune.machine.roofline import (
    SWEEP_ARRAYS_FACTOR,
    Progress,
    Roofline,
    RooflineRun,
    chosen_precisions,
    keep_faster,
    level_bandwidth,
    missing_levels,
    named_levels,
    sweep_levels,
)
from rooftune.platform.gpu import GpuDevice

GPU_PRECISIONS = ("fp32", "fp64", "tf32", "fp16", "bf16", "int8", "fp8")
#: The memory levels a device's sweep names: its L2 and its own memory.
GPU_LEVELS = ("L2", "DRAM")
#: The peaks each precision asks for (a vector FMA peak and/or a matrix roof).
PRECISION_ROOFS = {
    "fp32": ("fp32", "gemm_fp32"),
    "fp64": ("fp64",),
    "tf32": ("gemm_tf32",),
    "fp16": ("gemm_fp16",),
    "bf16": ("gemm_bf16",),
    "int8": ("gemm_int8",),
    "fp8": ("gemm_fp8",),
}
#: The sweep goes to this many times L2, and at least :data:`MIN_SWEEP_BYTES`.
L2_FACTOR = 16
MIN_SWEEP_BYTES = 1024**3
SWEEP_START_BYTES = 1024**2
#: The sweep's arrays (:data:`rooftune.machine.roofline.SWEEP_ARRAYS_FACTOR` times the largest
#: working set) take at most this share of the device's memory.
SWEEP_MEMORY_SHARE = 0.25


def validate_gpu_precisions(precisions: Sequence[str] | None) -> tuple[str, ...]:
    """The precisions to measure, in the order of :data:`GPU_PRECISIONS` (all of them by default)."""
    return chosen_precisions(precisions, GPU_PRECISIONS, "allowed on a CUDA device:")


def cuda_clock(index: int) -> Callable[[], float]:
    """perf_counter read after the device has finished everything queued on it. Its ``cuda_device``
    tells an op graph's ``run_timed`` to time each op by events on that device."""
    import torch

    def cuda_synchronized() -> float:
        torch.cuda.synchronize(index)
        return time.perf_counter()

    cuda_synchronized.cuda_device = index  # type: ignore[attr-defined]  # op graphs time ops by events on it
    return cuda_synchronized


@dataclass(frozen=True, kw_only=True)
class GpuCeilings(Roofline):
    """The roofline of one CUDA device, measured. ``peak_flops`` holds FLOP/s (ops/s for int8) of
    the vector FMA peaks (``fp32``, ``fp64``) and the matrix roofs (``gemm_*``); ``bandwidth``
    bytes/s of ``L2`` and ``DRAM`` (the device's memory); ``skipped`` says why a roof is missing."""

    platform: GpuDevice
    launch_latency_s: float

    def describe(self) -> str:
        return self.platform.describe()

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "device": "cuda", "launch_latency_s": self.launch_latency_s}

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, from_store: bool = False) -> GpuCeilings:
        return cls(platform=GpuDevice.from_dict(d["platform"]), launch_latency_s=float(d["launch_latency_s"]),
                   **cls.shared_from_dict(d, from_store))


def triton_missing() -> str | None:
    """None when Triton can compile the microkernels, else why not."""
    try:
        import triton  # noqa: F401
    except ImportError as e:
        return f"Triton is not installed ({one_line(e)}); it compiles the FMA and stream microkernels"
    return None


def name_levels(sweep: dict[str, list[tuple[int, float]]], capacities: dict[str, int], min_points: int,
                ) -> tuple[dict[str, dict[str, float]], dict[str, list[Plateau]], list[str]]:
    """Plateaus of each kernel's sweep named L2 / DRAM: (bandwidth by kernel and level, plateaus,
    warnings for a level found by no distinct plateau); a level spans at least ``min_points``
    points (:attr:`rooftune.machine.roofline.RooflineEffort.min_points`)."""
    named = {kind: named_levels([b for b, _ in points], [r for _, r in points], capacities, min_points)
             for kind, points in sweep.items()}
    plateaus, by_kernel = sweep_levels(named)
    return by_kernel, plateaus, [w for kind, levels in named.items() for w in level_warnings(kind, levels)]


def measure_gpu_ceilings(device: GpuDevice, *, precisions: tuple[str, ...] = GPU_PRECISIONS,
                         quick: bool = False, progress: Any = None) -> tuple[GpuCeilings, list[Measurement]]:
    """Run every probe on ``device`` (its CUDA device current meanwhile: Triton launches there);
    returns the GpuCeilings and the Measurements behind them. A roof or the sweep that fails is
    skipped with its reason; the dispatch overhead failing is a MeasurementError."""
    with on_device(device.index):
        run = GpuRun(device, precisions=precisions, quick=quick, progress=progress)
        return run.run(), run.measurements


@contextlib.contextmanager
def on_device(index: int) -> Iterator[None]:
    """CUDA device ``index`` current inside, the caller's current device back after."""
    import torch

    with torch.cuda.device(index):
        yield


class GpuRun(RooflineRun):
    """One run of a CUDA device's probes, phase by phase (:meth:`run` runs them in order): the
    vector peaks and matrix roofs, the bandwidth sweep, a second look at the peaks and roofs in a
    full run, the dispatch overhead, and the result."""

    def __init__(self, device: GpuDevice, *, precisions: tuple[str, ...], quick: bool,
                 progress: Progress | None) -> None:
        self.effort = gpu_probes.QUICK if quick else gpu_probes.FULL
        self.clock = cuda_clock(device.index)
        super().__init__(progress, quick)
        self.device = device
        self.details.update({"gemm_size": self.effort.gemm_size, "gemm_relative_error": {}})
        self.wanted = [r for p in precisions for r in PRECISION_ROOFS[p]]
        self.no_triton = triton_missing()
        self.capacities = {"L2": device.l2_bytes} if device.l2_bytes else {}
        self.sweep_points: dict[str, list[tuple[int, float]]] = {}
        self.bandwidth: dict[str, float] = {}
        self.bandwidth_by_kernel: dict[str, dict[str, float]] = {}
        self.plateaus: dict[str, list[Plateau]] = {}
        self.dispatch_overhead_s = 0.0
        self.launch_latency_s = 0.0

    def run(self) -> GpuCeilings:
        """Every phase in order; the result (the Measurements are in :attr:`measurements`)."""
        self.peaks()
        self.sweep()
        self.second_looks()
        self.dispatch()
        return self.assemble()

    def peaks(self, again: bool = False) -> None:
        """Every roof the precisions ask for; a roof that cannot run is skipped with its reason and
        the rest go on. On a second look (``again``) each roof keeps its faster look, and a look that
        fails keeps the first with a warning."""
        for roof in self.wanted:
            if roof in self.skipped:
                continue
            try:
                look = self._roof(roof, " again" if again else "")
            except Exception as e:  # a kernel that does not compile, a library without the product
                if not again:
                    self.skipped[roof] = one_line(e)
                else:
                    self.warnings.append(f"{roof}: the second look failed ({one_line(e)}); the first is kept")
                continue
            if look is not None:
                self.measurements.extend(look[1])
                keep_faster(self.peak, {roof: look[0]})

    def _roof(self, roof: str, suffix: str) -> tuple[float, list[Measurement]] | None:
        """One look at ``roof``: its rate and Measurements, or None when the device cannot run it
        (the reason in :attr:`skipped`)."""
        if roof in ("fp32", "fp64"):
            if self.no_triton:
                self.skipped[roof] = self.no_triton
                return None
            self.step(f"FMA peak {roof}{suffix}")
            rate, ms = gpu_probes.fma_peak(roof, self.device, self.effort, self.clock)
            return rate, ms
        precision = roof[5:]
        if precision == "fp8" and self.device.capability < (8, 9):
            self.skipped[roof] = ("no fp8 matrix units before compute capability 8.9 "
                                  f"(this device: {self.device.arch})")
            return None
        self.step(f"matrix roof {precision}{suffix}")
        rate, m, error = gpu_probes.gemm_roof(precision, self.device, self.effort, self.clock)
        self.details["gemm_relative_error"][precision] = error
        return rate, [m]

    def sweep(self) -> None:
        """The bandwidth sweep from 1 MiB to :data:`L2_FACTOR` times L2 (within
        :data:`SWEEP_MEMORY_SHARE` of the device's memory), its plateaus named L2 and DRAM."""
        device, effort = self.device, self.effort
        max_bytes = max(L2_FACTOR * device.l2_bytes, MIN_SWEEP_BYTES)
        if max_bytes * SWEEP_ARRAYS_FACTOR > SWEEP_MEMORY_SHARE * device.memory_bytes:
            max_bytes = int(SWEEP_MEMORY_SHARE * device.memory_bytes / SWEEP_ARRAYS_FACTOR)
            self.warnings.append(f"the bandwidth sweep stops at {max_bytes / 1024**2:.0f} MiB: its arrays "
                                 "take a quarter of the device's memory")
        # the geometric steps can end past max_bytes (a cap is no power of two): those are left out
        sizes = [b for b in sweep_sizes(max_bytes, effort.steps_per_octave, min_bytes=SWEEP_START_BYTES)
                 if b <= max_bytes]
        if self.no_triton:
            self.skipped["bandwidth"] = self.no_triton
            return
        self.step.start("bandwidth sweep")
        try:
            points, self.details["stream_configs"] = gpu_probes.bandwidth_sweep(
                device, sizes, effort, self.clock, progress=self.step)
        except Exception as e:  # a kernel that does not compile, runs out of memory or computes wrong
            self.skipped["bandwidth"] = one_line(e)
            points = {}
        for kind, pts in points.items():
            self.measurements += [p.measurement for p in pts]
            self.sweep_points[kind] = [(p.bytes, p.bandwidth) for p in pts]
        self.bandwidth_by_kernel, self.plateaus, more = name_levels(self.sweep_points, self.capacities,
                                                                    effort.min_points)
        self.warnings += more
        self.bandwidth = level_bandwidth(self.bandwidth_by_kernel, GPU_LEVELS)
        if self.sweep_points:
            self.warnings += missing_levels(self.bandwidth, GPU_LEVELS)

    def second_looks(self) -> None:
        """In a full run, every roof once more: clocks and other tenants change over seconds."""
        if self.effort.late_looks:
            self.peaks(again=True)

    def dispatch(self) -> None:
        """The dispatch overhead and the latency of one op waited for, the last step of the run."""
        try:
            self.step("dispatch overhead")
            self.dispatch_overhead_s, self.launch_latency_s, ms = gpu_probes.dispatch_overhead(
                self.device, self.effort, self.clock)
        except Exception as e:  # the one figure every device has: without it there is no result
            raise MeasurementError(f"the dispatch overhead of {self.device.describe()} could not be "
                                   f"measured: {one_line(e)}") from e
        self.measurements += ms
        self.close_steps()

    def assemble(self) -> GpuCeilings:
        """The GpuCeilings, with what the run warns of."""
        return self.result(
            GpuCeilings,
            advice="when the device is idle",
            platform=self.device,
            bandwidth=self.bandwidth,
            bandwidth_by_kernel=self.bandwidth_by_kernel,
            plateaus=self.plateaus,
            sweep=self.sweep_points,
            capacity_bytes=self.capacities,
            dispatch_overhead_s=self.dispatch_overhead_s,
            launch_latency_s=self.launch_latency_s,
        )


def get_gpu_ceilings(
    index: int = 0,
    *,
    precisions: Sequence[str] | None = None,
    quick: bool = False,
    refresh: bool = False,
    db: str | None = None,
    store: Any = None,
    device: GpuDevice | None = None,
    progress: Any = None,
) -> GpuCeilings:
    """The ceilings of CUDA device ``index``: from the store when measured before (unless
    ``refresh``), else measured now and stored. InvalidArgument when there is no such device or a
    precision is unknown, before anything is measured or written."""
    from rooftune.machine.stored import stored_or_measured
    from rooftune.platform.gpu import current_gpu
    from rooftune.store import open_store

    prec = validate_gpu_precisions(precisions)
    device = device or current_gpu(index)
    own_store = store is None
    store = open_store(store or db)

    def complete(cached: GpuCeilings) -> bool:
        have = set(cached.peak_flops) | set(cached.skipped)
        return all(r in have for p in prec for r in PRECISION_ROOFS[p])

    def measured() -> tuple[GpuCeilings, list[Measurement]]:
        try:
            return measure_gpu_ceilings(device, precisions=prec, quick=quick, progress=progress)
        except RooftuneError:
            raise
        except Exception as e:  # a CUDA error, the device lost: one line, nothing stored
            raise MeasurementError(f"measuring {device.describe()} failed: {one_line(e)}") from e

    try:
        # a stored result is this card's (its uuid is in the id); it is reported with the device as
        # this process sees it (its index and clocks now)
        result: GpuCeilings = stored_or_measured(
            store, device, threads=(), quick=quick, refresh=refresh,
            load=lambda data: replace(GpuCeilings.from_dict(data, from_store=True), platform=device),
            complete=complete, measure=measured)
        return result
    finally:
        if own_store:
            store.close()

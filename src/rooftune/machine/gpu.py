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

Ceilings are upper bounds, so each rate comes from its fastest sample, as on the CPU.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rooftune.bench import Measurement, Policy, measure
from rooftune.errors import InvalidArgument, MeasurementError, RooftuneError, one_line
from rooftune.machine.ceilings import Roofline
from rooftune.machine.plateaus import Plateau, detect_plateaus, level_warnings, name_plateaus, sweep_sizes
from rooftune.platform.gpu import GpuDevice

GPU_PRECISIONS = ("fp32", "fp64", "tf32", "fp16", "bf16", "int8", "fp8")
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
#: One launch of a sweep kernel moves at least this many bytes (passes over a small working set),
#: so the launch itself (a few microseconds) is hidden behind the kernel before it.
BYTES_PER_LAUNCH = 512 * 1024**2
#: The sweep goes to this many times L2, and at least :data:`MIN_SWEEP_BYTES`.
L2_FACTOR = 16
MIN_SWEEP_BYTES = 1024**3
SWEEP_START_BYTES = 1024**2
#: The sweep's arrays (1 + 1/2 + 1/3 of the largest working set: read's one array, copy's second,
#: triad's third) take at most this share of the device's memory.
SWEEP_MEMORY_SHARE = 0.25
SWEEP_ARRAYS_FACTOR = 1 + 1 / 2 + 1 / 3
#: Programs of the FMA kernel per multiprocessor tried (each 4 warps): the fastest is the peak.
FMA_PROGRAMS_PER_SM = (8, 16, 32)
#: One FMA launch runs about this long once calibrated.
FMA_LAUNCH_S = 0.002
#: Relative error of a roof's product against float64 on a 128x128 corner, per precision (inputs
#: of unit variance, so errors grow like sqrt(n) times the unit roundoff at most).
GEMM_TOLERANCE = {"fp32": 1e-4, "tf32": 5e-3, "fp16": 1e-2, "bf16": 5e-2, "int8": 0.0, "fp8": 0.15}
CHECK = 128


@dataclass(frozen=True)
class GpuEffort:
    """How hard the probes try: the full run or --quick."""

    quick: bool
    steps_per_octave: int
    sweep_kernels: tuple[str, ...]
    peak_policy: Policy
    sweep_policy: Policy
    gemm_policy: Policy
    gemm_size: int
    #: Measure the peaks and matrix roofs once more at the end (clocks and other tenants change over seconds).
    late_looks: bool


FULL = GpuEffort(
    quick=False,
    steps_per_octave=4,
    sweep_kernels=("read", "copy", "triad"),
    peak_policy=Policy(min_sample_time_s=0.01, warmup_s=0.05, budget_s=0.5, min_samples=8),
    sweep_policy=Policy(min_sample_time_s=0.005, warmup_s=0.01, budget_s=0.15),
    gemm_policy=Policy(min_sample_time_s=0.02, warmup_s=0.1, budget_s=0.8, min_samples=8),
    gemm_size=8192,
    late_looks=True,
)
QUICK = GpuEffort(
    quick=True,
    steps_per_octave=2,
    sweep_kernels=("read", "copy", "triad"),
    peak_policy=Policy(min_sample_time_s=0.005, warmup_s=0.02, budget_s=0.15),
    sweep_policy=Policy(min_sample_time_s=0.003, warmup_s=0.005, budget_s=0.05),
    gemm_policy=Policy(min_sample_time_s=0.01, warmup_s=0.05, budget_s=0.25),
    gemm_size=4096,
    late_looks=False,
)


def validate_gpu_precisions(precisions: Sequence[str] | None) -> tuple[str, ...]:
    if not precisions:
        return GPU_PRECISIONS
    for p in precisions:
        if p not in GPU_PRECISIONS:
            raise InvalidArgument("precision", p, f"allowed on a CUDA device: {', '.join(GPU_PRECISIONS)}")
    return tuple(p for p in GPU_PRECISIONS if p in precisions)


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


# ---------------------------------------------------------------------------------------- probes


def fma_peak(precision: str, device: GpuDevice, effort: GpuEffort,
             clock: Callable[[], float]) -> tuple[float, list[Measurement]]:
    """FLOP/s of the vector units in ``precision`` (fp32 or fp64): the fastest sample of the fastest
    grid of :data:`FMA_PROGRAMS_PER_SM`; with the Measurements of every grid tried."""
    import torch
    import triton.language as tl

    from rooftune.machine.gpu_kernels import FMA_BLOCK, FMA_CHAINS, fma_kernel

    dtype, tl_dtype = {"fp32": (torch.float32, tl.float32), "fp64": (torch.float64, tl.float64)}[precision]
    out = torch.empty(device.multiprocessors * max(FMA_PROGRAMS_PER_SM) * FMA_BLOCK, dtype=dtype,
                      device=f"cuda:{device.index}")
    best, measurements = 0.0, []
    for per_sm in FMA_PROGRAMS_PER_SM:
        programs = device.multiprocessors * per_sm
        iters = 256

        def launch(programs: int = programs) -> None:  # iters as the loop below has calibrated it so far
            fma_kernel[(programs,)](out, 0.999999, 1e-6, iters, BLOCK=FMA_BLOCK, DTYPE=tl_dtype, num_warps=4)  # noqa: B023

        launch()  # compiles once
        for _ in range(8):  # one launch of about FMA_LAUNCH_S
            t0 = clock()
            launch()
            t = clock() - t0
            if t >= 0.5 * FMA_LAUNCH_S:
                break
            iters = min(1 << 24, int(iters * max(2.0, FMA_LAUNCH_S / max(t, 1e-7))))
        flops = 2.0 * FMA_CHAINS * FMA_BLOCK * iters * programs
        m = measure(launch, label=f"gpu.fma.{precision}", policy=effort.peak_policy, clock=clock,
                    params={"programs": programs, "iters": iters, "chains": FMA_CHAINS, "block": FMA_BLOCK,
                            "flops_per_call": flops}, platform_id=device.id)
        if not bool(torch.isfinite(out[: programs * FMA_BLOCK]).all()):
            raise RuntimeError(f"the {precision} FMA kernel wrote non-finite values")
        measurements.append(m)
        best = max(best, flops / m.min)
    return best, measurements


def _gemm_operands(precision: str, n: int, dev: str) -> tuple[Callable[[], Any], Any, Any]:
    """(call, a, b): the product of two random n x n operands in ``precision``."""
    import torch

    g = torch.Generator(device=dev).manual_seed(0)
    if precision == "int8":
        a = torch.randint(-128, 128, (n, n), dtype=torch.int8, device=dev, generator=g)
        b = torch.randint(-128, 128, (n, n), dtype=torch.int8, device=dev, generator=g)
        return (lambda: torch._int_mm(a, b)), a, b
    if precision == "fp8":
        if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
            raise RuntimeError(f"this torch ({torch.__version__}) has no fp8 matrix product")
        a = torch.randn(n, n, device=dev, generator=g).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=dev, generator=g).to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt asks
        one = torch.ones((), device=dev)
        return (lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)), a, b
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    a = torch.randn(n, n, device=dev, generator=g).to(dtype)
    b = torch.randn(n, n, device=dev, generator=g).to(dtype)
    c = torch.empty(n, n, device=dev, dtype=dtype)
    return (lambda: torch.matmul(a, b, out=c)), a, b


def gemm_error(precision: str, result: Any, a: Any, b: Any) -> float:
    """Relative error (Frobenius) of the top-left CHECK x CHECK block of ``result`` against float64."""
    k = CHECK
    ref = a[:k].double() @ b[:, :k].double()
    got = result[:k, :k].double()
    return float((got - ref).norm() / ref.norm().clamp_min(1e-30))


def gemm_roof(precision: str, device: GpuDevice, effort: GpuEffort, clock: Callable[[], float]) -> tuple[float, Measurement, float]:
    """Ops/s of the library's matrix product in ``precision`` at ``effort.gemm_size``, from the
    fastest sample; with the product's relative error against float64. RuntimeError when the
    product is wrong (beyond :data:`GEMM_TOLERANCE`). torch's float32 matmul precision is set for
    the product (tf32 allowed only for ``tf32``) and restored."""
    import torch

    n = effort.gemm_size
    dev = f"cuda:{device.index}"
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")  # tf32 on / off
    try:
        call, a, b = _gemm_operands(precision, n, dev)
        error = gemm_error(precision, call(), a, b)
        if not math.isfinite(error) or error > GEMM_TOLERANCE[precision]:
            raise RuntimeError(f"the {precision} product is wrong: relative error {error:.2g} against float64 "
                               f"(allowed {GEMM_TOLERANCE[precision]:g})")
        m = measure(call, label=f"gpu.gemm.{precision}", policy=effort.gemm_policy, clock=clock,
                    params={"n": n, "ops_per_call": 2.0 * n**3, "relative_error": error}, platform_id=device.id)
    finally:
        torch.set_float32_matmul_precision(before)
    return 2.0 * n**3 / m.min, m, error


@dataclass(frozen=True)
class StreamPoint:
    bytes: int  # the working set: every array the kernel touches
    bandwidth: float  # bytes/s
    measurement: Measurement


@dataclass(frozen=True)
class StreamConfig:
    """How a sweep kernel is launched: values per tile, warps per program, and either one tile per
    program (``per_sm`` None: the hardware schedules them, as torch's elementwise kernels run) or a
    persistent grid of ``per_sm`` programs per multiprocessor walking the tiles."""

    block: int
    warps: int
    per_sm: int | None = None

    @property
    def name(self) -> str:
        return f"{'tile' if self.per_sm is None else f'{self.per_sm}/SM'} x{self.block} w{self.warps}"


#: The launches tried for each kernel; the fastest (by the geometric mean of its bandwidth in L2
#: and in device memory) runs the sweep: a ceiling is what the best launch reaches.
STREAM_CONFIGS = (StreamConfig(4096, 8), StreamConfig(2048, 4), StreamConfig(8192, 8), StreamConfig(1024, 4),
                  StreamConfig(4096, 8, 4), StreamConfig(4096, 8, 16))


def stream_plan(kind: str, size: int, multiprocessors: int, config: StreamConfig = STREAM_CONFIGS[0]) -> dict[str, int]:
    """The launch of one sweep point: elements per array, tiles, passes, programs."""
    from rooftune.machine.gpu_kernels import STREAM_ARRAYS

    arrays = STREAM_ARRAYS[kind]
    block = config.block
    n = max(block, size // 4 // arrays // block * block)
    tiles = n // block
    reps = max(1, math.ceil(BYTES_PER_LAUNCH / (n * 4 * arrays)))
    virtual = tiles * reps
    programs = virtual if config.per_sm is None else min(virtual, multiprocessors * config.per_sm)
    return {"n": n, "tiles": tiles, "reps": reps, "virtual": virtual, "programs": programs,
            "per_program": math.ceil(virtual / programs), "bytes": n * 4 * arrays, "block": block}


def stream_check(kind: str, x: Any, y: Any, z: Any, out: Any, plan: dict[str, int]) -> None:
    """RuntimeError unless the kernel computed what it is said to (after one launch)."""
    import torch

    n = plan["n"]
    if kind == "copy":
        ok = bool(torch.equal(y[:n], x[:n]))
    elif kind == "triad":
        ok = bool(torch.allclose(x[:n], y[:n] + 0.5 * z[:n], rtol=1e-6, atol=1e-6))
    else:
        want = float(x[:n].double().sum()) * plan["reps"]
        ok = math.isclose(float(out[: plan["programs"]].double().sum()), want, rel_tol=1e-3)
    if not ok:
        raise RuntimeError(f"the {kind} kernel computed a wrong result at {plan['bytes']} bytes")


def probe_sizes(sizes: Sequence[int], l2_bytes: int) -> list[int]:
    """The working sets a launch configuration is chosen on: half of L2 (where the sweep has it)
    and the sweep's largest (device memory)."""
    inside = [s for s in sizes if s <= l2_bytes // 2]
    return [*inside[-1:], max(sizes)]


def bandwidth_sweep(device: GpuDevice, sizes: Sequence[int], effort: GpuEffort, clock: Callable[[], float],
                    progress: Callable[[str, int, int], None] | None = None,
                    configs: Sequence[StreamConfig] = STREAM_CONFIGS) -> tuple[dict[str, list[StreamPoint]], dict[str, Any]]:
    """Bandwidth of each stream kernel at each working set (bytes of all its arrays), launched as the
    fastest of ``configs``; with what each configuration reached at :func:`probe_sizes`."""
    import torch

    from rooftune.machine.gpu_kernels import KIND_CODES, stream_kernel

    dev = f"cuda:{device.index}"

    def most(kinds: tuple[str, ...]) -> int:  # the elements an array needs: the kernels that use it
        used = [k for k in effort.sweep_kernels if k in kinds]
        return max((stream_plan(k, max(sizes), device.multiprocessors, c)["n"] for k in used for c in configs),
                   default=1)

    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.rand(most(("read", "copy", "triad")), device=dev, generator=g)  # read, copy's source, triad's result
    y = torch.rand(most(("copy", "triad")), device=dev, generator=g)
    z = torch.rand(most(("triad",)), device=dev, generator=g)
    out = torch.zeros(1, device=dev)
    result: dict[str, list[StreamPoint]] = {}
    tried: dict[str, Any] = {}
    probes = probe_sizes(sizes, device.l2_bytes)
    total = (len(sizes) + len(probes) * len(configs)) * len(effort.sweep_kernels)
    done = 0

    def point(kind: str, size: int, config: StreamConfig, check: bool) -> StreamPoint:
        nonlocal out, done
        plan = stream_plan(kind, size, device.multiprocessors, config)
        if out.numel() < plan["programs"]:
            out = torch.zeros(plan["programs"], device=dev)
        sums = out

        def launch(plan: dict[str, int] = plan, code: int = KIND_CODES[kind]) -> None:
            stream_kernel[(plan["programs"],)](x, y, z, sums, plan["tiles"], plan["virtual"],
                                               plan["per_program"], 0.5, KIND=code, BLOCK=config.block,
                                               num_warps=config.warps)

        launch()
        if check:
            stream_check(kind, x, y, z, sums, plan)
        m = measure(launch, label=f"gpu.stream.{kind}", policy=effort.sweep_policy, clock=clock,
                    params={**plan, "config": config.name, "bytes_per_call": plan["bytes"] * plan["reps"]},
                    platform_id=device.id)
        done += 1
        if progress:
            progress("bandwidth sweep", done, total)
        return StreamPoint(plan["bytes"], plan["bytes"] * plan["reps"] / m.min, m)

    for kind in effort.sweep_kernels:
        rates = {c: [point(kind, s, c, check=True).bandwidth for s in probes] for c in configs}
        best = max(configs, key=lambda c: math.prod(rates[c]))
        tried[kind] = {"probe_bytes": probes, "chosen": best.name,
                       "bandwidth": {c.name: r for c, r in rates.items()}}
        result[kind] = [point(kind, s, best, check=i in (0, len(sizes) - 1)) for i, s in enumerate(sizes)]
    return result, tried


def dispatch_overhead(device: GpuDevice, effort: GpuEffort, clock: Callable[[], float]) -> tuple[float, float, list[Measurement]]:
    """(seconds per tiny op in a stream of them, seconds of one tiny op waited for, Measurements)."""
    import torch

    dev = f"cuda:{device.index}"
    a = torch.ones(1, device=dev)
    b = torch.ones(1, device=dev)
    policy = replace(effort.peak_policy, number=None, min_sample_time_s=0.005)
    stream = measure(lambda: torch.add(a, b), label="gpu.dispatch.add", params={"numel": 1}, policy=policy,
                     clock=clock, platform_id=device.id)

    def waited() -> None:
        torch.add(a, b)
        torch.cuda.synchronize(device.index)

    latency = measure(waited, label="gpu.dispatch.add_synchronized", params={"numel": 1}, policy=policy,
                      platform_id=device.id)
    return stream.min, latency.min, [stream, latency]


# ------------------------------------------------------------------------------------ the run


def name_levels(sweep: dict[str, list[tuple[int, float]]], capacities: dict[str, int],
                steps_per_octave: int) -> tuple[dict[str, dict[str, float]], dict[str, list[Plateau]], list[str]]:
    """Plateaus of each kernel's sweep named L2 / DRAM: (bandwidth by kernel and level, plateaus,
    warnings for a level found by no distinct plateau)."""
    by_kernel: dict[str, dict[str, float]] = {}
    plateaus: dict[str, list[Plateau]] = {}
    warnings: list[str] = []
    for kind, points in sweep.items():
        xs = [b for b, _ in points]
        ys = [r for _, r in points]
        found = detect_plateaus(xs, ys, min_points=max(2, steps_per_octave))
        named = name_plateaus(found, capacities, xs, ys)
        plateaus[kind] = list(named.values())
        by_kernel[kind] = {lvl: p.bandwidth for lvl, p in named.items()}
        warnings += level_warnings(kind, named)
    return by_kernel, plateaus, warnings


def measure_gpu_ceilings(device: GpuDevice, *, precisions: tuple[str, ...] = GPU_PRECISIONS, quick: bool = False,
                         progress: Any = None) -> tuple[GpuCeilings, list[Measurement]]:
    """Run every probe on ``device`` (its CUDA device current meanwhile: Triton launches there);
    returns the GpuCeilings and the Measurements behind them. A roof or the sweep that fails is
    skipped with its reason; the dispatch overhead failing is a MeasurementError."""
    with on_device(device.index):
        return _measure(device, precisions, quick, progress)


@contextlib.contextmanager
def on_device(index: int) -> Iterator[None]:
    """CUDA device ``index`` current inside, the caller's current device back after."""
    import torch

    with torch.cuda.device(index):
        yield


def _measure(device: GpuDevice, precisions: tuple[str, ...], quick: bool, progress: Any) -> tuple[GpuCeilings, list[Measurement]]:
    effort = QUICK if quick else FULL
    clock = cuda_clock(device.index)
    started = time.time()
    t0 = time.perf_counter()
    measurements: list[Measurement] = []
    peak: dict[str, float] = {}
    skipped: dict[str, str] = {}
    details: dict[str, Any] = {"gemm_size": effort.gemm_size, "gemm_relative_error": {}}
    warnings: list[str] = []
    phases: dict[str, float] = {}
    wanted = [r for p in precisions for r in PRECISION_ROOFS[p]]
    no_triton = triton_missing()

    def step(name: str, done: int = 0, total: int = 1) -> None:
        if progress:
            progress(name, done, total)

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        step(name)
        s = time.perf_counter()
        try:
            return fn()
        finally:
            phases[name] = phases.get(name, 0.0) + time.perf_counter() - s

    def peaks(again: bool) -> None:
        for roof in wanted:
            if roof in skipped:
                continue
            label = f"FMA peak {roof}" if roof in ("fp32", "fp64") else f"matrix roof {roof[5:]}"
            try:
                if roof in ("fp32", "fp64"):
                    if no_triton:
                        skipped[roof] = no_triton
                        continue
                    rate, ms = timed(label + (" again" if again else ""),
                                     functools.partial(fma_peak, roof, device, effort, clock))
                else:
                    precision = roof[5:]
                    if precision == "fp8" and device.capability < (8, 9):
                        skipped[roof] = f"no fp8 matrix units before compute capability 8.9 (this device: {device.arch})"
                        continue
                    rate, m, error = timed(label + (" again" if again else ""),
                                           functools.partial(gemm_roof, precision, device, effort, clock))
                    details["gemm_relative_error"][precision] = error
                    ms = [m]
            except Exception as e:  # one roof that cannot run is skipped with its reason; the rest go on
                if not again:
                    skipped[roof] = one_line(e)
                else:
                    warnings.append(f"{roof}: the second look failed ({one_line(e)}); the first is kept")
                continue
            measurements.extend(ms)
            peak[roof] = max(peak.get(roof, 0.0), rate)

    peaks(again=False)

    capacities = {"L2": device.l2_bytes} if device.l2_bytes else {}
    max_bytes = max(L2_FACTOR * device.l2_bytes, MIN_SWEEP_BYTES)
    if max_bytes * SWEEP_ARRAYS_FACTOR > SWEEP_MEMORY_SHARE * device.memory_bytes:
        max_bytes = int(SWEEP_MEMORY_SHARE * device.memory_bytes / SWEEP_ARRAYS_FACTOR)
        warnings.append(f"the bandwidth sweep stops at {max_bytes / 1024**2:.0f} MiB: its arrays take a quarter "
                        "of the device's memory")
    # the geometric steps can end past max_bytes (a cap is no power of two): those are left out
    sizes = [b for b in sweep_sizes(max_bytes, effort.steps_per_octave, min_bytes=SWEEP_START_BYTES) if b <= max_bytes]
    sweep: dict[str, list[tuple[int, float]]] = {}
    bandwidth_by_kernel: dict[str, dict[str, float]] = {}
    plateaus: dict[str, list[Plateau]] = {}
    if no_triton:
        skipped["bandwidth"] = no_triton
    else:
        s = time.perf_counter()
        try:
            points, details["stream_configs"] = bandwidth_sweep(device, sizes, effort, clock, progress=step)
        except Exception as e:  # a kernel that does not compile, runs out of memory or computes wrong
            skipped["bandwidth"] = one_line(e)
            points = {}
        phases["bandwidth sweep"] = time.perf_counter() - s
        for kind, pts in points.items():
            measurements += [p.measurement for p in pts]
            sweep[kind] = [(p.bytes, p.bandwidth) for p in pts]
        bandwidth_by_kernel, plateaus, more = name_levels(sweep, capacities, effort.steps_per_octave)
        warnings += more
    bandwidth = {lvl: max(bw[lvl] for bw in bandwidth_by_kernel.values() if lvl in bw)
                 for lvl in ("L2", "DRAM") if any(lvl in bw for bw in bandwidth_by_kernel.values())}
    if sweep:
        for lvl in ("L2", "DRAM"):
            if lvl not in bandwidth:
                warnings.append(f"no {lvl} bandwidth: the sweep has no point inside that level")

    if effort.late_looks:
        peaks(again=True)
    try:
        overhead, latency, ms = timed("dispatch overhead", lambda: dispatch_overhead(device, effort, clock))
    except Exception as e:  # the one figure every device has: without it there is no result
        raise MeasurementError(f"the dispatch overhead of {device.describe()} could not be measured: "
                               f"{one_line(e)}") from e
    measurements += ms
    details["step_s"] = {name: round(v, 3) for name, v in phases.items()}
    noisy = sum(1 for m in measurements if m.warnings)
    if noisy:
        warnings.append(f"{noisy} of {len(measurements)} measurements were noisy or unstable (kept in the store); "
                        "if the ceilings look low, re-run with --refresh when the device is idle")
    ceilings = GpuCeilings(
        platform=device,
        peak_flops=peak,
        bandwidth=bandwidth,
        bandwidth_by_kernel=bandwidth_by_kernel,
        plateaus=plateaus,
        sweep=sweep,
        capacity_bytes=capacities,
        dispatch_overhead_s=overhead,
        launch_latency_s=latency,
        quick=quick,
        measured_at=started,
        duration_s=time.perf_counter() - t0,
        skipped=skipped,
        details=details,
        warnings=tuple(warnings),
    )
    return ceilings, measurements


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
    from rooftune.machine.ceilings import stored_or_measured
    from rooftune.platform.gpu import current_gpu
    from rooftune.store import Store

    prec = validate_gpu_precisions(precisions)
    device = device or current_gpu(index)
    own_store = store is None
    store = store if store is not None else Store(db)

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

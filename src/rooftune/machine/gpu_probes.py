"""The probes behind a CUDA device's roofline (:mod:`rooftune.machine.gpu` runs them): the vector
FMA peaks (a Triton microkernel, :mod:`rooftune.machine.gpu_kernels`), the matrix roofs of the
library torch calls, the stream kernels of the bandwidth sweep, and the dispatch overhead.

Each times through the one harness with ``clock``, a clock that synchronizes the device before it
reads the host's; each rate comes from the fastest sample, as on the CPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rooftune.bench import Measurement, Policy, measure
from rooftune.machine.roofline import RooflineEffort
from rooftune.platform.gpu import GpuDevice

#: One launch of a sweep kernel moves at least this many bytes (passes over a small working set),
#: so the launch itself (a few microseconds) is hidden behind the kernel before it.
BYTES_PER_LAUNCH = 512 * 1024**2
#: Programs of the FMA kernel per multiprocessor tried (each 4 warps): the fastest is the peak.
FMA_PROGRAMS_PER_SM = (8, 16, 32)
#: One FMA launch runs about this long once calibrated.
FMA_LAUNCH_S = 0.002
#: Relative error of a roof's product against float64 on a 128x128 corner, per precision (inputs
#: of unit variance, so errors grow like sqrt(n) times the unit roundoff at most).
GEMM_TOLERANCE = {"fp32": 1e-4, "tf32": 5e-3, "fp16": 1e-2, "bf16": 5e-2, "int8": 0.0, "fp8": 0.15}
CHECK = 128

#: How hard a device's probes try: the fields every device's effort has are all its probes use.
GpuEffort = RooflineEffort

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

        # launch reads the iterations this grid's calibration below has reached so far
        def launch(programs: int = programs) -> None:
            fma_kernel[(programs,)](out, 0.999999, 1e-6, iters,  # noqa: B023
                                    BLOCK=FMA_BLOCK, DTYPE=tl_dtype, num_warps=4)

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
        # column-major, as cuBLASLt asks
        b = torch.randn(n, n, device=dev, generator=g).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=dev)
        return (lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)), a, b
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
             "bf16": torch.bfloat16}[precision]
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


def gemm_roof(precision: str, device: GpuDevice, effort: GpuEffort,
              clock: Callable[[], float]) -> tuple[float, Measurement, float]:
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
            raise RuntimeError(f"the {precision} product is wrong: relative error {error:.2g} against "
                               f"float64 (allowed {GEMM_TOLERANCE[precision]:g})")
        m = measure(call, label=f"gpu.gemm.{precision}", policy=effort.gemm_policy, clock=clock,
                    params={"n": n, "ops_per_call": 2.0 * n**3, "relative_error": error},
                    platform_id=device.id)
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


def stream_plan(kind: str, size: int, multiprocessors: int,
                config: StreamConfig = STREAM_CONFIGS[0]) -> dict[str, int]:
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
                    configs: Sequence[StreamConfig] = STREAM_CONFIGS,
                    ) -> tuple[dict[str, list[StreamPoint]], dict[str, Any]]:
    """Bandwidth of each stream kernel at each working set (bytes of all its arrays), launched as the
    fastest of ``configs``; with what each configuration reached at :func:`probe_sizes`."""
    import torch

    from rooftune.machine.gpu_kernels import KIND_CODES, stream_kernel

    dev = f"cuda:{device.index}"

    def most(kinds: tuple[str, ...]) -> int:  # the elements an array needs: the kernels that use it
        used = [k for k in effort.sweep_kernels if k in kinds]
        return max((stream_plan(k, max(sizes), device.multiprocessors, c)["n"]
                    for k in used for c in configs), default=1)

    g = torch.Generator(device=dev).manual_seed(0)
    # x: read's array, copy's source, triad's result
    x = torch.rand(most(("read", "copy", "triad")), device=dev, generator=g)
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


def dispatch_overhead(device: GpuDevice, effort: GpuEffort,
                      clock: Callable[[], float]) -> tuple[float, float, list[Measurement]]:
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

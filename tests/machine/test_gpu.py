"""The roofline of a CUDA device: the device's fingerprint, the sweep's plan and naming, the store,
the command line, and the Triton microkernels run by Triton's interpreter on the CPU. One test
measures a real device where torch sees one (skipped elsewhere)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rooftune.errors import InvalidArgument
from rooftune.machine import gpu, gpu_probes
from rooftune.machine.gpu import (
    GpuCeilings,
    get_gpu_ceilings,
    name_levels,
    sweep_sizes,
    validate_gpu_precisions,
)
from rooftune.machine.gpu_probes import BYTES_PER_LAUNCH, stream_plan
from rooftune.machine.plateaus import Plateau
from rooftune.platform import gpu as gpu_platform
from rooftune.platform.gpu import (
    GpuDevice,
    describe_cuda,
    is_device_fingerprint,
    nvidia_smi_clocks,
    parse_device,
    parse_smi_clocks,
)
from rooftune.store import Store
from tests.test_cli import assert_one_line_error, rooftune_in_process

try:
    import torch

    HAS_CUDA = torch.cuda.is_available() and torch.cuda.device_count() > 0
except ImportError:  # pragma: no cover
    HAS_CUDA = False

MiB = 1024**2

H200_PROPS = SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132,
                             total_memory=150_000_000_000, L2_cache_size=60 * MiB, uuid="GPU-1234")
HOST = SimpleNamespace(id="0123456789abcdef", cpu_model="Intel(R) Xeon(R) Platinum 8580")
VERSIONS = {"torch": "2.11.0+cu130", "cuda": "13.0", "triton": "3.6.0", "driver": "580.159.03"}


def h200(**changes: Any) -> GpuDevice:
    d = describe_cuda(0, H200_PROPS, HOST, VERSIONS, {"sm": 1980, "memory": 3201})
    return replace(d, **changes)


# ---------------------------------------------------------------------------- the device


@pytest.mark.parametrize("text,want", [("cpu", ("cpu", None)), ("cuda", ("cuda", 0)), ("cuda:3", ("cuda", 3)),
                                       (" CUDA:1 ", ("cuda", 1)), (None, ("cpu", None))])
def test_parse_device(text: str | None, want: tuple[str, int | None]) -> None:
    assert parse_device(text) == want


@pytest.mark.parametrize("text", ["tpu", "cuda:", "cuda:-1", "cpu:0", "cuda:x", "gpu"])
def test_parse_device_refuses_what_it_does_not_know(text: str) -> None:
    with pytest.raises(InvalidArgument, match="allowed cpu, cuda or cuda:N"):
        parse_device(text)


def test_device_fingerprint_and_id() -> None:
    d = h200()
    assert d.arch == "sm_90" and d.capability == (9, 0) and d.multiprocessors == 132
    assert d.l2_bytes == 60 * MiB and d.host_id == HOST.id and d.cpu_model == "NVIDIA H200"
    assert d.describe() == "NVIDIA H200 (sm_90, 132 multiprocessors)"
    assert len(d.id) == 16 and d.id == h200().id
    # what changes the ceilings changes the id; the clocks and uuid do not
    assert h200(l2_bytes=50 * MiB).id != d.id
    assert h200(host_id="fedcba9876543210").id != d.id
    assert h200(library_versions={**VERSIONS, "torch": "2.12.0"}).id != d.id
    assert h200(uuid="another card").id != d.id  # cuda:1 never gets cuda:0's stored ceilings
    assert h200(max_clocks_mhz={}, index=1).id == d.id  # the same card under another index
    back = GpuDevice.from_dict(json.loads(json.dumps(d.to_dict())))
    assert back == d and back.id == d.id
    assert is_device_fingerprint(d.to_dict()) and not is_device_fingerprint({"arch": "x86_64"})


def test_nvidia_smi_names_the_card_by_uuid() -> None:
    assert gpu_platform.smi_id("3a2b1246-eace-0619", 3) == "GPU-3a2b1246-eace-0619"
    assert gpu_platform.smi_id("GPU-3a2b", 3) == "GPU-3a2b" and gpu_platform.smi_id("", 3) == "3"
    seen: list[list[str]] = []
    ok = SimpleNamespace(returncode=0, stdout="1980, 3201\n")
    nvidia_smi_clocks("GPU-3a2b", run=lambda cmd, **k: seen.append(cmd) or ok)
    assert "--id=GPU-3a2b" in seen[0]


def test_smi_clocks() -> None:
    assert parse_smi_clocks("1980, 3201\n") == {"sm": 1980, "memory": 3201}
    assert parse_smi_clocks("[N/A], 3201") == {} and parse_smi_clocks("") == {}
    ok = SimpleNamespace(returncode=0, stdout="1755, 2619\n")
    assert nvidia_smi_clocks("0", run=lambda *a, **k: ok) == {"sm": 1755, "memory": 2619}
    assert nvidia_smi_clocks("0", run=lambda *a, **k: SimpleNamespace(returncode=9, stdout="")) == {}

    def missing(*a: Any, **k: Any) -> Any:
        raise FileNotFoundError("nvidia-smi")

    assert nvidia_smi_clocks("0", run=missing) == {}


def test_an_nvidia_smi_that_never_answers_leaves_the_clocks_and_driver_unsaid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hung driver: nvidia-smi waits for ever; its group is killed on the time limit and the
    description goes on without what it would have said."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nsleep 300\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(gpu_platform, "SMI_TIMEOUT_S", 0.5)
    assert nvidia_smi_clocks("0") == {}
    assert gpu_platform._driver_version("0") is None


@pytest.mark.skipif(HAS_CUDA, reason="torch sees a CUDA device here")
def test_no_cuda_device_is_a_one_line_error(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    proc = rooftune_in_process("machine", "--device", "cuda", "--quick", db=db)
    assert_one_line_error(proc, "--device 'cuda'", "allowed: cpu")
    assert not db.exists()


@pytest.mark.parametrize("args,fragments", [
    (["--device", "tpu"], ["--device 'tpu'", "allowed cpu, cuda or cuda:N"]),
    (["--device", "cuda", "--threads", "2"], ["--threads '2'", "--device cpu only"]),
    (["--device", "cuda", "--precision", "int4"], ["precision 'int4'", "fp32, fp64, tf32, fp16, bf16, int8, fp8"]),
])
def test_bad_device_input_writes_nothing(tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    db = tmp_path / "r.db"
    proc = rooftune_in_process("machine", *args, db=db)
    assert_one_line_error(proc, *fragments)
    assert not db.exists()


def test_precisions() -> None:
    assert validate_gpu_precisions(None) == gpu.GPU_PRECISIONS
    assert validate_gpu_precisions(["bf16", "fp32"]) == ("fp32", "bf16")
    with pytest.raises(InvalidArgument, match="precision 'fp4'"):
        validate_gpu_precisions(["fp4"])


# ---------------------------------------------------------------------------- the sweep


def test_sweep_sizes_are_geometric_from_one_mib() -> None:
    sizes = sweep_sizes(1024 * MiB, 4, min_bytes=gpu.SWEEP_START_BYTES)
    assert sizes[0] == MiB and sizes[-1] == 1024 * MiB and len(sizes) == 41
    ratios = [b / a for a, b in zip(sizes, sizes[1:], strict=False)]
    assert all(abs(r - 2 ** 0.25) < 1e-3 for r in ratios)


@pytest.mark.parametrize("config", gpu_probes.STREAM_CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("kind,arrays", [("read", 1), ("copy", 2), ("triad", 3)])
@pytest.mark.parametrize("size", [MiB, 3 * MiB + 12345, 60 * MiB, 1024 * MiB])
def test_stream_plan_covers_every_tile_and_hides_the_launch(kind: str, arrays: int, size: int,
                                                             config: gpu_probes.StreamConfig) -> None:
    p = stream_plan(kind, size, 132, config)
    block = config.block
    assert p["n"] % block == 0 and p["tiles"] * block == p["n"] and p["block"] == block
    assert p["bytes"] == p["n"] * 4 * arrays <= max(size, block * 4 * arrays)
    assert p["bytes"] > 0.99 * size - block * 4 * arrays
    assert p["bytes"] * p["reps"] >= BYTES_PER_LAUNCH  # a launch moves enough to hide itself
    assert p["programs"] * p["per_program"] >= p["virtual"] == p["tiles"] * p["reps"]
    if config.per_sm is None:
        assert p["programs"] == p["virtual"] and p["per_program"] == 1
    else:
        assert p["programs"] <= 132 * config.per_sm


def test_configurations_are_probed_in_l2_and_in_memory() -> None:
    sizes = sweep_sizes(1024 * MiB, 4, min_bytes=MiB)
    assert gpu_probes.probe_sizes(sizes, 60 * MiB) == [max(s for s in sizes if s <= 30 * MiB), 1024 * MiB]
    assert gpu_probes.probe_sizes(sizes, 0) == [1024 * MiB]


def test_levels_named_l2_and_dram() -> None:
    sizes = sweep_sizes(1024 * MiB, 4, min_bytes=MiB)

    def rate(s: int) -> float:  # an L2 of 60 MiB at 10 TB/s, then memory at 4 TB/s
        return 10e12 if s <= 40 * MiB else (6e12 if s <= 120 * MiB else 4e12)

    sweep = {"read": [(s, rate(s)) for s in sizes], "copy": [(s, 0.9 * rate(s)) for s in sizes]}
    by_kernel, plateaus, warnings = name_levels(sweep, {"L2": 60 * MiB}, 4)
    assert by_kernel["read"] == {"L2": 10e12, "DRAM": 4e12}
    assert by_kernel["copy"]["L2"] == pytest.approx(9e12) and by_kernel["copy"]["DRAM"] == pytest.approx(3.6e12)
    assert {p.level for p in plateaus["read"]} == {"L2", "DRAM"} and warnings == []


# ---------------------------------------------------------------------------- stored results


def fake_ceilings(device: GpuDevice, quick: bool = False) -> GpuCeilings:
    sizes = sweep_sizes(1024 * MiB, 2, min_bytes=MiB)
    pts = [(s, 10e12 if s <= 40 * MiB else 4e12) for s in sizes]
    return GpuCeilings(
        platform=device, peak_flops={"fp32": 60e12, "fp64": 30e12, "gemm_fp32": 50e12, "gemm_bf16": 700e12},
        bandwidth={"L2": 10e12, "DRAM": 4e12}, bandwidth_by_kernel={"read": {"L2": 10e12, "DRAM": 4e12}},
        plateaus={"read": [Plateau(MiB, 32 * MiB, 10e12, 11, level="L2"), Plateau(256 * MiB, 1024 * MiB, 4e12, 5, level="DRAM")]},
        sweep={"read": pts}, capacity_bytes={"L2": 60 * MiB}, dispatch_overhead_s=4e-6, launch_latency_s=9e-6,
        quick=quick, measured_at=1.7e9, duration_s=30.0, skipped={"gemm_fp8": "no fp8 here", "gemm_tf32": "x",
                                                                  "gemm_fp16": "x", "gemm_int8": "x"},
        details={"gemm_size": 8192, "gemm_relative_error": {"fp32": 1e-6, "bf16": 3e-3}},
        warnings=("one warning",))


def test_ceilings_round_trip() -> None:
    c = fake_ceilings(h200())
    d = json.loads(json.dumps(c.to_dict()))
    assert d["device"] == "cuda" and d["platform"]["id"] == c.platform.id and d["peak_flops"]["skipped"]
    assert GpuCeilings.from_dict(d) == c


def test_measured_once_then_from_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []

    def measured(device: GpuDevice, *, precisions: Any, quick: bool, progress: Any) -> Any:
        calls.append(quick)
        return fake_ceilings(device, quick), []

    monkeypatch.setattr(gpu, "measure_gpu_ceilings", measured)
    db = tmp_path / "g.db"
    d = h200()
    first = get_gpu_ceilings(device=d, db=str(db))
    assert not first.from_store and calls == [False]
    again = get_gpu_ceilings(device=d, db=str(db))
    assert again.from_store and calls == [False] and again.peak_flops == first.peak_flops
    get_gpu_ceilings(device=d, db=str(db), refresh=True)
    assert calls == [False, False]
    # the same card seen as cuda:1 now: the stored result, reported with the device as seen now
    moved = get_gpu_ceilings(device=h200(index=1, max_clocks_mhz={}), db=str(db))
    assert moved.from_store and moved.platform.index == 1 and moved.platform.max_clocks_mhz == {}
    # a quick request takes the full result; a full one does not take a quick result
    assert get_gpu_ceilings(device=d, db=str(db), quick=True).from_store and calls == [False, False]
    other = h200(uuid="another card")
    get_gpu_ceilings(device=other, db=str(db), quick=True)
    get_gpu_ceilings(device=other, db=str(db))
    assert calls == [False, False, True, False]
    # another host with the same card is another device: measured again
    get_gpu_ceilings(device=h200(host_id="fedcba9876543210"), db=str(db))
    assert calls == [False, False, True, False, False]
    with Store(str(db)) as store:
        assert store.platforms() == []  # devices are not CPU platforms
        assert {fp["kind"] for fp in store.fingerprints().values()} == {"cuda"}


def test_a_precision_the_stored_result_lacks_is_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []

    def measured(device: GpuDevice, *, precisions: Any, quick: bool, progress: Any) -> Any:
        calls.append(precisions)
        c = fake_ceilings(device, quick)
        return replace(c, skipped={}, peak_flops={"fp32": 60e12, "gemm_fp32": 50e12}), []

    monkeypatch.setattr(gpu, "measure_gpu_ceilings", measured)
    db = str(tmp_path / "g.db")
    get_gpu_ceilings(device=h200(), db=db, precisions=["fp32"])
    assert get_gpu_ceilings(device=h200(), db=db, precisions=["fp32"]).from_store
    assert not get_gpu_ceilings(device=h200(), db=db, precisions=["fp32", "bf16"]).from_store
    assert calls == [("fp32",), ("fp32", "bf16")]


def test_a_ceiling_far_below_the_earlier_runs_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rates = iter([4e12, 2e12])

    def measured(device: GpuDevice, *, precisions: Any, quick: bool, progress: Any) -> Any:
        c = fake_ceilings(device, quick)
        return replace(c, bandwidth={**c.bandwidth, "DRAM": next(rates)}, warnings=()), []

    monkeypatch.setattr(gpu, "measure_gpu_ceilings", measured)
    db = str(tmp_path / "g.db")
    assert get_gpu_ceilings(device=h200(), db=db).warnings == ()
    slow = get_gpu_ceilings(device=h200(), db=db, refresh=True)
    assert slow.details["below_earlier_runs"] == {"DRAM": 0.5} and "DRAM -50%" in slow.warnings[-1]


def test_a_failure_while_measuring_is_one_line_and_stores_nothing(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from rooftune.errors import MeasurementError

    def lost(*a: Any, **k: Any) -> Any:
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")

    monkeypatch.setattr(gpu, "measure_gpu_ceilings", lost)
    db = tmp_path / "g.db"
    with pytest.raises(MeasurementError, match="^measuring NVIDIA H200 .* failed: CUDA error: an illegal memory"):
        get_gpu_ceilings(device=h200(), db=str(db))
    with Store(str(db)) as store:
        assert store.count("ceilings") == 0 and store.count("platforms") == 0


# ---------------------------------------------------------------------------- the run, probes faked


class FakeProbes:
    """The four probes replaced, counting their calls; ``fail`` names the ones that raise."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: set[str] = frozenset(), triton: str | None = None):
        import contextlib
        import time as _time

        self.calls: list[str] = []
        self.fail = set(fail)
        self.looks: dict[str, int] = {}
        monkeypatch.setattr(gpu, "on_device", lambda index: contextlib.nullcontext())
        monkeypatch.setattr(gpu, "cuda_clock", lambda index: _time.perf_counter)
        monkeypatch.setattr(gpu, "triton_missing", lambda: triton)
        monkeypatch.setattr(gpu_probes, "fma_peak", self.fma)
        monkeypatch.setattr(gpu_probes, "gemm_roof", self.gemm)
        monkeypatch.setattr(gpu_probes, "bandwidth_sweep", self.sweep)
        monkeypatch.setattr(gpu_probes, "dispatch_overhead", self.dispatch)

    def _m(self, label: str) -> Any:
        from rooftune.bench import Measurement, Method, Policy

        return Measurement(label=label, samples=(1.0, 1.0), number=1, method=Method(policy=Policy()))

    def _look(self, name: str) -> int:
        self.calls.append(name)
        if name in self.fail or (name + " again" in self.fail and name in self.looks):
            raise RuntimeError(f"{name} failed\ndetail")
        self.looks[name] = self.looks.get(name, 0) + 1
        return self.looks[name]

    def fma(self, precision: str, device: Any, effort: Any, clock: Any) -> Any:
        look = self._look(precision)
        return {"fp32": 50e12, "fp64": 25e12}[precision] * (1.1 if look == 2 else 1.0), [self._m("fma")]

    def gemm(self, precision: str, device: Any, effort: Any, clock: Any) -> Any:
        look = self._look("gemm_" + precision)
        return 100e12 * (0.9 if look == 2 else 1.0), self._m("gemm"), 1e-3

    def sweep(self, device: Any, sizes: Any, effort: Any, clock: Any, progress: Any = None) -> Any:
        self._look("bandwidth")
        points = {k: [gpu_probes.StreamPoint(s, 10e12 if s <= 30 * MiB else 4e12, self._m(k)) for s in sizes]
                  for k in ("read", "copy", "triad")}
        return points, {"read": {"chosen": "tile x2048 w4"}}

    def dispatch(self, device: Any, effort: Any, clock: Any) -> Any:
        self._look("dispatch")
        return 5e-6, 9e-6, [self._m("dispatch")]


def test_a_full_run_keeps_each_roofs_better_look(monkeypatch: pytest.MonkeyPatch) -> None:
    probes = FakeProbes(monkeypatch)
    c, ms = gpu.measure_gpu_ceilings(h200(), quick=False)
    assert c.peak_flops["fp32"] == pytest.approx(55e12)  # the second look was faster
    assert c.peak_flops["gemm_bf16"] == 100e12  # the second look was slower
    assert probes.calls.count("fp32") == 2 and probes.calls.count("gemm_fp8") == 2
    assert c.bandwidth == {"L2": 10e12, "DRAM": 4e12} and c.dispatch_overhead_s == 5e-6
    assert c.launch_latency_s == 9e-6 and c.skipped == {} and c.details["stream_configs"]
    assert set(c.details["gemm_relative_error"]) == {"fp32", "tf32", "fp16", "bf16", "int8", "fp8"}
    assert len(ms) == 2 * 8 + 3 * len(c.sweep["read"]) + 1


def test_what_cannot_run_is_skipped_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    probes = FakeProbes(monkeypatch, fail={"gemm_int8", "bandwidth", "fp64 again"})
    c, _ = gpu.measure_gpu_ceilings(h200(capability=(8, 0)), quick=True, precisions=gpu.GPU_PRECISIONS)
    assert c.skipped["gemm_int8"] == "gemm_int8 failed"
    assert c.skipped["bandwidth"] == "bandwidth failed" and c.bandwidth == {} and c.sweep == {}
    assert "compute capability 8.9" in c.skipped["gemm_fp8"] and "gemm_fp8" not in probes.calls
    assert probes.calls.count("fp32") == 1  # a quick run takes no second look
    FakeProbes(monkeypatch, fail={"fp64 again"})
    c, _ = gpu.measure_gpu_ceilings(h200(), quick=False)
    assert c.peak_flops["fp64"] == 25e12 and any("fp64: the second look failed" in w for w in c.warnings)


def test_without_triton_the_microkernels_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    probes = FakeProbes(monkeypatch, triton="Triton is not installed")
    c, _ = gpu.measure_gpu_ceilings(h200(), quick=True, precisions=("fp32", "bf16"))
    assert c.skipped == {"fp32": "Triton is not installed", "bandwidth": "Triton is not installed"}
    assert set(c.peak_flops) == {"gemm_fp32", "gemm_bf16"} and "bandwidth" not in probes.calls


def test_no_dispatch_overhead_no_result(monkeypatch: pytest.MonkeyPatch) -> None:
    from rooftune.errors import MeasurementError

    FakeProbes(monkeypatch, fail={"dispatch"})
    with pytest.raises(MeasurementError, match="dispatch overhead of NVIDIA H200 .*: dispatch failed$"):
        gpu.measure_gpu_ceilings(h200(), quick=True)


def test_the_sweep_fits_in_a_quarter_of_a_small_device(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeProbes(monkeypatch)
    small = h200(memory_bytes=4 * 1024**3, l2_bytes=4 * MiB)
    c, _ = gpu.measure_gpu_ceilings(small, quick=True)
    largest = max(b for b, _ in c.sweep["read"])
    assert largest * gpu.SWEEP_ARRAYS_FACTOR <= 0.25 * small.memory_bytes * 1.0001
    assert any("a quarter of the device's memory" in w for w in c.warnings)


def test_gemm_roof_restores_the_matmul_precision(monkeypatch: pytest.MonkeyPatch) -> None:
    import time as _time

    import torch

    torch.manual_seed(0)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    seen: list[str] = []

    def operands(precision: str, n: int, dev: str) -> Any:
        seen.append(torch.get_float32_matmul_precision())
        return (lambda: a @ b), a, b

    monkeypatch.setattr(gpu_probes, "_gemm_operands", operands)
    effort = replace(gpu_probes.QUICK, gemm_size=256, gemm_policy=gpu_probes.Policy(min_sample_time_s=0.001, warmup_s=0,
                                                                       budget_s=0.05))
    torch.set_float32_matmul_precision("medium")
    try:
        rate, m, error = gpu_probes.gemm_roof("tf32", h200(), effort, _time.perf_counter)
        assert rate == pytest.approx(2 * 256**3 / m.min) and error < 1e-5 and seen == ["high"]
        assert torch.get_float32_matmul_precision() == "medium"
        monkeypatch.setattr(gpu_probes, "_gemm_operands", lambda p, n, d: ((lambda: a @ b + 1.0), a, b))
        with pytest.raises(RuntimeError, match="the fp32 product is wrong: relative error"):
            gpu_probes.gemm_roof("fp32", h200(), effort, _time.perf_counter)
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision("highest")


def test_cli_prints_and_draws_a_devices_roofline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rooftune.platform import gpu as platform_gpu

    monkeypatch.setattr(platform_gpu, "check_cuda", lambda index, text=None: None)
    monkeypatch.setattr(gpu, "get_gpu_ceilings", lambda index, **kw: fake_ceilings(h200()))
    roof, sweep = tmp_path / "roof.png", tmp_path / "sweep.svg"
    proc = rooftune_in_process("machine", "--device", "cuda", "--plot", str(roof), "--plot-sweep", str(sweep),
                               db=tmp_path / "r.db")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    for fragment in ("NVIDIA H200 (sm_90), 132 multiprocessors", "gemm_bf16", "700.0 TFLOP/s", "L2", "10.0 TB/s",
                     "DRAM", "4.0 TB/s", "4.00 us", "gemm_fp8", "skipped", "no fp8 here"):
        assert fragment in text, fragment
    assert "one warning" in proc.stderr
    assert roof.stat().st_size > 10_000 and sweep.stat().st_size > 10_000
    proc = rooftune_in_process("machine", "--device", "cuda", "--json", db=tmp_path / "r.db")
    d = json.loads(proc.stdout)
    assert d["peak_flops"]["gemm_bf16"] == 700e12 and d["bandwidth"]["DRAM"] == 4e12


# ---------------------------------------------------------------------------- the kernels


INTERPRETED = textwrap.dedent("""
    import math, torch, triton.language as tl
    import rooftune.machine.gpu_probes as g
    from rooftune.machine.gpu_kernels import FMA_BLOCK, FMA_CHAINS, KIND_CODES, fma_kernel, stream_kernel
    for dtype, tl_dtype in ((torch.float32, tl.float32), (torch.float64, tl.float64)):
        out = torch.full((3 * FMA_BLOCK,), float("nan"), dtype=dtype)
        fma_kernel[(3,)](out, 0.5, 1.0, 4, BLOCK=FMA_BLOCK, DTYPE=tl_dtype)
        # each chain: x -> x/2 + 1, four times, from seed + c
        seed = (torch.arange(FMA_BLOCK).repeat(3) + torch.arange(3).repeat_interleave(FMA_BLOCK)).to(dtype) * 1e-6
        want = sum(((seed + c) / 16 + 1.875) for c in range(FMA_CHAINS))
        assert torch.allclose(out, want, rtol=1e-5), (out[:4], want[:4])
    g.BYTES_PER_LAUNCH = 1 << 20
    for config in g.STREAM_CONFIGS:
        for kind in ("read", "copy", "triad"):
            for size, sms in ((200_000, 1), (700_001, 3)):
                p = g.stream_plan(kind, size, sms, config)
                x, y, z = (torch.rand(p["n"] + 5) for _ in range(3))
                out = torch.zeros(p["programs"])
                stream_kernel[(p["programs"],)](x, y, z, out, p["tiles"], p["virtual"], p["per_program"],
                                               0.5, KIND=KIND_CODES[kind], BLOCK=config.block)
                g.stream_check(kind, x, y, z, out, p)
                if kind == "read":  # a wrong result is caught: a sum 1 % off, a value off by one
                    out[0] += 0.01 * float(out.sum())
                else:
                    y[0] += 1.0
                try:
                    g.stream_check(kind, x, y, z, out, p)
                except RuntimeError:
                    pass
                else:
                    raise AssertionError(f"{kind}: a wrong result passed the check")
    print("ok")
""")


@pytest.mark.skipif(HAS_CUDA, reason="compiled for the device by test_a_quick_run_on_the_device (Triton 3.6's "
                                      "interpreter cannot run a loop over a launch argument)")
def test_microkernels_compute_what_they_count_in_tritons_interpreter() -> None:
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", INTERPRETED], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


# ---------------------------------------------------------------------------- a real device


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_a_quick_run_on_the_device(tmp_path: Path) -> None:
    c = get_gpu_ceilings(0, quick=True, db=str(tmp_path / "g.db"))
    for roof in ("fp32", "fp64", "gemm_fp32", "gemm_tf32", "gemm_fp16", "gemm_bf16", "gemm_int8"):
        assert c.peak_flops.get(roof, 0) > 0 or roof in c.skipped, roof
    assert c.peak_flops["gemm_bf16"] > c.peak_flops["gemm_fp32"] and c.peak_flops["fp32"] > c.peak_flops["fp64"]
    assert c.bandwidth["L2"] > c.bandwidth["DRAM"] > 1e11
    # one op waited for costs its launch and the wait: more than one op among many in flight
    assert 0 < c.dispatch_overhead_s < 1e-3 and c.launch_latency_s > c.dispatch_overhead_s
    assert all(err <= gpu_probes.GEMM_TOLERANCE[p] for p, err in c.details["gemm_relative_error"].items())
    again = get_gpu_ceilings(0, quick=True, db=str(tmp_path / "g.db"))
    assert again.from_store and again.peak_flops == c.peak_flops

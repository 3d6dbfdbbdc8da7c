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
from rooftune.machine import gpu
from rooftune.machine.gpu import (
    BYTES_PER_LAUNCH,
    GpuCeilings,
    get_gpu_ceilings,
    name_levels,
    stream_plan,
    sweep_sizes,
    validate_gpu_precisions,
)
from rooftune.machine.plateaus import Plateau
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
    assert h200(max_clocks_mhz={}, uuid="other").id == d.id
    back = GpuDevice.from_dict(json.loads(json.dumps(d.to_dict())))
    assert back == d and back.id == d.id
    assert is_device_fingerprint(d.to_dict()) and not is_device_fingerprint({"arch": "x86_64"})


def test_smi_clocks() -> None:
    assert parse_smi_clocks("1980, 3201\n") == {"sm": 1980, "memory": 3201}
    assert parse_smi_clocks("[N/A], 3201") == {} and parse_smi_clocks("") == {}
    ok = SimpleNamespace(returncode=0, stdout="1755, 2619\n")
    assert nvidia_smi_clocks(0, run=lambda *a, **k: ok) == {"sm": 1755, "memory": 2619}
    assert nvidia_smi_clocks(0, run=lambda *a, **k: SimpleNamespace(returncode=9, stdout="")) == {}

    def missing(*a: Any, **k: Any) -> Any:
        raise FileNotFoundError("nvidia-smi")

    assert nvidia_smi_clocks(0, run=missing) == {}


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
    sizes = sweep_sizes(1024 * MiB, 4)
    assert sizes[0] == MiB and sizes[-1] == 1024 * MiB and len(sizes) == 41
    ratios = [b / a for a, b in zip(sizes, sizes[1:], strict=False)]
    assert all(abs(r - 2 ** 0.25) < 1e-3 for r in ratios)


@pytest.mark.parametrize("config", gpu.STREAM_CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("kind,arrays", [("read", 1), ("copy", 2), ("triad", 3)])
@pytest.mark.parametrize("size", [MiB, 3 * MiB + 12345, 60 * MiB, 1024 * MiB])
def test_stream_plan_covers_every_tile_and_hides_the_launch(kind: str, arrays: int, size: int,
                                                             config: gpu.StreamConfig) -> None:
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
    sizes = sweep_sizes(1024 * MiB, 4)
    assert gpu.probe_sizes(sizes, 60 * MiB) == [max(s for s in sizes if s <= 30 * MiB), 1024 * MiB]
    assert gpu.probe_sizes(sizes, 0) == [1024 * MiB]


def test_levels_named_l2_and_dram() -> None:
    sizes = sweep_sizes(1024 * MiB, 4)

    def rate(s: int) -> float:  # an L2 of 60 MiB at 10 TB/s, then memory at 4 TB/s
        return 10e12 if s <= 40 * MiB else (6e12 if s <= 120 * MiB else 4e12)

    sweep = {"read": [(s, rate(s)) for s in sizes], "copy": [(s, 0.9 * rate(s)) for s in sizes]}
    by_kernel, plateaus, warnings = name_levels(sweep, {"L2": 60 * MiB}, 4)
    assert by_kernel["read"] == {"L2": 10e12, "DRAM": 4e12}
    assert by_kernel["copy"]["L2"] == pytest.approx(9e12) and by_kernel["copy"]["DRAM"] == pytest.approx(3.6e12)
    assert {p.level for p in plateaus["read"]} == {"L2", "DRAM"} and warnings == []


# ---------------------------------------------------------------------------- stored results


def fake_ceilings(device: GpuDevice, quick: bool = False) -> GpuCeilings:
    sizes = sweep_sizes(1024 * MiB, 2)
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
    # another host with the same card is another device: measured again
    get_gpu_ceilings(device=h200(host_id="fedcba9876543210"), db=str(db))
    assert calls == [False, False, False]
    with Store(str(db)) as store:
        assert store.platforms() == []  # devices are not CPU platforms
        assert {fp["kind"] for fp in store.fingerprints().values()} == {"cuda"}


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
    import rooftune.machine.gpu as g
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
                stream_kernel[(p["programs"],)](x, y, z, out, p["n"], p["tiles"], p["virtual"], p["per_program"],
                                               0.5, KIND=KIND_CODES[kind], BLOCK=config.block)
                g.stream_check(kind, x, y, z, out, p)
                y[0] += 1.0  # a wrong result is caught
                try:
                    g.stream_check(kind, x, y, z, out, p)
                except RuntimeError:
                    pass
                else:
                    assert kind == "read"
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
    assert 0 < c.dispatch_overhead_s < 1e-3 and c.launch_latency_s >= c.dispatch_overhead_s * 0.5
    assert all(err <= gpu.GEMM_TOLERANCE[p] for p, err in c.details["gemm_relative_error"].items())
    again = get_gpu_ceilings(0, quick=True, db=str(tmp_path / "g.db"))
    assert again.from_store and again.peak_flops == c.peak_flops

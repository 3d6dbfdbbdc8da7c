"""`rooftune analyze --device cuda`: ops timed by events on the device's stream, placed under the
device's roofs. CUDA's events are faked here (no device on this machine): each records the host's
clock, so the plumbing (which op's events, read when, in which unit) is what is checked; a real
device runs it in tests/machine/test_gpu.py's device test."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from rooftune.analysis import analyze
from rooftune.analysis.analyze import analyze_workload
from rooftune.analysis.placement import Roofs, place, tf32_allowed
from rooftune.costs import OpCost
from rooftune.errors import InvalidArgument
from rooftune.workload import load_workload
from rooftune.workload.graph import capture, capture_hooks
from tests.machine.test_gpu import HAS_CUDA, fake_ceilings, h200
from tests.test_cli import assert_one_line_error, rooftune_in_process


class FakeEvent:
    """torch.cuda.Event with the host's clock: elapsed_time in milliseconds, as CUDA's."""

    recorded = 0

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.t: float | None = None

    def record(self, stream: Any = None) -> None:
        FakeEvent.recorded += 1
        self.t = time.perf_counter()

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.t is not None and end.t is not None, "an event read before it was recorded"
        return (end.t - self.t) * 1e3


@pytest.fixture
def fake_device(monkeypatch: pytest.MonkeyPatch) -> Any:
    import contextlib

    from rooftune.machine import gpu

    synced: list[int] = []
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    monkeypatch.setattr(gpu, "on_device", lambda index: contextlib.nullcontext())

    def clock(index: int) -> Any:
        def cuda_synchronized() -> float:  # as the real one: waits for the device, then reads the host's clock
            torch.cuda.synchronize(index)
            return time.perf_counter()

        cuda_synchronized.cuda_device = index  # type: ignore[attr-defined]
        return cuda_synchronized

    monkeypatch.setattr(gpu, "cuda_clock", clock)
    FakeEvent.recorded = 0
    return synced


class Slow(torch.nn.Module):
    """A leaf that takes ``seconds`` of the host's time (a fake event times the host), then calls
    ``inner`` if given: a module held outside its children, so both are leaves and one runs
    inside the other."""

    def __init__(self, seconds: float, inner: torch.nn.Module | None = None) -> None:
        super().__init__()
        self.seconds = seconds
        self.__dict__["inner"] = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return self.inner(x) if self.inner is not None else x + 1


class Chain(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = Slow(0.002)
        self.inner = Slow(0.004)
        self.outer = Slow(0.020, self.inner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.outer(self.first(x))


@pytest.mark.parametrize("how", ["export", "hooks"])
def test_each_op_is_timed_by_its_own_events(fake_device: list[int], how: str) -> None:
    from rooftune.machine.gpu import cuda_clock

    wl = load_workload("tests.analysis.tiny_models:small_cnn")
    graph = capture(wl) if how == "export" else capture_hooks(wl, "forced")
    n = len(graph.ops)
    with torch.no_grad():
        host = graph.run_timed(time.perf_counter)
        assert FakeEvent.recorded == 0 and fake_device == []  # the host's clock: no events
        durations = graph.run_timed(cuda_clock(0))
    assert FakeEvent.recorded == 2 * n and fake_device == [0]  # no wait per op: one, after the run
    assert len(durations) == n == len(host) and all(0 < d < 1 for d in durations)
    if how == "hooks":  # between runs the hooks stay, and neither wait nor record
        fake_device.clear()
        with torch.no_grad():
            wl.module(*wl.inputs)
        assert fake_device == [] and FakeEvent.recorded == 2 * n


def test_nested_leaves_get_their_own_times(fake_device: list[int]) -> None:
    from rooftune.machine.gpu import cuda_clock
    from rooftune.workload import Workload

    wl = Workload("chain", "module", Chain(), (torch.ones(2),))
    graph = capture_hooks(wl, "forced")
    names = [op.name for op in graph.ops]
    assert names == ["first", "inner", "outer"]  # in the order they finish
    with torch.no_grad():
        host = dict(zip(names, graph.run_timed(time.perf_counter), strict=True))
        device = dict(zip(names, graph.run_timed(cuda_clock(0)), strict=True))
    for times in (host, device):  # outer's 24 ms hold inner's 4: each its own start and end
        assert times["inner"] < 0.012 < 0.018 < times["outer"], times
        assert times["first"] < 0.012, times


def test_gpu_roofs_put_products_on_the_matrix_units() -> None:
    c = fake_ceilings(h200())
    c = replace(c, peak_flops={**c.peak_flops, "gemm_tf32": 350e12, "gemm_fp16": 650e12})
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        roofs = Roofs.from_gpu(c, 2)
        assert roofs.peak_for("float32", "conv") == ("gemm_tf32", 350e12)  # cuDNN may use TF32
        assert roofs.peak_for("float32", "linear") == ("gemm_fp32", 50e12)  # matmul precision "highest"
        assert roofs.peak_for("bfloat16", "matmul") == ("gemm_bf16", 700e12)
        assert roofs.peak_for("float16", "conv") == ("gemm_fp16", 650e12)
        assert roofs.peak_for("float32", "elementwise") == ("fp32", 60e12)
        assert roofs.peak_for("float64", "reduction") == ("fp64", 30e12)
        assert roofs.peak_for("int8", "conv") == ("fp32", 60e12)  # no int8 roof measured: the vector peak
        assert roofs.bandwidth == {"L2": 10e12, "DRAM": 4e12} and roofs.capacity == {"L2": 60 * 1024**2}
        assert roofs.dispatch_s == 4e-6
        torch.set_float32_matmul_precision("high")
        assert Roofs.from_gpu(c, 2).peak_for("float32", "linear") == ("gemm_tf32", 350e12)
    finally:
        torch.set_float32_matmul_precision(before)
    conv = getattr(getattr(torch.backends.cudnn, "conv", None), "fp32_precision", None)
    if conv is not None:  # torch's newer settings decide first, each kind its own
        try:
            torch.backends.cudnn.conv.fp32_precision = "ieee"
            roofs = Roofs.from_gpu(c, 2)
            assert roofs.peak_for("float32", "conv") == ("gemm_fp32", 50e12)
            assert roofs.peak_for("float32", "rnn")[0] == ("gemm_tf32" if tf32_allowed("cudnn", "rnn") else "gemm_fp32")
        finally:
            torch.backends.cudnn.conv.fp32_precision = conv
    # a 100 GFLOP convolution of 10 MB in 1 ms: compute-bound under the tf32 roof, from L2
    pl = place(OpCost(kind="conv", flops=1e11, bytes=1e7, formula="x"), 1e-3, "float32", Roofs.from_gpu(c, 2))
    assert pl.roof_name == "gemm_tf32" and pl.level == "L2" and pl.bound == "compute"
    assert pl.efficiency == pytest.approx((1e11 / 350e12) / 1e-3)


def test_an_analysis_on_the_device(fake_device: list[int], tmp_path: Path) -> None:
    wl = load_workload("tests.analysis.tiny_models:small_cnn")
    c = replace(fake_ceilings(h200()), peak_flops={"fp32": 60e12, "gemm_fp32": 50e12, "gemm_tf32": 350e12})
    a = analyze_workload(wl, c, threads=1, budget_s=0.5)
    assert a.device == "cuda:0 NVIDIA H200" and a.platform_id == c.platform.id
    convs = [o for o in a.ops if o.kind == "conv"]
    assert convs and all(o.roof_name == "gemm_tf32" for o in convs)
    assert all(o.roof_name == "fp32" for o in a.ops if o.kind in ("elementwise", "norm"))
    assert any("the device's (events around each op" in w for w in a.warnings)
    assert "fp32 conv ops are placed under the tf32 roof: torch lets them use TF32" in a.warnings
    assert a.roofs["dispatch_overhead_s"] == 4e-6 and a.roofs["bandwidth"]["L2"] == 10e12
    # read back from its JSON form with its device
    from rooftune.analysis.analyze import Analysis

    back = Analysis.from_dict(a.to_dict())
    assert back.device == a.device
    # the figures name the device and draw the roofs the ops were placed under
    from rooftune.report import plot_analysis
    from rooftune.report.analysis_figures import _used_roofs, _where

    used = [n for n, _ in _used_roofs(a)]  # the linear layer's roof follows the matmul precision
    assert _where(a) == "cuda:0 NVIDIA H200" and used[0] == "gemm_tf32" and "fp32" in used
    paths = plot_analysis([a], tmp_path, "png")
    assert len(paths) == 2 and all(p.stat().st_size > 10_000 for p in paths)


def test_a_launch_bound_run_is_named(fake_device: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    wl = load_workload("tests.analysis.tiny_models:small_cnn")
    monkeypatch.setattr(sys.modules["rooftune.analysis.analyze"], "GPU_LAUNCH_BOUND", 0.0)
    a = analyze_workload(wl, fake_ceilings(h200()), threads=1, budget_s=0.3)
    assert any("the device waited for the host" in w for w in a.warnings)


def test_an_analysis_stored_before_devices_reads_as_cpu(fake_device: list[int]) -> None:
    from rooftune.analysis.analyze import Analysis

    wl = load_workload("tests.analysis.tiny_models:small_cnn")
    d = analyze_workload(wl, fake_ceilings(h200()), threads=1, budget_s=0.3).to_dict()
    del d["device"]
    assert Analysis.from_dict(d).device == "cpu"


def test_ceilings_of_another_device_are_refused() -> None:
    from rooftune.platform import current_platform
    from tests.conftest import make_ceilings

    cpu_like = make_ceilings(current_platform())
    with pytest.raises(InvalidArgument, match="ceilings .* are not cuda's"):
        analyze("tests.analysis.tiny_models:small_cnn", device="cuda", ceilings=cpu_like, save=False)
    with pytest.raises(InvalidArgument, match="are not cpu's"):
        analyze("tests.analysis.tiny_models:small_cnn", ceilings=fake_ceilings(h200()), save=False)
    with pytest.raises(InvalidArgument, match="are not cuda:1's"):  # cuda:0's ceilings for cuda:1
        analyze("tests.analysis.tiny_models:small_cnn", device="cuda:1", ceilings=fake_ceilings(h200()), save=False)


@pytest.mark.skipif(HAS_CUDA, reason="torch sees a CUDA device here")
def test_analyze_on_a_missing_device_is_a_one_line_error(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    proc = rooftune_in_process("analyze", "tests.analysis.tiny_models:small_cnn", "--device", "cuda:2", db=db)
    assert_one_line_error(proc, "--device 'cuda:2'", "allowed: cpu")
    assert not db.exists()
    proc = rooftune_in_process("analyze", "tests.analysis.tiny_models:small_cnn", "--device", "gpu", db=db)
    assert_one_line_error(proc, "--device 'gpu'", "allowed cpu, cuda or cuda:N")


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_a_model_analysed_on_the_device(tmp_path: Path) -> None:
    # batch 64 keeps the device busy: the ops' device times then add up to the run (103 % on an H200)
    a, = analyze("resnet50", batch=64, device="cuda", quick=True, budget_s=5.0, db=str(tmp_path / "g.db"))
    assert a.device.startswith("cuda:0 ") and a.end_to_end_s > 0 and a.ops_sum_s > 0
    convs = [o for o in a.ops if o.kind == "conv"]
    assert len(convs) == 53 and all(o.roof_name in ("gemm_tf32", "gemm_fp32") for o in convs)
    assert 0.8 < a.accounting_ratio < 1.1
    assert not any("the device waited for the host" in w for w in a.warnings)

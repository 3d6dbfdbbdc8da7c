"""ncnn as a runtime: converted by pnnx in fp32, run and checked like the others; the guideline
chooses it where 3x3 stride-1 convolutions carry the work at batch 1."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rooftune.platform import Platform
from rooftune.runtimes import get_runtime, output_tensors
from rooftune.tuning import RunConfig, guideline
from rooftune.tuning.guidelines import NCNN_MIN_SHARE, runtime_seeds
from rooftune.tuning.verify import compare_outputs
from rooftune.workload import OpGraph, OpNode, TensorMeta, load_workload

WINOGRAD_CNN = "tests.analysis.tiny_models:winograd_cnn"


def _ncnn():  # type: ignore[no-untyped-def]
    rt = get_runtime("ncnn")
    if rt.available():
        pytest.skip(rt.available())
    return rt


@pytest.mark.parametrize("model", [WINOGRAD_CNN, "tests.analysis.tiny_models:two_heads"])
def test_ncnn_runs_the_model_in_fp32_with_and_without_winograd(tmp_path: Path, model: str) -> None:
    rt = _ncnn()
    wl = load_workload(model)
    with torch.no_grad():
        ref = output_tensors(wl())
    for conv in ("winograd", "direct"):
        cfg = RunConfig(runtime="ncnn", intra_threads=1, runtime_options={"conv": conv})
        prepared = rt.prepare(wl, cfg, tmp_path)
        out = prepared.output()
        assert [o.shape for o in out] == [r.shape for r in ref]  # the batch of one put back
        check = compare_outputs(out, ref, "fp32")
        # fp32 weights: pnnx's default fp16 weights would differ by ~1e-3 of the scale
        assert check["ok"] and check["max_rel"] < 1e-4, check
        again = prepared.output_for(tuple(torch.randn_like(x) for x in wl.inputs))
        assert [o.shape for o in again] == [r.shape for r in ref]
    # one converted model for both (Winograd is chosen at load), written whole: nothing aside is left
    assert prepared.artifact is not None and prepared.artifact.with_suffix(".bin").is_file()
    assert not [p.name for p in tmp_path.rglob(".*")]


def test_the_inputs_ncnn_reads_outlive_the_tensors_they_came_from(tmp_path: Path) -> None:
    """An ncnn.Mat made from a numpy array points into that array's memory: the prepared model
    keeps the arrays (and so the input tensors) alive. A trial process that dropped its
    workload's inputs after preparing read freed memory, and crashed on inception_v3's 1 MB input."""
    import subprocess
    import sys

    _ncnn()
    code = f"""
import gc, json, torch
from pathlib import Path
from rooftune.runtimes import get_runtime, output_tensors
from rooftune.tuning import RunConfig
from rooftune.tuning.verify import compare_outputs
from rooftune.workload import load_workload
wl = load_workload({WINOGRAD_CNN!r}, inputs=[(1, 3, 160, 160)])
with torch.no_grad():
    ref = output_tensors(wl())
from dataclasses import replace
copy = replace(wl, inputs=tuple(x.clone() for x in wl.inputs))
prepared = get_runtime("ncnn").prepare(copy, RunConfig(runtime="ncnn", intra_threads=1), Path({str(tmp_path)!r}))
del copy  # the tensors it was prepared with go (300 KB: their memory is unmapped when freed)
gc.collect()
junk = [torch.full((3 * 160 * 160,), 1e30) for _ in range(50)]
print(json.dumps(compare_outputs(prepared.output(), ref, "fp32")["ok"]))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "true"


def test_ncnn_runs_batch_one_only() -> None:
    rt = get_runtime("ncnn")
    assert rt.unsupported(RunConfig(runtime="ncnn", batch=4)) == \
        "ncnn runs one sample per inference (batch 1), not batch 4"
    assert rt.unsupported(RunConfig(runtime="ncnn", precision="int8")) is not None
    assert rt.normalize(RunConfig(runtime="ncnn", inter_threads=2, omp={"OMP_PROC_BIND": "close"},
                                  memory_format="channels_last")) == RunConfig(runtime="ncnn")


def test_inputs_ncnn_cannot_take_are_a_clear_error_and_nothing_is_written(tmp_path: Path) -> None:
    from rooftune.runtimes.ncnn_runtime import convert

    _ncnn()

    class Indices(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.long()

    with pytest.raises(ValueError, match="ncnn takes float32 inputs"):
        convert(Indices(), (torch.ones(1, 3, dtype=torch.int64),), tmp_path / "m.ncnn.param")
    with pytest.raises(ValueError, match="inputs of batch 1"):
        convert(Indices(), (torch.ones(2, 3),), tmp_path / "m.ncnn.param")
    assert not list(tmp_path.iterdir())


def _conv(index: int, producers: tuple[int, ...], k: int, groups: int = 1) -> OpNode:
    t = TensorMeta((1, 64, 28, 28), "float32", 4)
    w = TensorMeta((64, 64 // groups, k, k), "float32", 4)
    return OpNode(index, f"conv{index}", "aten.conv2d", "", "Conv2d",
                  {"input": t, "weight": w, "groups": groups}, (t,), producers)


def test_the_guideline_takes_ncnn_where_3x3_convolutions_carry_the_work_at_batch_one(
        fake_platform: Platform) -> None:
    nc = _ncnn()
    # 27 of 28 parts of the FLOPs in 3x3 convolutions (96 %, vgg16-like)
    threes = OpGraph("w", (_conv(0, (), 3), _conv(1, (0,), 3), _conv(2, (1,), 3), _conv(3, (2,), 1)), "torch.export")
    # 18 of 19 (94.7 %, below the line): ONNX Runtime with Winograd, ncnn measured as a seed beside it
    mostly = OpGraph("m", (_conv(0, (), 3), _conv(1, (0,), 3), _conv(2, (1,), 1)), "torch.export")
    depthwise = OpGraph("d", (_conv(0, (), 1), _conv(1, (0,), 3, groups=64), _conv(2, (1,), 1)), "torch.export")
    available = {"onnxruntime": get_runtime("onnxruntime"), "ncnn": nc, "eager": get_runtime("eager")}
    cfg, why = guideline(fake_platform, threes, available)
    assert cfg.runtime == "ncnn" and cfg.runtime_options == {"conv": "winograd"} and cfg.batch == 1
    assert cfg.intra_threads == fake_platform.usable_cores and cfg.inter_threads == 1
    assert any("ncnn with its Winograd kernels" in w for w in why)
    # the guideline without ncnn is measured beside it (a model its converter refuses keeps an answer)
    (other,) = runtime_seeds(fake_platform, threes, available, cfg)
    assert other.runtime == "onnxruntime" and other.name == "guideline (onnxruntime)"
    assert other.runtime_options.get("conv") == "winograd"
    assert NCNN_MIN_SHARE == pytest.approx(0.95)
    mixed, _ = guideline(fake_platform, mostly, available)
    assert mixed.runtime == "onnxruntime" and mixed.runtime_options.get("conv") == "winograd"
    (seed,) = runtime_seeds(fake_platform, mostly, available, mixed)
    assert seed.runtime == "ncnn" and seed.name == "guideline (ncnn)"
    # depthwise 3x3 layers are not Winograd's: ONNX Runtime, with ncnn as a seed beside it
    ort, _ = guideline(fake_platform, depthwise, available)
    assert ort.runtime == "onnxruntime"
    (seed,) = runtime_seeds(fake_platform, depthwise, available, ort)
    assert seed.runtime == "ncnn" and seed.name == "guideline (ncnn)" and seed.inter_threads == 1
    # throughput at batch 8: not ncnn, and no ncnn seed
    thr, _ = guideline(fake_platform, threes, available, objective="throughput")
    assert thr.runtime == "onnxruntime" and thr.batch > 1
    assert runtime_seeds(fake_platform, threes, available, thr, objective="throughput") == []
    assert runtime_seeds(fake_platform, threes, {"onnxruntime": get_runtime("onnxruntime")}, ort) == []


def test_a_saved_ncnn_configuration_loads_its_model_and_weights_from_beside_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import rooftune
    import rooftune.runtimes.ncnn_runtime as nr

    _ncnn()
    config = RunConfig(runtime="ncnn", intra_threads=1)
    wl = load_workload(WINOGRAD_CNN)
    nr.convert(wl.module.eval(), wl.inputs, tmp_path / "c_model.ncnn.param")
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"config": config.to_dict(), "artifact": "/gone/c_model.ncnn.param",
                                "workload": {"model": WINOGRAD_CNN, "inputs": None, "options": {}}}))

    def no_convert(*args: object) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(nr, "convert", no_convert)
    m = rooftune.load_tuned(path)  # the .param and its .bin were placed where the runtime loads them
    assert m.check["ok"] and m.notes == ()
    with torch.no_grad():
        want = wl.module.eval()(*m.example_inputs)
    assert torch.allclose(m(*m.example_inputs), want, atol=1e-5)

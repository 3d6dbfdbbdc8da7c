"""What a sweep plans: precisions the machine lacks skipped with their reason, int8 and primitives
on the forward pass only, the CUDA variants (autotuning, launch mode, TF32), point keys; and a
CUDA sweep refused in one line on a machine without a GPU."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import rooftune
from rooftune.errors import InvalidArgument
from rooftune.sweep import get_family
from rooftune.sweep.plan import Variant, grid_axes, grid_points, plan, precision_reasons

CONV = {"batch": "1", "channels": "8", "size": "6"}


def _points(family: str = "conv2d", grid: dict[str, str] | None = None) -> list[dict[str, int]]:
    fam = get_family(family)
    return grid_points(fam, grid_axes(fam, grid or CONV))


def test_precisions_a_machine_lacks_are_skipped_with_the_reason() -> None:
    old = SimpleNamespace(effective_isa=frozenset({"avx", "avx2", "fma"}))
    reasons = precision_reasons(old, ("fp32", "bf16", "fp16", "int8"))
    assert reasons["fp32"] is None
    assert "no native bf16" in str(reasons["bf16"]) and "no native int8" in str(reasons["int8"])
    assert "fp16" in str(reasons["fp16"])
    amx = SimpleNamespace(effective_isa=frozenset({"avx512f", "avx512_bf16", "amx_bf16", "amx_int8", "avx512_vnni"}))
    assert precision_reasons(amx, ("bf16", "int8")) == {"bf16": None, "int8": None}
    conv = get_family("conv2d")
    p = plan(conv, _points(), passes=("fwd",), precisions=("fp32", "bf16"), algorithms=("default",),
             layouts=("NCHW", "NHWC"), threads=(2,), precision_skip=reasons)
    assert {(s.precision, s.variant.layout) for s in p.points} == {("fp32", "NCHW"), ("fp32", "NHWC")}
    assert [s.reason for s in p.skipped] == [reasons["bf16"]]  # once per point and pass


def test_int8_and_primitives_run_the_forward_pass_only() -> None:
    conv = get_family("conv2d")
    p = plan(conv, _points(), passes=("fwd", "bwd"), precisions=("fp32", "int8"),
             algorithms=("default", "onednn-nhwc", "gemm-1x1-nchw"), layouts=("NCHW",), threads=(1,))
    run = {(s.pass_, s.precision, s.variant.algorithm, s.variant.layout) for s in p.points}
    assert ("fwd", "fp32", "onednn-nhwc", "NHWC") in run  # a primitive in its own layout
    assert ("fwd", "int8", "int8-x86", "NCHW") in run or any(a.startswith("int8-") for _, pr, a, _ in run
                                                              if pr == "int8")
    assert not any(s.pass_ == "bwd" and s.variant.algorithm != "default" for s in p.points)
    reasons = {s.reason for s in p.skipped}
    assert "primitives run the forward pass only" in reasons
    assert "int8 runs the forward pass only: there are no int8 training kernels" in reasons
    assert "3x3 kernel not supported (1x1 only)" in reasons  # gemm-1x1 on a 3x3 point


def test_cuda_plan_has_tf32_autotuning_and_graphs() -> None:
    conv = get_family("conv2d")
    p = plan(conv, _points(), passes=("fwd", "bwd"), precisions=("fp32", "tf32", "bf16"), algorithms=("default",),
             layouts=("NCHW",), threads=(1,), device="cuda:0", autotune=(False, True), launches=("eager", "graph"))
    fwd = [s for s in p.points if s.pass_ == "fwd"]
    assert {(s.precision, s.variant.autotune, s.variant.launch) for s in fwd} == {
        (pr, a, la) for pr in ("fp32", "tf32", "bf16") for a in (False, True) for la in ("eager", "graph")}
    assert all(s.device == "cuda:0" for s in p.points)
    assert not any(s.pass_ == "bwd" and s.variant.launch == "graph" for s in p.points)
    assert "CUDA graphs are captured for the forward pass only" in {s.reason for s in p.skipped}


def test_point_keys_name_everything_that_was_measured() -> None:
    conv = get_family("conv2d")
    p = plan(conv, _points(), passes=("fwd",), precisions=("fp32",), algorithms=("default",),
             layouts=("NCHW", "NHWC"), threads=(1, 2))
    keys = {s.key("platform-a") for s in p.points}
    assert len(keys) == len(p.points) == 4
    assert p.points[0].key("platform-a") != p.points[0].key("platform-b")
    assert Variant.from_dict(p.points[0].variant.to_dict()) == p.points[0].variant


@pytest.mark.parametrize("kwargs,fragment", [
    ({"family": "conv3d"}, "invalid family 'conv3d': allowed conv2d, lstm"),
    ({"passes": ["fwd", "back"]}, "invalid pass 'back': allowed fwd, bwd, step"),
    ({"precisions": "fp8"}, "invalid precision 'fp8'"),
    ({"precisions": "tf32"}, "invalid precision 'tf32': allowed fp32, bf16, fp16, int8"),
    ({"layouts": "NCDHW"}, "invalid layout 'NCDHW': allowed NCHW, NHWC"),
    ({"algorithms": "winograd"}, "invalid algorithm 'winograd'"),
    ({"threads": 0}, "thread count 0"),
    ({"grid": {"channels": "16:1024:*0"}}, "factor >= 2"),
    ({"grid": {"batch": "100000", "channels": "1024"}}, "above the cap"),
    ({"device": "cuda"}, "invalid --device 'cuda'"),
    ({"device": "tpu"}, "invalid --device 'tpu'"),
    ({"family": "lstm", "algorithms": "winograd-f4x4"}, "lstm runs only the framework's default"),
    ({"family": "lstm", "layouts": "NHWC"}, "lstm has no layout choice"),
])
def test_bad_arguments_are_refused_before_anything_is_stored(tmp_path: Path, kwargs: dict[str, object],
                                                             fragment: str) -> None:
    import torch

    if kwargs.get("device") == "cuda" and torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the sweep would run")
    args: dict[str, object] = {"family": "conv2d", **kwargs}
    family = args.pop("family")
    db = tmp_path / "s.db"
    with pytest.raises(InvalidArgument) as e:
        rooftune.sweep.sweep(family, db=str(db), **args)
    assert fragment in str(e.value)
    assert "\n" not in str(e.value)
    assert not db.exists()  # refused before the store was opened

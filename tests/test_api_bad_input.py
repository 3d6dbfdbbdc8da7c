"""Bad input through the Python API: an InvalidArgument (or StoreError) naming the value and what
is allowed, raised before anything is measured, with nothing left behind; and the forms a Python
caller naturally writes (a lone name, a numpy integer, one tensor) taken as meant."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

import rooftune
from rooftune.bench import Policy, measure
from rooftune.errors import InvalidArgument, RooftuneError, as_ints, as_names


@pytest.mark.parametrize("kwargs,fragment", [
    ({"number": 0}, "policy number 0: allowed an integer >= 1, or None"),
    ({"number": -1}, "policy number -1"),
    ({"number": 2.5}, "policy number 2.5"),
    ({"budget_s": -1}, "policy budget_s -1: allowed a number >= 0 (inf: no limit)"),
    ({"budget_s": float("nan")}, "policy budget_s nan"),
    ({"budget_s": "2"}, "policy budget_s '2'"),
    ({"warmup_s": float("inf")}, "policy warmup_s inf: allowed a number >= 0, finite"),
    ({"target_rel_ci": -0.1}, "policy target_rel_ci -0.1"),
    ({"min_samples": 0}, "policy min_samples 0"),
    ({"max_samples": 3}, "policy max_samples 3: allowed an integer >= min_samples (6)"),
])
def test_a_policy_the_timer_cannot_follow_is_refused(kwargs: dict, fragment: str) -> None:
    with pytest.raises(InvalidArgument) as exc:
        Policy(**kwargs)
    assert fragment in str(exc.value)


def test_the_policies_in_use_stay_valid() -> None:
    Policy(number=1, warmup_s=0.0, budget_s=0.0, min_samples=3, max_samples=3, target_rel_ci=0.0)
    p = Policy(budget_s=np.float64(1.5), number=np.int64(2))
    assert type(p.number) is int and type(p.budget_s) is float  # written to JSON with every trial
    json.dumps(dataclasses.asdict(p))
    Policy(budget_s=float("inf"))
    m = measure(lambda: None, label="noop", policy=Policy(number=np.int64(5), warmup_s=0, budget_s=0.05))
    assert m.number == 5 and m.median > 0


def test_names_and_integers_as_a_python_caller_writes_them() -> None:
    assert as_names("int8", "precisions") == ("int8",)
    assert as_names(["fp32", "int8"], "precisions") == ("fp32", "int8")
    assert as_names(None, "precisions") is None
    assert as_ints(np.int64(2), "threads") == (2,)
    assert as_ints([1, np.int32(2)], "threads") == (1, 2)
    with pytest.raises(InvalidArgument, match="invalid threads \\[1.5\\]: allowed an integer or a list of integers"):
        as_ints([1.5], "threads")
    with pytest.raises(InvalidArgument, match="allowed a name or a list of names"):
        as_names(["fp32", 8], "precisions")


@pytest.fixture
def own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's temporary directory as the one tempfile uses: what a refused call leaves shows."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


@pytest.mark.parametrize("call,fragment", [
    (lambda db: rooftune.tune(torch.nn.Linear(2, 2), store=db), "invalid example_inputs None: an nn.Module needs its example inputs"),
    (lambda db: rooftune.tune(object(), example_inputs=(torch.ones(1),), store=db), "invalid model 'object'"),
    (lambda db: rooftune.tune("lstm", example_inputs=(torch.ones(1),), store=db),
     "invalid example_inputs 'tuple': allowed only with an nn.Module"),
    (lambda db: rooftune.tune(torch.nn.Linear(2, 2), example_inputs=(torch.ones(1, 2),), options={"x": 1}, store=db),
     "allowed only with a model name"),
    (lambda db: rooftune.tune("lstm", precisions=(), store=db), "invalid precisions (): allowed at least one"),
    (lambda db: rooftune.tune("lstm", precisions="int9", store=db), "invalid precision 'int9'"),  # not 'i'
    (lambda db: rooftune.tune("lstm", runtimes=[], store=db), "invalid runtimes (): allowed at least one runtime"),
    (lambda db: rooftune.tune("lstm", runtimes="tensorflow", store=db), "invalid runtime 'tensorflow'"),
    (lambda db: rooftune.tune("lstm", budget_s=True, store=db), "invalid budget True"),
    (lambda db: rooftune.tune("lstm", trial_policy={"budget_s": 1}, store=db), "invalid trial_policy"),
    (lambda db: rooftune.tune("lstm", save=str(db.parent), store=db), "is a directory; give a file name"),
    (lambda db: rooftune.tune("resnet18", inputs=[(1, 3, -5, 224)], store=db), "invalid input shape (1, 3, -5, 224)"),
    (lambda db: rooftune.tune("resnet18", inputs="1x3x224x224", store=db), "invalid inputs '1x3x224x224'"),
    (lambda db: rooftune.tune("lstm", trials=3, guidelines_only=True, store=db), "allowed only without guidelines-only"),
    # refused after the reference output is written to a temporary directory, which goes too
    (lambda db: rooftune.tune("lstm", store=db.parent / "missing" / "x.db"), "does not exist"),
    (lambda db: rooftune.optimize("lstm", steps=(), out=str(db.parent / "o")), "invalid steps ()"),
    (lambda db: rooftune.optimize("lstm", steps="tune,select", out=str(db.parent / "o")), "invalid step 'tune,select'"),
    (lambda db: rooftune.optimize("lstm", compare_policy={"a": 1}, out=str(db.parent / "o")), "invalid compare_policy"),
    (lambda db: rooftune.analyze("lstm", threads=1.5, db=db), "invalid threads 1.5"),
    (lambda db: rooftune.analyze("lstm", ceilings={"fp32": 1}, db=db), "invalid ceilings 'dict'"),
    (lambda db: rooftune.load_tuned(None), "invalid path None"),
    (lambda db: rooftune.load_tuned(db.parent / "x.json", validate="nomod_xyz:f"), "cannot import 'nomod_xyz'"),
])
def test_the_api_refuses_before_measuring_and_leaves_nothing(own_tmp: Path, tmp_path: Path, call, fragment: str) -> None:
    db = tmp_path / "r.db"
    with pytest.raises(RooftuneError) as exc:
        call(db)
    assert fragment in str(exc.value)
    assert [p.name for p in own_tmp.iterdir() if p.name.startswith("rooftune")] == []  # no temporary directory left
    assert not db.exists() and not (tmp_path / "o").exists() and not (tmp_path / "missing").exists()


def test_select_and_transfer_refuse_what_they_cannot_use(tmp_path: Path) -> None:
    from rooftune.perfmodel import load_base_model, transfer
    from rooftune.selection import select

    db = tmp_path / "r.db"
    for call, fragment in (
        (lambda: select("squeezenet1_0", precisions=("fp8",), measure_s=None, db=db), "allowed fp32 and/or int8"),
        (lambda: select("squeezenet1_0", perfmodel="gbr", measure_s=None, db=db), "allowed a fitted rooftune PerfModel"),
        (lambda: select("squeezenet1_0", measure_s=-1, db=db), "invalid measure_s -1"),
        (lambda: transfer(load_base_model(), threads=0, db=db), "invalid threads 0: allowed 1.."),
        (lambda: transfer(load_base_model(), threads=2.0, db=db), "invalid threads 2.0"),
        (lambda: select("squeezenet1_0", threads=0, measure_s=None, db=db), "invalid threads 0: allowed 1.."),
        (lambda: select("squeezenet1_0", threads=True, measure_s=None, db=db), "invalid threads True"),
        (lambda: select("squeezenet1_0", threads=[1], measure_s=None, db=db), "invalid threads [1]"),
    ):
        with pytest.raises(InvalidArgument, match=None) as exc:
            call()
        assert fragment in str(exc.value)
    assert not db.exists()


def test_optimize_takes_one_example_tensor_as_the_inputs(tmp_path: Path) -> None:
    """Exported and selected alike: the select step once failed on the tensor's truth value."""
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, padding=1))
    r = rooftune.optimize(m.eval(), example_inputs=torch.randn(1, 3, 16, 16), steps=["select"], budget_s=60,
                          out=tmp_path / "out", store=str(tmp_path / "r.db"))
    assert r.steps["select"].status == "ok", r.steps["select"].message
    assert list((tmp_path / "out").glob("*.pt2"))


def test_verify_takes_a_primitive_by_name_and_refuses_what_is_not_one() -> None:
    from rooftune.primitives.check import verify
    from rooftune.primitives.spec import ConvSpec

    spec = ConvSpec(1, 8, 12, 12, 8, 3, 3, padding=1)
    assert verify("winograd-f4x4", spec).status == "ok"
    with pytest.raises(InvalidArgument, match="invalid primitive 'nope': allowed pytorch-default"):
        verify("nope", spec)
    with pytest.raises(InvalidArgument, match="invalid spec \\(1, 8, 12, 12\\): allowed a rooftune.primitives.ConvSpec"):
        verify("fft", (1, 8, 12, 12))  # type: ignore[arg-type]


def test_analyze_takes_a_module_with_its_example_inputs(tmp_path: Path) -> None:
    """A module object is analysed as it is, on the tensors given (no export, no file); a name with
    tensors, or a module with shapes, is refused."""
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 64, 4))
    from rooftune.platform import current_platform
    from tests.conftest import make_ceilings

    ceilings = make_ceilings(current_platform())
    [a] = rooftune.analyze(m, example_inputs=torch.randn(2, 3, 8, 8), ceilings=ceilings, save=False, budget_s=5)
    assert a.model == "Sequential" and a.batch == 2
    assert {o.target for o in a.ops} >= {"aten.conv2d", "aten.linear"} and a.capture == "torch.export"
    assert a.flops >= 2 * 2 * 8 * 27 * 64  # the conv's multiply-adds at batch 2, at the least
    with pytest.raises(InvalidArgument, match="a module needs its example inputs"):
        rooftune.analyze(m, ceilings=ceilings, save=False)
    with pytest.raises(InvalidArgument, match="allowed only with a model name"):
        rooftune.analyze(m, example_inputs=(torch.randn(1, 3, 8, 8),), inputs=[(1, 3, 8, 8)], ceilings=ceilings, save=False)
    with pytest.raises(InvalidArgument, match="allowed only with an nn.Module"):
        rooftune.analyze("resnet18", example_inputs=(torch.randn(1, 3, 8, 8),), ceilings=ceilings, save=False)

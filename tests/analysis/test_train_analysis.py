"""analyze(..., train=True) on small models with made-up ceilings: forward, backward and optimizer
ops placed, FlopCounterMode's FLOPs, the step's time by phase, a trajectory, nothing stored on bad input."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from rooftune.analysis import Analysis, analyze
from rooftune.errors import InvalidArgument, WorkloadError
from rooftune.platform import current_platform
from rooftune.store import Store
from rooftune.workload import load_workload

CNN = "tests.analysis.tiny_models:small_cnn"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.conftest import make_ceilings

    path = tmp_path_factory.mktemp("train") / "r.db"
    platform = current_platform()
    c = make_ceilings(platform)
    with Store(path) as s:
        s.save_ceilings(platform, c.to_dict(), quick=False, threads=c.threads)
    return path


@pytest.fixture(scope="module")
def trajectory(db: Path) -> list[Analysis]:
    return analyze(CNN, train=True, batch=[4, 8], threads=1, budget_s=0.4, db=str(db))


def test_a_training_step_is_analysed_phase_by_phase(trajectory: list[Analysis]) -> None:
    a = trajectory[0]
    assert a.train is not None and a.train["optimizer"] == "sgd" and a.batch == 4
    assert set(a.phases_s) == {"forward", "backward", "optimizer"} and all(t > 0 for t in a.phases_s.values())
    by_phase = {r["phase"]: r for r in a.by_phase()}
    assert by_phase["backward"]["flops"] > by_phase["forward"]["flops"] > 0  # backward: two products per forward one
    assert by_phase["optimizer"]["flops"] == 0 and by_phase["optimizer"]["bytes"] > 0
    assert math.isclose(sum(r["share"] for r in by_phase.values()), 1.0)
    update = [o for o in a.ops if o.name.startswith("optimizer.")]
    # the update: memory-bound ops of its own (or dispatch-bound, at this size)
    assert update and all(o.kind == "optimizer" and (o.bound.startswith("memory") or o.bound == "overhead")
                          for o in update)
    assert all(o.time_s >= 0 and o.lower_bound_s > 0 for o in a.ops)
    # the op sum against the step measured beside it: the figure the inference analysis reports too
    assert math.isfinite(a.accounting_ratio) and a.accounting_ratio > 0 and a.runs >= 1


def test_its_flops_are_flop_counter_mode_s_for_the_step(trajectory: list[Analysis]) -> None:
    wl = load_workload(CNN, train=True, batch=4)
    step = wl.train_step()
    with FlopCounterMode(display=False) as counter:
        step.step()
    assert trajectory[0].flops == counter.get_total_flops()


def test_the_trajectory_and_the_json_round_trip(trajectory: list[Analysis], db: Path) -> None:
    assert [a.batch for a in trajectory] == [4, 8]
    assert all(a.samples_per_s == a.batch / a.end_to_end_s for a in trajectory)
    d = trajectory[1].to_dict()
    assert d["train"]["optimizer"] == "sgd" and {r["phase"] for r in d["by_phase"]} == {"forward", "backward", "optimizer"}
    back = Analysis.from_dict(d)
    assert back.phases_s == trajectory[1].phases_s and back.train == trajectory[1].train
    with Store(db) as s:
        assert s.count("analyses") == 2


def test_a_module_trains_through_the_python_api(db: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    [a] = analyze(model, example_inputs=(torch.randn(16, 8),), train=True, threads=1, budget_s=0.3, db=str(db),
                  save=False)
    assert a.batch == 16 and a.phases_s and any(o.target == "aten.mm" and o.name.startswith("backward.") for o in a.ops)


def test_bad_input_is_refused_before_anything_is_stored(tmp_path: Path, db: Path) -> None:
    import shutil

    copy = tmp_path / "r.db"
    shutil.copy(db, copy)
    with Store(copy) as s:
        before = s.count("analyses")
    with pytest.raises(WorkloadError, match="cannot train at batch 1"):
        analyze(CNN, train=True, batch=1, db=str(copy))
    with pytest.raises(WorkloadError, match="not a scalar"):
        from rooftune.workload.training import TrainSpec

        analyze("tests.analysis.tiny_models:small_mlp", train=TrainSpec(loss="tests.workload.train_models:per_sample_loss"),
                batch=4, db=str(copy))
    with pytest.raises(InvalidArgument, match="cpu with --train"):
        analyze(CNN, train=True, device="cuda", db=str(copy))
    with Store(copy) as s:
        assert s.count("analyses") == before


class _Counting(nn.Module):
    """An MLP that counts its forward passes on real tensors."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch._subclasses.fake_tensor import FakeTensor

        self.calls += not isinstance(x, FakeTensor)
        return self.body(x)


def test_a_step_s_analysis_runs_the_capture_s_two_steps_and_the_timed_ones_alone(db: Path) -> None:
    """No forward pass to build the step, and no warm-up after the capture: with a budget that
    one pair of runs exhausts, the step runs four times (two captured, one plain, one timed op by op)."""
    model = _Counting()
    [a] = analyze(model, example_inputs=(torch.randn(16, 8),), train=True, threads=1, budget_s=1e-9, db=str(db),
                  save=False)
    assert a.runs == 1 and model.calls == 4

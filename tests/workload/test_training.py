"""The training step shared by --train workloads and the sweep's step pass."""

import pytest
import torch
from torch import nn

from rooftune.errors import InvalidArgument, WorkloadError
from rooftune.workload.training import TrainSpec, TrainStep, update_bytes


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def test_step_lowers_the_loss_and_updates_every_parameter():
    model = _mlp()
    before = [p.detach().clone() for p in model.parameters()]
    step = TrainStep(model, (torch.randn(32, 8, generator=torch.Generator().manual_seed(0)),))
    assert step.kind == "cross-entropy"
    losses = [step() for _ in range(20)]
    assert losses[-1] < losses[0]
    assert all(not torch.equal(a, b) for a, b in zip(before, step.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters())  # zero_grad after each update


def test_same_seed_same_training_and_impls_agree():
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(0))
    runs = []
    for impl in ("default", "foreach", "fused"):
        step = TrainStep(_mlp(), (x,), TrainSpec(impl=impl))
        for _ in range(3):
            step()
        runs.append(step.parameters())
    for other in runs[1:]:
        for a, b in zip(runs[0], other, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_regression_output_takes_mse_and_adamw():
    model = nn.Linear(8, 1)
    step = TrainStep(model, (torch.randn(4, 8),), TrainSpec(optimizer="adamw"))
    assert step.kind == "mse"
    step()


@pytest.mark.parametrize("kwargs, words", [
    ({"optimizer": "lbfgs"}, "optimizer"), ({"impl": "fast"}, "optimizer implementation"),
    ({"loss": "huber"}, "loss"), ({"lr": 0}, "lr"), ({"momentum": float("nan")}, "momentum"),
])
def test_bad_spec_is_refused_with_its_name(kwargs, words):
    with pytest.raises(InvalidArgument, match=words):
        TrainSpec(**kwargs)


def test_untrainable_batchnorm_and_non_scalar_loss_are_refused(tmp_path, monkeypatch):
    frozen = nn.Linear(4, 2).requires_grad_(False)
    with pytest.raises(WorkloadError, match="no trainable parameters"):
        TrainStep(frozen, (torch.randn(2, 4),))
    with pytest.raises(WorkloadError, match="BatchNorm .* batch 1"):
        TrainStep(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)), (torch.randn(1, 3, 8, 8),))
    (tmp_path / "myloss.py").write_text("def per_sample(out, target):\n    return (out - 0).abs().sum(1)\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(WorkloadError, match="not a scalar"):
        TrainStep(nn.Linear(4, 2), (torch.randn(3, 4),), TrainSpec(loss="myloss:per_sample"))


def test_a_loss_module_that_fails_on_import_is_one_line(tmp_path, monkeypatch):
    """Importing the user's module runs their code: a syntax error or an exception raised there is
    refused as the --loss it is, not raised through."""
    (tmp_path / "rt_broken_loss.py").write_text("def loss(out, target:\n    return 0\n")
    (tmp_path / "rt_raising_loss.py").write_text("raise RuntimeError('no GPU here')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    for spec, why in (("rt_broken_loss:loss", "SyntaxError"), ("rt_raising_loss:loss", "RuntimeError: no GPU here")):
        with pytest.raises(InvalidArgument, match=f"invalid loss '{spec}'.*{why}") as e:
            TrainStep(nn.Linear(4, 2), (torch.randn(3, 4),), TrainSpec(loss=spec))
        assert "\n" not in str(e.value)


def test_update_bytes_count_state_buffers():
    assert update_bytes(TrainSpec(), 100) == 500  # p, grad read, p written, momentum read+write
    assert update_bytes(TrainSpec(optimizer="adamw"), 100) == 700


class _Counted(nn.Module):
    """A BatchNorm classifier that counts its forward passes on real tensors."""

    def __init__(self, data_dependent: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))
        self.data_dependent = data_dependent
        self.real_calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch._subclasses.fake_tensor import FakeTensor

        self.real_calls += not isinstance(x, FakeTensor)
        if self.data_dependent:  # a shape that depends on the values: fake tensors cannot run it
            x = x + 0 * x[x > 0].sum()
        return self.body(x)


@pytest.mark.parametrize("data_dependent", [False, True])
def test_building_a_step_runs_no_forward_pass_where_fake_tensors_can(data_dependent):
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(0))
    model = _Counted(data_dependent)
    bn = model.body[1]
    mean = bn.running_mean.clone()
    step = TrainStep(model, (x,))
    # the shape of the output on fake tensors: no kernel ran, no running statistic moved
    assert model.real_calls == int(data_dependent)
    assert torch.equal(bn.running_mean, mean) != data_dependent
    assert step.kind == "cross-entropy" and tuple(step.target.shape) == (16,)
    loss = step()
    assert model.real_calls == 1 + int(data_dependent) and loss > 0

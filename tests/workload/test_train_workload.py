"""--train workloads: the Workload carries its TrainSpec, the step's graph (forward, backward,
optimizer) with FlopCounterMode's FLOPs, and the refusals of what cannot train."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from rooftune.costs import cost_of
from rooftune.errors import InvalidArgument, WorkloadError
from rooftune.workload import load_workload
from rooftune.workload.step_graph import PHASES, capture_step, step_flops
from rooftune.workload.training import (
    TRAIN_BATCH,
    TrainSpec,
    check_memory,
    memory_estimate,
    spec_from_options,
)

CNN = "tests.analysis.tiny_models:small_cnn"
MLP = "tests.analysis.tiny_models:small_mlp"


def test_a_training_workload_carries_its_spec_and_batch_32_by_default() -> None:
    wl = load_workload(CNN, train=True)
    assert wl.train == TrainSpec() and wl.batch == TRAIN_BATCH == 32
    assert load_workload(CNN, train=TrainSpec(optimizer="adamw"), batch=4).train.optimizer == "adamw"
    assert load_workload(CNN, train=True, batch=4).batch == 4
    assert load_workload(CNN).train is None and load_workload(CNN).batch == 1  # inference as before
    rnn = load_workload("gru", train=True, options={"hidden": 8, "seq_len": 3, "input_size": 4}, batch=2)
    assert rnn.train is not None and rnn.batch == 2 and rnn.train_step().kind == "mse"


def test_the_step_graph_has_every_phase_and_flop_counter_mode_s_flops() -> None:
    wl = load_workload(CNN, train=True, batch=4)
    graph, step = capture_step(wl)
    phases = {op.phase for op in graph.ops}
    assert phases == set(PHASES)
    costs = [cost_of(op) for op in graph.ops]
    # the graph's FLOPs are FlopCounterMode's over a step of the same model
    assert sum(c.flops for c in costs) == step_flops(step) > 0
    with FlopCounterMode(display=False) as counter:
        step.step()
    assert sum(c.flops for c in costs) == counter.get_total_flops()
    backward = [(op, c) for op, c in zip(graph.ops, costs, strict=True) if op.phase == "backward"]
    assert any(op.target == "aten.convolution_backward" and c.kind == "conv" and c.flops for op, c in backward)
    update = [c for op, c in zip(graph.ops, costs, strict=True) if op.phase == "optimizer"]
    assert update and all(c.kind == "optimizer" and c.flops == 0 and c.bytes > 0 for c in update)
    # a view moves nothing
    assert all(c.bytes == 0 for c in costs if c.kind == "view")
    durations = graph.run_timed(time.perf_counter)
    assert len(durations) == len(graph.ops) and all(d >= 0 for d in durations)


def test_the_update_s_ops_follow_the_optimizer_s_implementation() -> None:
    wl = load_workload(MLP, train=TrainSpec(optimizer="adamw", impl="foreach"), batch=4)
    graph, _ = capture_step(wl)
    targets = {op.target for op in graph.ops if op.phase == "optimizer"}
    assert any(t.startswith("aten._foreach_") for t in targets), targets
    # AdamW keeps two moments: its update moves more than SGD's momentum
    sgd, _ = capture_step(load_workload(MLP, train=True, batch=4))
    moved = {name: sum(cost_of(op).bytes for op in g.ops if op.phase == "optimizer")
             for name, g in (("adamw", graph), ("sgd", sgd))}
    assert moved["adamw"] > moved["sgd"]


def test_memory_estimate_counts_parameters_gradients_state_and_activations() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(32, 8)
    est = memory_estimate(model, (x,), TrainSpec())
    pbytes = sum(p.numel() * 4 for p in model.parameters())
    assert (est.parameters, est.gradients, est.optimizer_state) == (pbytes, pbytes, pbytes)
    assert est.activations >= (32 * 16 * 2 + 32 * 4) * 4  # linear, relu, linear outputs at least
    adamw = memory_estimate(model, (x,), TrainSpec(optimizer="adamw"))
    assert adamw.optimizer_state == 2 * pbytes
    with pytest.raises(WorkloadError, match=r"needs about .* to train, more than 80% of the 1 KiB available"):
        check_memory(model, (x,), TrainSpec(), "m", available=1024)


@pytest.mark.parametrize("model, kwargs, words", [
    ("tests.workload.train_models:frozen_mlp", {}, "has no trainable parameters"),
    (CNN, {"batch": 1}, "cannot train at batch 1"),
    (CNN, {"batch": 32}, r"needs about .* to train, more than 80% of the 1 MiB available: use a smaller --batch"),
])
def test_what_cannot_train_is_refused_in_one_line(model: str, kwargs: dict, words: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import rooftune.workload.training as training

    monkeypatch.setattr(training, "available_memory", lambda: 1 << 20)  # small_cnn at batch 32 needs ~6 MiB
    with pytest.raises(WorkloadError, match=words) as e:
        load_workload(model, train=True, **kwargs)
    assert "\n" not in str(e.value)


def test_a_loss_that_is_not_a_scalar_is_refused() -> None:
    wl = load_workload(MLP, train=TrainSpec(loss="tests.workload.train_models:per_sample_loss"), batch=4)
    with pytest.raises(WorkloadError, match="not a scalar"):
        wl.train_step()


def test_training_options_are_refused_without_train() -> None:
    assert spec_from_options(False) is None
    assert spec_from_options(True, "adamw", "mse") == TrainSpec(optimizer="adamw", loss="mse")
    with pytest.raises(InvalidArgument, match="optimizer 'adamw': only with --train"):
        spec_from_options(False, "adamw")
    with pytest.raises(InvalidArgument, match="train"):
        load_workload(CNN, train="yes")  # type: ignore[arg-type]


def test_a_tensorflow_model_is_refused_for_training_before_it_loads() -> None:
    for name in ("keras:MobileNetV2", "model.keras"):
        with pytest.raises(InvalidArgument, match="invalid train .*a PyTorch model"):
            load_workload(name, train=True)

"""tune(..., train=True): the training check beside the inference ones, the training space, a
training trial in its worker process, the refusals of inference-only arguments, and a study whose
trials are stored apart from the inference study of the same model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rooftune.bench import Policy
from rooftune.errors import InvalidArgument
from rooftune.platform import current_platform
from rooftune.runtimes import available_runtimes
from rooftune.store import Store
from rooftune.tuning import RunConfig, tune
from rooftune.tuning.space import TRAIN_BATCHES, search_space
from rooftune.tuning.verify import TRAIN_CHECK_STEPS, check_training, train_reference
from rooftune.workload import load_workload
from rooftune.workload.training import TrainSpec, TrainStep

CNN = "tests.analysis.tiny_models:small_cnn"
MLP = "tests.analysis.tiny_models:small_mlp"
FAST = Policy(number=1, warmup_s=0.05, budget_s=0.3, min_samples=6, max_samples=60)


def _step(spec: TrainSpec | None = None, autocast: torch.dtype | None = None) -> TrainStep:
    wl = load_workload(MLP, train=True, batch=8, check=False)
    return TrainStep(wl.module, wl.inputs, spec, autocast=autocast)


@pytest.fixture(scope="module")
def ref() -> dict:
    return train_reference(_step())


def test_an_fp32_configuration_trains_as_vanilla_does_and_a_wrong_one_fails(ref: dict) -> None:
    assert len(ref["losses"]) == TRAIN_CHECK_STEPS and ref["moved"] > 0
    same = check_training(_step(TrainSpec(impl="foreach")), "fp32", ref)
    assert same["ok"] and same["param_diff"] < 1e-3, same
    # another learning rate is another training: its parameters move elsewhere
    wrong = check_training(_step(TrainSpec(lr=0.02)), "fp32", ref)
    assert not wrong["ok"] and "differ from vanilla's" in wrong["why"] and wrong["param_diff"] > 0.5


def test_a_reduced_precision_is_checked_by_its_loss(ref: dict) -> None:
    bf16 = check_training(_step(autocast=torch.bfloat16), "bf16", ref)
    assert bf16["ok"] and "losses within" in bf16["rule"] and "param_diff" not in bf16
    far = {**ref, "losses": [x * 2 for x in ref["losses"]]}
    assert not check_training(_step(autocast=torch.bfloat16), "bf16", far)["ok"]


def test_the_training_space_holds_the_runtimes_that_train_and_their_optimizer() -> None:
    available, _ = available_runtimes()
    space = search_space(current_platform(), available, ("fp32", "bf16"), objective="throughput", train=True)
    assert set(space["runtime"]) <= {"eager", "compile"} and "eager" in space["runtime"]
    assert space["runtime_options"]["eager"]["optimizer"] == ("default", "foreach", "fused")
    assert space["batch"] == list(TRAIN_BATCHES) and space["instances"] == [1, 1]
    fixed = search_space(current_platform(), available, ("fp32",), objective="latency", batch=8, train=True)
    assert fixed["batch"] == [8]
    inference = search_space(current_platform(), available, ("fp32",))
    assert "optimizer" not in inference["runtime_options"]["eager"]  # inference studies are as before


@pytest.mark.parametrize("kwargs, words", [
    ({"runtimes": ["onnxruntime"]}, "runtime 'onnxruntime'"),
    ({"precisions": ["fp32", "int8"]}, "int8 is post-training quantization"),
    ({"validate": "tests.tuning.validators:always"}, "--validate"),
    ({"calibration_size": 8}, "--calibration"),
])
def test_inference_only_arguments_are_refused_with_train(tmp_path: Path, kwargs: dict, words: str) -> None:
    db = tmp_path / "t.db"
    with pytest.raises(InvalidArgument, match=words) as e:
        tune(CNN, train=True, store=str(db), **kwargs)
    assert "--train" in str(e.value) and "\n" not in str(e.value)
    assert not db.exists()


def test_a_module_object_is_refused_with_train(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="module:callable with --train"):
        tune(torch.nn.Linear(4, 2), example_inputs=(torch.randn(2, 4),), train=True, store=str(tmp_path / "t.db"))


def test_a_training_trial_runs_checked_in_its_own_process(tmp_path: Path) -> None:
    from rooftune.tuning.study import Setup, _evaluate

    setup = Setup({"model": MLP, "inputs": None, "options": {}, "train": TrainSpec().as_dict()}, tmp_path)
    ok = _evaluate(RunConfig(runtime="eager", intra_threads=1, batch=8, runtime_options={"optimizer": "fused"}),
                   setup, FAST)
    assert ok.ok and ok.verify["ok"] and ok.verify["param_diff"] < 1e-3, ok.error
    assert ok.throughput == pytest.approx(8 / ok.latency_s)  # samples per second of training
    refused = _evaluate(RunConfig(runtime="torchscript", intra_threads=1, batch=8), setup, FAST)
    assert not refused.ok and "does not run a training step" in refused.error


def test_training_trials_are_stored_apart_from_inference_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The study's key tells a training study from an inference one; every training configuration
    names its optimizer's implementation; the guideline is the training one."""
    import rooftune.tuning.compare as final
    import rooftune.tuning.study as study
    from rooftune.tuning.study import TrialResult

    seen: list[RunConfig] = []

    def fake_evaluate(cfg, setup, policy, prepare_timeout_s):  # type: ignore[no-untyped-def]
        seen.append(cfg)
        return TrialResult(cfg, True, latency_s=0.01, throughput=cfg.batch / 0.01, verify={"ok": True})

    def fake_interleaved(a, b, setup, objective, policy, pairs=None):  # type: ignore[no-untyped-def]
        return {"ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0, "pairs": 0}

    monkeypatch.setattr(study, "_evaluate", fake_evaluate)
    monkeypatch.setattr(final, "interleaved", fake_interleaved)
    db = str(tmp_path / "t.db")
    r = tune(CNN, train=True, guidelines_only=True, precisions=("fp32",), store=db, budget_s=60)
    assert r.objective == "throughput" and r.batch == 32 and r.workload["train"] == TrainSpec().as_dict()
    assert r.guideline.config.runtime == "eager" and r.guideline.config.option("optimizer") == "fused"
    assert all("optimizer" in c.runtime_options and c.instances == 1 for c in seen)
    assert "vanilla" in r.baselines
    n = len(seen)
    tune(CNN, guidelines_only=True, precisions=("fp32",), runtimes=["eager"], store=db, budget_s=60)
    assert len(seen) > n and all("optimizer" not in c.runtime_options for c in seen[n:])  # not resumed from training
    from sqlalchemy import select

    from rooftune.store.schema import TrialRow

    with Store(db) as s, s.transaction() as t:
        keys = set(t.scalars(select(TrialRow.study_key)).all())
    assert len(keys) == 2


def test_a_training_study_seeds_the_guideline_in_each_reduced_precision_as_autocast() -> None:
    from rooftune.tuning.guidelines import train_precision_seeds

    guide = RunConfig(runtime="eager", intra_threads=2, runtime_options={"optimizer": "fused"}, name="guideline")
    [seed] = train_precision_seeds(guide, ("fp32", "bf16"))
    assert (seed.runtime, seed.precision, seed.name, seed.option("optimizer")) == ("eager", "bf16", "guideline bf16",
                                                                                   "fused")
    assert train_precision_seeds(guide, ("fp32",)) == []


def test_a_configuration_checked_by_its_trial_is_not_checked_again_in_a_later_process(tmp_path: Path) -> None:
    """A final comparison's process of a configuration whose trial passed the check runs one
    untimed step instead of the checked ones; one whose trial failed, or that had none, is checked."""
    from rooftune.tuning.study import Setup, _evaluate

    setup = Setup({"model": MLP, "inputs": None, "options": {}, "train": TrainSpec().as_dict()}, tmp_path)
    cfg = RunConfig(runtime="eager", intra_threads=1, batch=8, runtime_options={"optimizer": "default"})
    assert cfg.key() not in setup.verified
    r = _evaluate(cfg, setup, FAST)
    assert r.ok and "param_diff" in r.verify and cfg.key() in setup.verified, r.error
    with setup.group(cfg) as g:
        info = g.info
    assert info["verify"]["ok"] and "param_diff" not in info["verify"] and "trial" in info["verify"]["rule"]
    # what a later process repeats (the step built, its first step) counts in its start
    assert 0 < info["repeat_s"] <= info["prepare_s"] and info["start_s"] >= info["repeat_s"]
    other = RunConfig(runtime="eager", intra_threads=1, batch=8, runtime_options={"optimizer": "foreach"})
    with setup.group(other) as g:
        assert "param_diff" in g.info["verify"]
    # a trial that fails its check leaves its configuration unchecked for every later process
    reference, _ = setup.files(8)
    ref = torch.load(reference)
    torch.save({**ref, "losses": [x * 2 for x in ref["losses"]]}, reference)
    wrong = _evaluate(other, setup, FAST)
    assert not wrong.ok and "wrong output" in wrong.error and other.key() not in setup.verified


def _timed_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prepare_s: float) -> list[tuple[RunConfig, float]]:
    """A training study whose trials (stand-ins) each took ``prepare_s`` to prepare: the
    configurations it evaluated, with the preparation time each was given."""
    import rooftune.tuning.compare as final
    import rooftune.tuning.study as study
    from rooftune.tuning.study import TrialResult

    seen: list[tuple[RunConfig, float]] = []

    def fake_evaluate(cfg, setup, policy, prepare_timeout_s):  # type: ignore[no-untyped-def]
        seen.append((cfg, prepare_timeout_s))
        return TrialResult(cfg, True, latency_s=0.01 * (1 + len(seen) % 3), throughput=cfg.batch / 0.01,
                           verify={"ok": True}, prepare_s=prepare_s, start_s=1.0)

    def fake_interleaved(a, b, setup, objective, policy, pairs=None):  # type: ignore[no-untyped-def]
        return {"ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0, "pairs": 0}

    monkeypatch.setattr(study, "_evaluate", fake_evaluate)
    monkeypatch.setattr(final, "interleaved", fake_interleaved)
    tune(CNN, train=True, precisions=("fp32",), runtimes=["eager"], store=str(tmp_path / f"p{prepare_s}.db"),
         budget_s=2000, trials=2)
    return seen


def test_a_training_trial_is_given_the_time_its_step_takes_to_prepare(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from rooftune.tuning.study import PREPARE_TIMEOUT_S, TRAIN_PREPARE_MARGIN

    seen = _timed_study(tmp_path, monkeypatch, prepare_s=150.0)
    searched = [timeout for cfg, timeout in seen if cfg.name.startswith("trial ")]
    assert searched and TRAIN_PREPARE_MARGIN * 150.0 > PREPARE_TIMEOUT_S
    assert all(t == TRAIN_PREPARE_MARGIN * 150.0 for t in searched)
    # no trial starts where the budget's share left is shorter than the study's preparations
    seen = _timed_study(tmp_path, monkeypatch, prepare_s=5000.0)
    assert seen and not any(cfg.name.startswith("trial ") for cfg, _ in seen)

"""A tuning study's spec: checked once on construction, in the words tune() and optimize() give,
frozen, and the same when rebuilt from its own fields; one store parameter on the tuning path."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rooftune.errors import InvalidArgument
from rooftune.store import Store, open_store
from rooftune.tuning import Study, TuneSpec
from rooftune.tuning.cluster import check_cluster_arguments


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"objective": "speed"}, "invalid objective 'speed': allowed latency, throughput"),
    ({"budget_s": 0}, "invalid budget 0: allowed a positive number of seconds"),
    ({"trials": -1}, "invalid trials -1: allowed an integer >= 0"),
    ({"trials": 2, "guidelines_only": True}, "invalid trials 2: allowed only without guidelines-only"),
    ({"compare_pairs": 0}, "invalid compare pairs 0: allowed an integer >= 1"),
    ({"precisions": ()}, "invalid precisions (): allowed at least one of fp32, bf16, int8"),
    ({"runtimes": []}, "invalid runtimes (): allowed at least one runtime"),
    ({"trial_policy": {"budget_s": 1}}, "invalid trial_policy"),
    ({"batch": 0}, "invalid batch 0"),
    ({"inputs": "1x3x8x8"}, "invalid inputs '1x3x8x8'"),
    ({"validate": "nocolon"}, "invalid --validate 'nocolon': allowed module:function"),
    ({"train": True, "runtimes": ["onnxruntime"]}, "invalid runtime 'onnxruntime'"),
    ({"train": True, "precisions": ["int8"]}, "invalid precision 'int8'"),
    ({"train": True, "calibration_size": 8}, "invalid --calibration 8: allowed only without --train"),
    ({"train": "yes"}, "invalid train 'yes'"),
])
def test_a_spec_refuses_what_a_study_cannot_run(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        TuneSpec(**kwargs)  # type: ignore[arg-type]
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_a_spec_is_checked_once_and_kept_in_its_checked_form(tmp_path: Path) -> None:
    spec = TuneSpec(precisions=["fp32"], runtimes="eager", inputs=[[1, 4]], trials=3, validate="json:dumps",
                    train=None)
    assert spec.objective == "latency" and spec.precisions == ("fp32",) and spec.runtimes == ("eager",)
    assert spec.inputs == [(1, 4)] and spec.validate == "json:dumps"
    assert dataclasses.replace(spec) == spec  # built again from its own fields: the same spec
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.budget_s = 1.0  # type: ignore[misc]
    trained = TuneSpec(train=True)
    assert trained.objective == "throughput" and trained.train is not None
    assert dataclasses.replace(trained) == trained


def test_tune_and_optimize_refuse_the_same_argument_in_the_same_words(tmp_path: Path) -> None:
    import rooftune

    said = []
    for run in (lambda: rooftune.tune("lstm", objective="speed", store=str(tmp_path / "t.db")),
                lambda: rooftune.optimize("lstm", objective="speed", out=tmp_path / "out", store=str(tmp_path / "t.db")),
                lambda: TuneSpec(objective="speed")):
        with pytest.raises(InvalidArgument) as info:
            run()
        said.append(str(info.value))
    assert len(set(said)) == 1 and not (tmp_path / "out").exists()


def test_a_model_object_is_refused_for_a_training_study_before_anything_is_set_up() -> None:
    import torch

    with pytest.raises(InvalidArgument, match="invalid model 'an nn.Module': a model name or module:callable "
                                              "with --train"):
        Study(torch.nn.Linear(2, 2), TuneSpec(train=True))


def test_a_study_not_prepared_closes_without_a_folder_or_a_store() -> None:
    study = Study("lstm", TuneSpec(precisions=("fp32",), runtimes=("eager",)))
    study.close()  # nothing was made: nothing to remove or close


def test_open_store_gives_a_store_back_as_is_and_opens_a_path(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as given:
        assert open_store(given) is given
    opened = open_store(tmp_path / "b.db")
    try:
        assert isinstance(opened, Store) and (tmp_path / "b.db").exists()
    finally:
        opened.close()


def test_a_cluster_study_takes_a_store_by_url_or_path_and_refuses_a_store_object(tmp_path: Path) -> None:
    for store in (None, "sqlite:///x.db", tmp_path / "x.db"):
        assert check_cluster_arguments("resnet18", example_inputs=None, example_kwargs=None, store=store) == "resnet18"
    with Store(tmp_path / "s.db") as s, pytest.raises(InvalidArgument, match="invalid store 'Store': allowed with "
                                                                              "--cluster: a database URL"):
        check_cluster_arguments("resnet18", example_inputs=None, example_kwargs=None, store=s)

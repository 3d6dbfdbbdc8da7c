"""A study with the user's data: int8 calibrated on its calibration part, every reduced precision
judged by its metric on the evaluation part against the budget, the figures in the result, the
table and best.json; without data, the answer says it was checked on random inputs only."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rooftune.bench import Policy
from rooftune.errors import InvalidArgument
from rooftune.runtimes.quantize import int8_missing
from rooftune.tuning import tune
from rooftune.tuning.skips import data_notes
from rooftune.tuning.table import tune_columns, tune_rows
from rooftune.tuning.verify import check_on_data
from rooftune.workload.data import DataSpec
from rooftune.workload.metrics import evaluate
from tests.test_cli import assert_one_line_error, rooftune_in_process
from tests.workload import digits

MODEL = "tests.workload.digits:cnn"
FAST = Policy(number=1, warmup_s=0.05, budget_s=0.3, min_samples=6, max_samples=60)


class _Prepared:
    """Stands for a prepared configuration whose outputs on the data are ``scale`` x fp32's, with
    the first ``wrong`` samples' top-1 moved to another class."""

    def __init__(self, wrong: int) -> None:
        self.wrong = wrong

    def output_for(self, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        x = inputs[0]
        out = torch.nn.functional.one_hot(x[:, 0].long() % 4, 4).float()
        moved = x[:, 1] < self.wrong
        out[moved] = out[moved].roll(1, dims=1)
        return (out,)


def _evaluation(n: int = 100, max_drop: float = 1.0) -> dict:
    xs = torch.stack([torch.arange(n).float() % 4, torch.arange(n).float()], 1)
    labels = torch.arange(n) % 4
    ref = torch.nn.functional.one_hot(labels, 4).float()
    return {"batches": [(xs[i:i + 10],) for i in range(0, n, 10)], "n": n, "reference": ref, "labels": labels,
            "metric": "accuracy", "max_drop": max_drop, "seed": 0,
            "fp32": evaluate(ref, ref, labels, "accuracy", max_drop)}


def test_a_reduced_precision_is_accepted_within_the_budget_and_refused_over_it_whatever_the_guard_said() -> None:
    guard_failed = {"ok": False, "rule": "mean cosine >= 0.99", "why": "fails", "cosine": 0.9}
    ok = check_on_data(_Prepared(wrong=1), "int8", guard_failed, _evaluation())
    assert ok["ok"] and ok["accuracy"]["drop"] == pytest.approx(1.0) and ok["guard"]["ok"] is False
    over = check_on_data(_Prepared(wrong=5), "int8", {**guard_failed, "ok": True}, _evaluation())
    assert not over["ok"] and over["why"].startswith("over the budget: accuracy 95.00%")
    assert over["accuracy"]["drop_interval"][0] > 0
    # fp32 passed the fp32 guard against the reference: it scores fp32's metric, not measured again
    fp32 = check_on_data(None, "fp32", {"ok": True, "cosine": 1.0}, _evaluation())
    assert fp32["ok"] and fp32["accuracy"]["value"] == 100.0 and "fp32 guard" in fp32["accuracy"]["by"]
    # an output of another shape fails as before, the data not consulted
    shape = check_on_data(None, "int8", {"ok": False, "why": "shape (1, 3) != (1, 4)"}, _evaluation())
    assert not shape["ok"] and "accuracy" not in shape


def test_without_data_a_reduced_precision_answer_says_it_was_checked_on_random_inputs_only() -> None:
    best = SimpleNamespace(ok=True, precision="bf16", verify={"cosine": 0.999})
    assert "checked on random inputs only" in data_notes(best, with_data=False, train=False)[0]
    assert data_notes(SimpleNamespace(ok=True, precision="fp32", verify={}), False, False) == []
    acc = _evaluation()["fp32"]
    assert "on the evaluation part of your data: accuracy 100.00%" in data_notes(
        SimpleNamespace(ok=True, precision="int8", verify={"accuracy": acc}), True, False)[0]


def test_data_is_refused_beside_what_it_replaces(tmp_path: Path) -> None:
    npz = digits.write_npz(tmp_path / "d.npz")
    for kw, match in [({"train": True}, "--data .*allowed only without --train"),
                      ({"validate": "x:y"}, "--validate 'x:y': allowed only without --data"),
                      ({"cluster": "127.0.0.1:1"}, "allowed only without --cluster")]:
        with pytest.raises(InvalidArgument, match=match):
            tune(MODEL, data=str(npz), store=str(tmp_path / "s.db"), **kw)
    np_labels = tmp_path / "far.npz"
    import numpy as np

    np.savez(np_labels, inputs=np.zeros((30, 1, 8, 8), np.float32), labels=np.full(30, 12))
    with pytest.raises(InvalidArgument, match="labels span 12..12; the model's output has 10 classes"):
        tune(MODEL, data=str(np_labels), runtimes=["onnxruntime"], store=str(tmp_path / "s.db"))


def test_cli_refuses_bad_data_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    assert_one_line_error(rooftune_in_process("tune", MODEL, "--data", str(tmp_path / "none"), db=db),
                          "--data", "no such file or folder")
    assert_one_line_error(rooftune_in_process("optimize", MODEL, "--max-drop", "2", "--out", str(tmp_path / "o"), db=db),
                          "--max-drop 2.0: allowed only with --data")
    assert_one_line_error(rooftune_in_process("tune", MODEL, "--data", "x.npz", "--metric", "f1", db=db),
                          "--metric 'f1': allowed accuracy, agreement or MODULE:CALLABLE")
    assert not (tmp_path / "o").exists()


def test_a_study_on_the_users_data_judges_int8_by_its_accuracy_there(tmp_path: Path) -> None:
    if int8_missing("onnxruntime"):
        pytest.skip(int8_missing("onnxruntime"))
    npz = digits.write_npz(tmp_path / "d.npz")
    save = tmp_path / "best.json"
    # the budget only caps the seeds after the fixed configurations: a large one keeps the int8
    # seed from being dropped for time on a loaded host
    r = tune(MODEL, runtimes=["onnxruntime"], precisions=("fp32", "int8"), guidelines_only=True, budget_s=600,
             store=str(tmp_path / "s.db"), save=save, data=DataSpec(str(npz), max_drop=2.0, calibration=32))
    int8 = [t for t in r.trials if t.config.precision == "int8"]
    assert int8 and all("accuracy" in t.verify for t in int8 if t.ok or "over the budget" in t.error)
    judged = next(t for t in int8 if "accuracy" in t.verify)
    acc = judged.verify["accuracy"]
    assert acc["metric"] == "accuracy" and acc["samples"] == digits.HELD_OUT - 32 and acc["max_drop"] == 2.0
    assert acc["fp32"] == pytest.approx(digits.accuracy(digits.cnn()[0]), abs=3)  # the model's own held-out figure
    assert acc["interval"][0] <= acc["value"] <= acc["interval"][1]
    assert judged.ok == (acc["drop"] <= 2.0)
    assert any(n.startswith("data: 32 calibration and 368 evaluation samples") for n in r.notes)
    fp32 = next(t for t in r.trials if t.ok and t.config.precision == "fp32")
    assert fp32.verify["accuracy"]["value"] == acc["fp32"]
    cols = tune_columns(r)
    assert cols[3] == "accuracy (95% CI)" and all(len(row) == len(cols) for row in tune_rows(r))
    saved = json.loads(save.read_text())
    assert saved["verify"]["accuracy"]["metric"] == "accuracy"


# a study of every baseline and seed on two runtimes, each in its own processes: beside other
# work on 2 cores it takes minutes
@pytest.mark.timeout(1200)
def test_a_study_tries_the_mixed_set_where_uniform_int8_breaks_the_budget(tmp_path: Path) -> None:
    """The model built to be sensitive: its output layer alone in int8 breaks the metric. The
    sensitivity pass keeps that layer at higher precision, the study tries the mixed set beside
    uniform int8 on both runtimes' quantizers, and the mixed set passes where uniform int8 fails;
    the quantizers' own answers on the same data run beside them as peers: ONNX Runtime's
    defaults, and NNCF's accuracy control, which reverts that layer itself."""
    missing = int8_missing("onnxruntime") or int8_missing("openvino")
    if missing:
        pytest.skip(missing)
    npz = digits.write_npz(tmp_path / "d.npz")
    r = tune("tests.workload.digits:sensitive", runtimes=["onnxruntime", "openvino"], precisions=("fp32", "int8"),
             guidelines_only=True, budget_s=600, store=str(tmp_path / "s.db"), trial_policy=FAST, compare_policy=FAST,
             compare_pairs=1, data=DataSpec(str(npz), max_drop=2.0, calibration=32))
    s = r.sensitivity
    assert s is not None and s["keep"] == ["out"] and s["layers"][0]["name"] == "out"
    assert s["layers"][0]["drop"] > 2.0 >= s["mixed_drop"] and s["uniform_drop"] > 2.0
    uniform = {t.config.runtime: t for t in r.trials if t.config.precision == "int8" and not t.config.keep}
    mixed = {t.config.runtime: t for t in r.trials if t.config.keep}
    assert set(uniform) == set(mixed) == {"onnxruntime", "openvino"}
    for rt in ("onnxruntime", "openvino"):
        assert mixed[rt].config.keep == ("out",) and "int8 mixed" in mixed[rt].config.name
        assert not uniform[rt].ok and "over the budget" in uniform[rt].error, rt
        assert mixed[rt].ok and mixed[rt].verify["accuracy"]["drop"] <= 2.0, (rt, mixed[rt].error)
    assert any(n.startswith("mixed int8: 1 of 2 layers kept at higher precision (out;") for n in r.notes)
    ort, nncf = r.baselines["onnxruntime-int8-default"], r.baselines["nncf-accuracy-control"]
    assert "accuracy" in ort.verify and not ort.ok  # its defaults quantize the output layer too
    assert nncf.ok and nncf.verify["accuracy"]["drop"] <= 2.0, nncf.error
    heads = r.headlines()
    assert heads["best_quantizing_peer"]["peer"] == "nncf-accuracy-control"
    assert heads["best_peer_as_shipped"]["peer"] not in ("onnxruntime-int8-default", "nncf-accuracy-control")


def test_an_int8_answer_loaded_again_calibrates_on_the_users_data_it_was_judged_on(tmp_path: Path) -> None:
    """best.json of an int8 answer judged on the user's data records that data: a runtime that
    quantizes again when loaded (PyTorch's) calibrates on the same calibration part, not on
    random inputs."""
    from rooftune.runconfig import RunConfig
    from rooftune.tuning.deploy import calibration_for
    from rooftune.tuning.result import TrialResult, save_config
    from rooftune.workload.data import load_samples, split

    spec = DataSpec(str(digits.write_npz(tmp_path / "d.npz")), calibration=8)
    trial = TrialResult(RunConfig(runtime="eager", precision="int8"), True)
    saved = json.loads(save_config(trial, tmp_path / "best.json", data_spec=spec.as_dict()).read_text())
    assert saved["data"]["data"] == spec.data
    example = digits.cnn()[1]
    got = calibration_for(RunConfig(runtime="eager", precision="int8"), saved, example)
    want = split(load_samples(spec, example), spec).calibration.inputs
    assert len(got) == 8 and all(torch.equal(g[0][0], w[0]) for g, w in zip(got, want, strict=True))


def test_a_data_record_in_best_json_that_is_not_rooftunes_is_refused_in_one_line() -> None:
    from rooftune.runconfig import RunConfig
    from rooftune.tuning.deploy import calibration_for

    example = digits.cnn()[1]
    for junk in ({}, [], "x", {"metric": "accuracy"}):
        with pytest.raises(InvalidArgument, match="allowed the data record rooftune tune --save writes"):
            calibration_for(RunConfig(runtime="eager", precision="int8"), {"data": junk}, example)
    with pytest.raises(InvalidArgument, match="--data"):
        calibration_for(RunConfig(runtime="eager", precision="int8"), {"data": {"data": "/no/such.npz"}}, example)

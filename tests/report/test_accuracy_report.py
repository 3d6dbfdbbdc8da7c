"""With the user's data, the report and the tune command show each configuration's metric against
its latency (the Pareto figure) and the int8 sensitivity per layer with why each kept layer stays
at higher precision; a study without data shows neither."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rooftune.pipeline import STEPS, OptimizeResult, Step
from rooftune.report.html import write_report
from rooftune.report.tuning_figures import pareto_points, plot_accuracy_pareto
from rooftune.runconfig import RunConfig
from rooftune.tuning.result import TrialResult, TuneResult

FP32, BUDGET = 90.0, 1.0


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """The printed tables wide enough for whole cells: a narrow console (COLUMNS=80 in pytest's
    workers) folds a cell onto more lines, and these tests read a cell's text whole."""
    from rooftune.cli import printing

    monkeypatch.setattr(printing.out, "width", 250)


def _acc(value: float, half: float = 0.8) -> dict[str, Any]:
    """An accuracy figure as rooftune.workload.metrics.evaluate gives it."""
    drop = FP32 - value
    return {"metric": "accuracy", "value": value, "interval": [value - half, value + half], "fp32": FP32,
            "fp32_interval": [FP32 - 0.8, FP32 + 0.8], "drop": drop, "drop_interval": [drop - 0.3, drop + 0.3],
            "max_drop": BUDGET, "samples": 200, "seed": 0, "resamples": 1000, "unit": "%", "ok": drop <= BUDGET,
            "rule": f"accuracy on 200 evaluation samples within {BUDGET:g} points of fp32's"}


def _trial(config: RunConfig, latency_ms: float, value: float | None) -> TrialResult:
    verify = {"ok": True, "cosine": 0.999, "top1": 1.0}
    if value is None:
        return TrialResult(config, True, latency_s=latency_ms / 1e3, p90_s=latency_ms / 1e3, throughput=1e3 / latency_ms,
                           verify=verify)
    acc = _acc(value)
    if not acc["ok"]:  # refused on the data before it was timed
        return TrialResult(config, False, error="over the budget", verify={**verify, "ok": False, "accuracy": acc})
    return TrialResult(config, True, latency_s=latency_ms / 1e3, p90_s=latency_ms / 1e3, throughput=1e3 / latency_ms,
                       verify={**verify, "accuracy": acc})


def _sensitivity(names: list[str]) -> dict[str, Any]:
    """A sensitivity pass (Sensitivity.to_dict()) whose first layer alone breaks the budget and whose
    second stays at higher precision by its roofline position; the rest are int8."""
    layers = [{"name": names[0], "kind": "linear", "drop": 5.3, "drop_interval": [4.1, 6.2], "time_s": 1e-4,
               "bound": "compute", "int8_gain": 2.5, "keep": "int8"},
              {"name": names[1], "kind": "conv2d", "drop": 0.4, "drop_interval": [0.0, 0.9], "time_s": 2e-5,
               "bound": "overhead", "int8_gain": None, "keep": "kept: dispatch-bound (its time is the call, not the "
                                                           "arithmetic)"}]
    layers += [{"name": n, "kind": "conv2d", "drop": 0.1 / (i + 1), "drop_interval": [-0.2, 0.3], "time_s": 3e-4,
                "bound": "compute", "int8_gain": 3.0, "keep": "int8"} for i, n in enumerate(names[2:])]
    return {"metric": "accuracy", "max_drop": BUDGET, "samples": 200, "layers": layers, "uniform_drop": 5.6,
            "mixed_drop": 0.3, "kept": [names[0]], "keep": [names[1], names[0]], "seconds": 1.5,
            "notes": ["simulated in PyTorch on 200 evaluation samples (of 200); the runtimes' own quantizers decide "
                      "the real figures"]}


def _tuned(with_data: bool = True, layers: list[str] | None = None) -> TuneResult:
    def val(x: float) -> float | None:  # the metric on the user's data, where the study had some
        return x if with_data else None

    vanilla = _trial(RunConfig(set_threads=False, name="vanilla"), 10.0, val(FP32))
    nncf = _trial(RunConfig(runtime="openvino", precision="int8", name="nncf-accuracy-control"), 4.0, val(89.2))
    guide = _trial(RunConfig(runtime="onnxruntime", intra_threads=2, name="guideline"), 8.0, val(FP32))
    bf16 = _trial(RunConfig(runtime="onnxruntime", intra_threads=2, precision="bf16", name="guideline bf16"), 5.0,
                  val(89.5))
    int8 = _trial(RunConfig(runtime="onnxruntime", intra_threads=2, precision="int8", name="guideline int8"), 3.0,
                  val(85.0))
    mixed = _trial(RunConfig(runtime="onnxruntime", intra_threads=2, precision="int8", keep=("out",),
                             name="guideline int8 mixed"), 3.5, val(89.3))
    searched = _trial(RunConfig(runtime="onnxruntime", intra_threads=1, name="trial 0"), 9.0, val(FP32))
    best = mixed if with_data else guide
    sp = {"vanilla": {"ratio": 2.9, "ci_low": 2.8, "ci_high": 3.0, "pairs": 10}}
    return TuneResult(model="m", objective="latency", batch=1, best=best, guideline=guide, guideline_reasons=(),
                      baselines={"vanilla": vanilla, "nncf-accuracy-control": nncf}, speedup=sp,
                      trials=(vanilla, nncf, guide, bf16, int8, mixed, searched), notes=(), duration_s=60.0,
                      sensitivity=_sensitivity(layers or ["out", "conv1", "fc"]) if with_data else None)


def test_the_pareto_figure_has_a_point_per_timed_configuration_and_its_front(tmp_path: Path) -> None:
    points = {p.label: p for p in pareto_points(_tuned())}
    # uniform int8, refused on the data before it was timed, has no latency to stand at
    assert sorted(points) == ["guideline", "guideline bf16", "guideline int8 mixed", "nncf-accuracy-control",
                              "trial 0", "vanilla"]
    assert {n: p.kind for n, p in points.items()} == {
        "vanilla": "peer", "nncf-accuracy-control": "peer", "guideline": "fp32", "guideline bf16": "bf16",
        "guideline int8 mixed": "int8 mixed", "trial 0": "fp32"}
    # the mixed set beats the int8 peer on both counts; vanilla and the searched trial are slower at fp32's metric
    assert sorted(n for n, p in points.items() if p.front) == ["guideline", "guideline bf16", "guideline int8 mixed"]
    mixed = points["guideline int8 mixed"]
    assert mixed.best and (mixed.latency_ms, mixed.low, mixed.high) == pytest.approx((3.5, 88.5, 90.1))
    out = plot_accuracy_pareto(_tuned(), tmp_path / "pareto.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _report(tmp_path: Path, tune: TuneResult) -> str:
    steps = {s: Step(s, "skipped") for s in STEPS}
    steps["tune"] = Step("tune", "ok", 60.0)
    r = OptimizeResult(model="m", batch=1, objective="latency", budget_s=120.0, out=tmp_path, steps=steps, tune=tune)
    text = write_report(r).read_text()
    assert ("figure accuracy_pareto" in r.files) == ('alt="The metric on the evaluation part' in text)
    return text


def test_the_report_shows_the_pareto_figure_and_why_each_layer_stays_at_higher_precision(tmp_path: Path) -> None:
    text = _report(tmp_path, _tuned(layers=["out<b>", "conv1", "fc"]))
    assert (tmp_path / "figures" / "accuracy_pareto.png").is_file()
    assert "accuracy_pareto.png" in text and 'alt="The metric on the evaluation part' in text
    assert "int8 sensitivity per layer" in text
    # the layer kept for the budget, by its escaped name, and the one kept by its roofline position
    row = text[text.index("<td>out&lt;b&gt;</td>"):]
    row = row[:row.index("</tr>")]
    assert "+5.30 [+4.10, +6.20]" in row and "2.50x" in row and "kept for the budget of 1" in row
    assert "kept: dispatch-bound (its time is the call, not the arithmetic)" in text
    assert "out<b>" not in text
    assert "uniform int8 (simulated): drop +5.60" in text and "drop +0.30" in text
    assert "note: simulated in PyTorch on 200 evaluation samples" in text


def test_a_study_without_data_has_neither_figure_nor_ranking(tmp_path: Path) -> None:
    tune = _tuned(with_data=False)
    assert pareto_points(tune) == []
    text = _report(tmp_path, tune)
    assert "accuracy_pareto" not in text and not (tmp_path / "figures" / "accuracy_pareto.png").exists()
    assert "int8 sensitivity per layer" not in text


def test_tune_prints_a_short_ranking_naming_every_kept_layer(capsys: pytest.CaptureFixture[str]) -> None:
    from rooftune.cli.printing import SENSITIVITY_TOP
    from rooftune.cli.tune import _print_tune

    # names Rich would read as markup; the layer kept by its roofline position ranks below the top
    names = ["head[/x]", *[f"[bold]c{i}" for i in range(SENSITIVITY_TOP + 4)]]
    r = _tuned(layers=names)
    s = r.sensitivity
    assert s is not None
    s["layers"].append(s["layers"].pop(1))  # the dispatch-bound layer, now last in the ranking
    _print_tune(r)
    printed = capsys.readouterr().out
    assert "int8 sensitivity per layer" in printed and "head[/x]" in printed
    assert "kept for the budget of 1" in printed and "kept: dispatch-bound" in printed
    assert "[bold]c1" in printed and "[bold]c12" not in printed  # the top ones, and every kept one
    left = len(names) - SENSITIVITY_TOP - 1
    assert f"and {left} less sensitive layers, in int8 (the whole ranking: --json)" in printed
    assert "uniform int8 (simulated): drop +5.60" in printed


def test_tune_without_data_prints_no_ranking(capsys: pytest.CaptureFixture[str]) -> None:
    from rooftune.cli.tune import _print_tune

    _print_tune(_tuned(with_data=False))
    assert "sensitivity" not in capsys.readouterr().out


def test_analyze_and_a_stored_study_give_a_layer_the_same_row() -> None:
    """`rooftune analyze --data` renders its Sensitivity, a study keeps its dictionary (read back
    from JSON, intervals as lists): one table for both."""
    import json

    from rooftune.analysis.sensitivity import LayerSensitivity, Sensitivity
    from rooftune.analysis.sensitivity_table import sensitivity_rows

    s = Sensitivity("agreement", 2.0, 64, (LayerSensitivity("out", "linear", 7.5, (6.0, 9.0)),
                                           LayerSensitivity("hidden", "linear", 0.5, (0.0, 1.0), 1e-3, "compute", 1.1,
                                                            "kept: expected int8 gain 1.10x < 1.2x (compute-bound)")),
                    9.0, 1.0, ("out",), 0.2)
    rows, left_out = sensitivity_rows(s.to_dict())
    assert left_out == 0 and rows == [
        ["out", "linear", "+7.50 [+6.00, +9.00]", "-", "-", "-", "kept for the budget of 2"],
        ["hidden", "linear", "+0.50 [+0.00, +1.00]", "1 ms", "compute", "1.10x",
         "kept: expected int8 gain 1.10x < 1.2x (compute-bound)"]]
    assert sensitivity_rows(json.loads(json.dumps(s.to_dict()))) == (rows, 0)


def test_optimize_prints_the_ranking_of_its_tuning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rooftune.pipeline
    from tests.test_cli import rooftune_in_process

    steps = {s: Step(s, "skipped") for s in STEPS}
    r = OptimizeResult(model="m", batch=1, objective="latency", budget_s=120.0, out=tmp_path, steps=steps,
                       tune=_tuned(layers=["out", "conv1", "fc"]))
    monkeypatch.setattr(rooftune.pipeline, "optimize", lambda *_a, **_k: r)
    proc = rooftune_in_process("optimize", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "int8 sensitivity per layer" in proc.stdout and "kept for the budget of 1" in proc.stdout
    assert "uniform int8 (simulated): drop +5.60" in proc.stdout

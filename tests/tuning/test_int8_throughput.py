"""int8 through each runtime's quantizer with the calibration guard, a caller's validation
function, and the throughput objective's batch and concurrent instances."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import rooftune.tuning.compare as final
from rooftune.bench import Policy
from rooftune.errors import InvalidArgument
from rooftune.runtimes import get_runtime
from rooftune.runtimes.quantize import calibration_inputs, int8_missing
from rooftune.tuning import RunConfig, tune
from rooftune.tuning.compare import interleaved
from rooftune.tuning.study import Setup, _evaluate, _validation_spec
from rooftune.tuning.trial import Group

CNN = "tests.analysis.tiny_models:small_cnn"
FAST = Policy(number=1, warmup_s=0.05, budget_s=0.3, min_samples=6, max_samples=60)


def spec(model: str = CNN) -> dict:
    return {"model": model, "inputs": None, "options": {}}


def refuse_all(outputs: list, references: list) -> tuple[bool, str]:
    """A caller's validation function (imported by name in the trial's process)."""
    return False, f"refused {len(outputs)} outputs"


def test_calibration_set_is_seeded_and_shaped_like_the_inputs() -> None:
    example = (torch.randn(2, 3, 8, 8) * 3 + 1, torch.tensor([[1, 5, 9]]))
    a, b = calibration_inputs(example, 5), calibration_inputs(example, 5)
    assert len(a) == 5 and all(torch.equal(x, y) for xa, xb in zip(a, b, strict=True) for x, y in zip(xa, xb, strict=True))
    floats = torch.stack([xs[0] for xs in a])
    assert floats.shape[1:] == example[0].shape and 1.5 < float(floats.std()) < 4.5
    ids = torch.stack([xs[1] for xs in a])
    assert ids.dtype == torch.int64 and int(ids.min()) >= 1 and int(ids.max()) <= 9


def test_runtimes_declare_their_precisions() -> None:
    assert get_runtime("torchscript").unsupported(RunConfig(runtime="torchscript", precision="int8"))
    assert "does not run int8" in get_runtime("torchscript").unsupported(RunConfig(runtime="torchscript", precision="int8"))
    assert get_runtime("onnxruntime").unsupported(RunConfig(runtime="onnxruntime", precision="bf16"))
    assert int8_missing("onnxruntime") is None
    assert "no int8 path" in int8_missing("torchscript")


def test_a_torchao_that_does_not_load_with_this_torch_takes_int8_out_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip puts the newest torchao beside an older torch without complaint; one built for a newer
    torch fails at import. Then eager and compile have no int8, and the note says why."""
    import sys

    from rooftune.runtimes import quantize

    quantize._torchao_unusable.cache_clear()
    monkeypatch.setitem(sys.modules, "torchao.quantization.pt2e.quantize_pt2e", None)  # import raises
    try:
        why = get_runtime("eager").unsupported(RunConfig(runtime="eager", precision="int8"))
        assert why.startswith("int8 on eager: torchao ") and f"does not load with torch {torch.__version__}" in why
        assert "(ModuleNotFoundError: import of torchao" in why and int8_missing("onnxruntime") is None
    finally:
        quantize._torchao_unusable.cache_clear()


@pytest.mark.parametrize("runtime", ["onnxruntime", "eager", "openvino"])
def test_int8_is_calibrated_and_guarded_on_the_calibration_set(tmp_path: Path, runtime: str) -> None:
    if int8_missing(runtime) or get_runtime(runtime).available():
        pytest.skip(int8_missing(runtime) or get_runtime(runtime).available())
    setup = Setup(spec(), tmp_path, int8=True, calibration_size=8)
    r = _evaluate(RunConfig(runtime=runtime, intra_threads=1, precision="int8"), setup, FAST)
    v = r.verify
    assert v["inputs"] == 8 and "top-1 agreement >= 99%" in v["rule"]
    assert -1.0 <= v["cosine"] <= 1.0 and 0.0 <= v["top1"] <= 1.0
    # quantized to 8 bits: close to fp32, not equal to it
    assert v["cosine"] > 0.9 and v["max_abs"] > 0
    if r.ok:
        assert r.latency_s > 0
    else:
        assert r.error.startswith("wrong output: fails mean cosine")


@pytest.mark.parametrize(("runtime", "quantizer", "op"), [("onnxruntime", "ONNX Runtime's static quantizer", "GRU"),
                                                       ("eager", "PyTorch's x86 quantizer (PT2E)", "gru"),
                                                       ("openvino", "NNCF", "GRUSequence")])
def test_an_int8_configuration_whose_quantizer_quantized_nothing_fails_and_says_so(
        tmp_path: Path, runtime: str, quantizer: str, op: str) -> None:
    """No runtime's static quantizer has GRUs: the model would run in fp32 under the name int8, so
    the trial fails, naming the quantizer and the model's ops, and leaves no artifact."""
    if int8_missing(runtime) or get_runtime(runtime).available():
        pytest.skip(int8_missing(runtime) or get_runtime(runtime).available())
    gru = {"model": "gru", "inputs": None, "options": {"hidden": 32, "layers": 1, "input_size": 16, "seq_len": 8}}
    setup = Setup(gru, tmp_path, int8=True, calibration_size=4)
    r = _evaluate(RunConfig(runtime=runtime, intra_threads=1, precision="int8"), setup, FAST)
    assert not r.ok and r.error.startswith(f"ValueError: int8: {quantizer} quantized no op of this model (its ops: ")
    assert op in r.error and r.error.endswith("; it would run in fp32"), r.error
    left = [p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()]
    assert not any("int8" in str(p) for p in left), left  # the fp32 export it quantized may stay


def test_onnxruntime_int8_stores_an_lstms_weights_in_int8(tmp_path: Path) -> None:
    """ONNX Runtime's static quantizer leaves an LSTM in fp32; its dynamic one gives the LSTM s8
    weights: the quantized file holds DynamicQuantizeLSTM and no LSTM, and computes nearly the
    same sequence."""
    if int8_missing("onnxruntime"):
        pytest.skip(int8_missing("onnxruntime"))
    import numpy as np
    import onnx
    import onnxruntime as ort

    from rooftune.runtimes.onnx_runtime import export_onnx
    from rooftune.runtimes.quantize import ort_int8
    from rooftune.workload import load_workload

    wl = load_workload("lstm", options={"hidden": 64, "layers": 2, "input_size": 32, "seq_len": 8})
    fp32 = export_onnx(wl, RunConfig(runtime="onnxruntime", intra_threads=1), tmp_path / "fp32.onnx")
    out = ort_int8(fp32, tmp_path / "int8.onnx", calibration_inputs(wl.inputs, 4))
    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert "DynamicQuantizeLSTM" in ops and "LSTM" not in ops
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fp32.onnx", "int8.onnx"]  # nothing left beside it
    x = {i.name: t.numpy() for i, t in zip(ort.InferenceSession(str(out)).get_inputs(), wl.inputs, strict=True)}
    want = ort.InferenceSession(str(fp32)).run(None, x)[0].ravel()
    got = ort.InferenceSession(str(out)).run(None, x)[0].ravel()
    assert got.shape == want.shape and not np.array_equal(got, want)
    assert float(got @ want / np.linalg.norm(got) / np.linalg.norm(want)) > 0.99


def test_a_study_says_when_int8_was_refused_on_top1_alone() -> None:
    from rooftune.tuning.study import TrialResult, top1_only_note

    def refused(runtime: str, cosine: float, top1: float) -> TrialResult:
        return TrialResult(RunConfig(runtime=runtime, precision="int8"), False, error="wrong output: fails ...",
                           verify={"ok": False, "cosine": cosine, "top1": top1})

    lstm = [refused("onnxruntime", 0.99996, 0.984), refused("openvino", 0.9332, 0.783),
            TrialResult(RunConfig(runtime="eager", precision="int8"), True, latency_s=0.04, verify={"ok": True})]
    note = top1_only_note(lstm, validated=False)
    assert note.startswith("1 int8 trial(s) (onnxruntime) were refused on top-1 agreement alone (e.g. 98.4% < 99%")
    assert "--validate" in note
    assert top1_only_note(lstm, validated=True) == ""  # the caller's check decided
    assert top1_only_note(lstm[1:], validated=False) == ""  # refused on the cosine too: nothing to say


def test_a_callers_validation_replaces_the_guard(tmp_path: Path) -> None:
    setup = Setup(spec(), tmp_path, validate=_validation_spec("tests.tuning.test_int8_throughput:refuse_all"))
    r = _evaluate(RunConfig(runtime="eager", intra_threads=1), setup, FAST)
    assert not r.ok and "refused 1 outputs" in r.error


def test_validation_must_be_importable_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _validation_spec(json.dumps) == "json:dumps"
    for bad in (lambda o, r: True, "no_colon", "no.such.module:f", "json:no_such_function"):
        with pytest.raises(InvalidArgument, match="validate"):
            _validation_spec(bad)
    with pytest.raises(InvalidArgument, match="cannot import 'no.such.module' .No module named 'no'"):
        _validation_spec("no.such.module:f")
    with pytest.raises(InvalidArgument, match="module 'json' has no function 'no_such_function'"):
        _validation_spec("json:no_such_function")
    # a module in the working directory, as `rooftune tune MODEL --validate mycheck:accept` finds it
    (tmp_path / "rt_mycheck.py").write_text("def accept(outputs, refs):\n    return True\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    assert _validation_spec("rt_mycheck:accept") == "rt_mycheck:accept"


def test_two_instances_run_side_by_side_and_count_both(tmp_path: Path) -> None:
    setup = Setup(spec(), tmp_path)
    cfg = RunConfig(runtime="eager", intra_threads=1, instances=2, batch=4)
    with setup.group(cfg) as g:
        assert isinstance(g, Group) and len(g.workers) == 2 and g.items_per_call == 8
        assert all(w.info["verify"]["ok"] for w in g.workers)
        m = g.measure({"number": 1, "warmup_s": 0.0, "budget_s": 0.2, "min_samples": 5}, "t")
        assert len(m["samples"]) >= 5 and all(x > 0 for x in m["samples"])
    r = _evaluate(cfg, setup, FAST)
    assert r.ok and r.throughput == pytest.approx(8 / r.latency_s)
    one = interleaved(cfg, RunConfig(runtime="eager", intra_threads=1, batch=1, name="b1"), setup, "throughput", FAST)
    assert one["pairs"] >= 6 and one["ratio"] > 0 and "baseline_item_s" in one


def test_throughput_study_searches_batch_and_instances(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the runners-up's re-measurement (tests/tuning/test_trials.py) left out: two pairs of
    # processes of two instances each
    monkeypatch.setattr("rooftune.tuning.final_phases.RUNNERS_UP", 0)
    r = tune(CNN, objective="throughput", runtimes=["eager"], trials=3, budget_s=600, store=str(tmp_path / "t.db"),
             trial_policy=FAST, compare_policy=FAST, compare_pairs=1)
    d = json.loads(json.dumps(r.to_dict(), default=str))
    assert d["objective"] == "throughput" and d["best"]["throughput"] > 0
    assert r.guideline.config.batch == 8 and r.guideline.config.instances >= 1
    from rooftune.platform import current_platform

    cores = current_platform().usable_cores
    searched = [t for t in r.trials if t.config.name.startswith("trial")]
    assert len(searched) == 3 and all(t.config.instances * t.config.intra_threads <= cores for t in searched)
    assert {b.config.batch for b in r.baselines.values()} == {1}
    best = r.best.trial_score("throughput")  # the fastest trial, by its own figure
    # the fastest trial, unless an interleaved comparison put another in its place ("... is the best")
    assert all(best <= t.score("throughput") for t in r.trials) or any("is the best" in n for n in r.notes)


def test_int8_study_and_bad_precision(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="precision"):
        tune(CNN, precisions=("fp32", "int4"), store=str(tmp_path / "x.db"))
    with pytest.raises(InvalidArgument, match="calibration"):
        tune(CNN, precisions=("fp32", "int8"), calibration_size=0, store=str(tmp_path / "x.db"))


def test_pt2e_quantizes_a_model_that_calls_one_module_twice() -> None:
    """A reused ReLU (torchvision's BasicBlock) made the x86 quantizer refuse the whole model."""
    if int8_missing("eager"):
        pytest.skip(int8_missing("eager"))
    from rooftune.runtimes.quantize import pt2e_int8
    from tests.analysis.tiny_models import residual

    model, x = residual()
    calibration = calibration_inputs((x,), 4)
    with torch.no_grad():
        want = model(x)
        for lower in (True, False):
            got = pt2e_int8(model, (x,), calibration, lower=lower)(x)
            cos = torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0)
            assert got.shape == want.shape and float(cos) > 0.99


def test_compile_runs_int8_through_inductor_with_freezing(tmp_path: Path) -> None:
    runtime = get_runtime("compile")
    if runtime.available() or int8_missing("compile"):
        pytest.skip(runtime.available() or int8_missing("compile"))
    setup = Setup(spec("tests.analysis.tiny_models:residual"), tmp_path, int8=True, calibration_size=4)
    r = _evaluate(RunConfig(runtime="compile", intra_threads=1, precision="int8"), setup, FAST)
    assert r.verify.get("inputs") == 4 and r.verify["cosine"] > 0.99, r.error
    assert r.ok and r.latency_s > 0


def test_reduced_precision_seeds_follow_the_guideline(fake_platform) -> None:
    from rooftune.runtimes import RUNTIMES
    from rooftune.tuning.guidelines import guideline, precision_seeds
    from rooftune.workload import OpGraph

    available = {n: get_runtime(n) for n in ("onnxruntime", "openvino", "eager") if n in RUNTIMES}
    guide, _ = guideline(fake_platform, OpGraph("g", (), "torch.export"), available)
    assert precision_seeds(guide, available, ("fp32",)) == []
    seeds = precision_seeds(guide, available, ("fp32", "int8", "bf16"))
    assert {(s.runtime, s.precision) for s in seeds} == {("onnxruntime", "int8"), ("openvino", "int8"), ("openvino", "bf16")}
    assert all(s.intra_threads == guide.intra_threads and s.name.startswith("guideline ") for s in seeds)
    ort = next(s for s in seeds if s.runtime == "onnxruntime")
    assert ort.runtime_options == guide.runtime_options and ort.name == "guideline int8"


def test_an_int8_study_measures_the_guideline_in_int8_before_searching(tmp_path: Path, monkeypatch) -> None:
    """The study's order and budget with the trials' processes replaced by a stand-in."""
    import rooftune.tuning.study as study
    from rooftune.tuning.study import TrialResult

    ran: list[RunConfig] = []

    fake_evaluate, runtimes = _int8_stand_in(monkeypatch, ran)
    r = tune(CNN, precisions=("fp32", "int8"), runtimes=runtimes, trials=0, budget_s=600, calibration_size=8,
             store=str(tmp_path / "t.db"))
    seeds = [c for c in ran if c.name.startswith("guideline int8")]
    assert [c.runtime for c in seeds] == runtimes and all(c.precision == "int8" for c in seeds)
    assert all(c.intra_threads == r.guideline.config.intra_threads for c in seeds)
    assert ran.index(seeds[0]) > max(i for i, c in enumerate(ran) if c.name == "guideline")  # after the fixed ones
    assert not any(c.name.startswith("trial") for c in ran)  # trials=0: no search
    if len(runtimes) == 2:  # then OpenVINO from the ONNX export, in fp32, the guideline's threads
        last = ran[-1]
        assert last.name == "guideline (openvino from onnx)" and last.precision == "fp32"
        assert last.runtime_options["source"] == "onnx" and ran.index(last) > ran.index(seeds[-1])
    assert r.best.config.precision == "int8"
    # where the time went: the phases add up to the study (no measuring happened after "final")
    p = r.phase_s
    assert {"fixed", "search", "final", "reserved", "pairs"} <= set(p) and min(p.values()) >= 0
    assert p["fixed"] + p["search"] + p["final"] <= r.duration_s + 1e-6
    assert r.duration_s - (p["fixed"] + p["search"] + p["final"]) < 1.0
    assert r.time_line().startswith("time: set-up, guideline and baselines") and r.to_dict()["phase_s"] == p
    # the seed of the runtime that ran fastest in fp32 here goes first
    if len(runtimes) == 2:
        fast = {"openvino-latency": 0.003}
        monkeypatch.setattr(study, "_evaluate", lambda cfg, *a, **k: (ran.append(cfg), TrialResult(
            cfg, True, latency_s=fast.get(cfg.name, 0.004), throughput=1.0, verify={"ok": True}))[1])
        ran.clear()
        tune(CNN, precisions=("fp32", "int8"), runtimes=runtimes, trials=0, budget_s=600, calibration_size=8,
             store=str(tmp_path / "v.db"))
        assert [c.runtime for c in ran if c.name.startswith("guideline int8")] == ["openvino", "onnxruntime"]
        monkeypatch.setattr(study, "_evaluate", fake_evaluate)
    # the search's share gone (the reserve is larger than the budget) but the least the final
    # comparisons need (one pair of processes each) leaves time: the seeds still run
    ran.clear()
    r = tune(CNN, precisions=("fp32", "int8"), runtimes=runtimes, trials=0, budget_s=125, calibration_size=8,
             store=str(tmp_path / "w.db"))
    assert r.phase_s["reserved"] > 125 and [c.runtime for c in ran if c.precision == "int8"] == runtimes
    # no time left for them: skipped with a note, not run past the budget
    ran.clear()
    r = tune(CNN, precisions=("fp32", "int8"), runtimes=runtimes, trials=0, budget_s=1, calibration_size=8,
             store=str(tmp_path / "u.db"))
    assert not any(c.precision == "int8" for c in ran)
    assert any(n.startswith("no time left in the budget for guideline int8") for n in r.notes)


def test_guidelines_only_measures_the_guideline_in_each_precision_allowed(tmp_path: Path, monkeypatch) -> None:
    """No search, but with int8 allowed the guideline's int8 configurations are measured and
    checked, and one that runs faster is the answer; fp32 alone measures no such seed."""
    ran: list[RunConfig] = []
    fake_evaluate, runtimes = _int8_stand_in(monkeypatch, ran)
    r = tune(CNN, precisions=("fp32", "int8"), runtimes=runtimes, guidelines_only=True, budget_s=600,
             calibration_size=8, store=str(tmp_path / "g.db"))
    seeds = [c.runtime for c in ran if c.name.startswith("guideline int8")]
    assert seeds and set(seeds) == set(runtimes)
    assert not any(c.name.startswith("trial") or "from onnx" in c.name for c in ran)  # no search, no other seeds
    assert r.best.config.precision == "int8" and r.best.config.name.startswith("guideline int8")
    ran.clear()
    r = tune(CNN, runtimes=runtimes, guidelines_only=True, budget_s=600, store=str(tmp_path / "f.db"))
    assert not any(c.name.startswith("guideline int8") for c in ran) and r.best.config.precision == "fp32"


def _int8_stand_in(monkeypatch, ran: list[RunConfig]):
    """Trials replaced by a stand-in that records each configuration (int8 twice as fast as fp32,
    every check passed), comparisons by a fixed 2x; the int8 runtimes usable here (or a skip)."""
    import rooftune.tuning.study as study
    from rooftune.tuning.study import TrialResult

    def fake_evaluate(cfg: RunConfig, setup: Setup, policy: Policy, prepare_timeout_s: float) -> TrialResult:
        ran.append(cfg)
        return TrialResult(cfg, True, latency_s=0.002 if cfg.precision == "int8" else 0.004, throughput=1.0,
                           verify={"ok": True, "cosine": 1.0, "top1": 1.0, "inputs": 8})

    monkeypatch.setattr(study, "_evaluate", fake_evaluate)
    monkeypatch.setattr(final, "interleaved", lambda *a, **k: {"ratio": 2.0, "ci_low": 1.9, "ci_high": 2.1})
    runtimes = [n for n in ("onnxruntime", "openvino") if not get_runtime(n).available() and not int8_missing(n)]
    if not runtimes:
        pytest.skip("neither ONNX Runtime nor OpenVINO can run int8 here")
    return fake_evaluate, runtimes

"""`rooftune optimize`: the whole pipeline on a small model, its folder of outputs, the report in a
real browser, reproduction through `rooftune exec`, interruption and failing steps."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import rooftune
from rooftune.bench import Policy
from rooftune.errors import InvalidArgument
from rooftune.pipeline import OptimizeResult, optimize
from rooftune.store import Store
from tests.conftest import make_ceilings
from tests.report.browser import blank, browser_missing, open_report
from tests.test_cli import assert_one_line_error, rooftune_in_process
from tests.test_cli import rooftune as cli

CNN = "tests.analysis.tiny_models:small_cnn"
FAST = Policy(number=1, warmup_s=0.05, budget_s=0.3, min_samples=6, max_samples=60)
QUICK = dict(runtimes=["eager", "torchscript"], trials=1, trial_policy=FAST, compare_policy=FAST, budget_s=90)


def store_with_ceilings(path: Path) -> Path:
    from rooftune.platform import current_platform

    platform = current_platform()
    c = make_ceilings(platform)
    with Store(path) as s:
        s.save_ceilings(platform, c.to_dict(), quick=False, threads=c.threads)
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> OptimizeResult:
    d = tmp_path_factory.mktemp("optimize")
    db = store_with_ceilings(d / "r.db")
    return optimize(CNN, out=d / "out", store=str(db), **QUICK)


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["resnet5O"], ["model 'resnet5O'", "did you mean resnet50"]),
        (["resnet18", "--budget", "10"], ["budget 10", ">= 60"]),
        (["resnet18", "--objective", "speed"], ["objective 'speed'", "latency, throughput"]),
        (["resnet18", "--batch", "0"], ["batch 0"]),
        (["resnet18", "--skip", "machine"], ["--skip 'machine'", "tune, select"]),
        (["resnet18", "--runtime", "tensorrt"], ["runtime 'tensorrt'"]),
        (["resnet18", "--int8", "--calibration", "0"], ["calibration size 0", "1..10000"]),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    db = tmp_path / "r.db"
    proc = rooftune_in_process("optimize", *args, "--out", str(tmp_path / "out"), db=db)
    assert_one_line_error(proc, *fragments)
    assert not db.exists()
    assert not (tmp_path / "out").exists()


def test_an_impossible_out_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("keep me")
    proc = cli("optimize", CNN, "--out", str(f), db=tmp_path / "r.db")
    assert_one_line_error(proc, "--out", "exists and is not a directory")
    assert f.read_text() == "keep me"
    proc = cli("optimize", "resnet18", "--out", "/no/such/dir/out", db=tmp_path / "r.db")
    assert_one_line_error(proc, "--out", "parent directory does not exist")
    assert not (tmp_path / "r.db").exists()


def test_every_step_runs_and_the_folder_holds_every_output(run: OptimizeResult) -> None:
    assert {s.name: s.status for s in run.steps.values()} == {
        "machine": "ok", "analyze": "ok", "tune": "ok", "select": "ok", "report": "ok"}, run.steps
    out = run.out
    for name in ("report.html", "summary.json", "best.json", "vanilla.json", "selection/selection.json",
                 "selection/load.py"):
        assert (out / name).is_file(), name
    figures = {p.stem for p in (out / "figures").glob("*.png")}
    assert {"roofline", "model_roofline", "time_roofline", "trials", "speedups", "selection"} <= figures
    assert {p.stem for p in (out / "figures").glob("*.svg")} == figures
    s = json.loads((out / "summary.json").read_text())
    assert s["model"] == CNN and s["objective"] == "latency" and not s["interrupted"]
    sp = s["speedup_vs_vanilla"]
    # a bound too few pairs could set is null, with its note beside it (JSON has no infinity)
    low = -math.inf if sp["ci_low"] is None and "unbounded" in sp["ci_low_note"] else sp["ci_low"]
    high = math.inf if sp["ci_high"] is None and "unbounded" in sp["ci_high_note"] else sp["ci_high"]
    assert low <= sp["ratio"] <= high
    assert (out / "rooftune-manifest.json").is_file()
    assert s["tune"]["best"]["verify"]["ok"] and s["select"]["verification"]["ok"]
    assert s["analysis"]["end_to_end_s"] > 0 and s["ceilings"]["peak_flops"]["fp32"] == 200e9  # from the store
    assert any("rooftune exec --config" in c for c in s["commands"])
    best = json.loads((out / "best.json").read_text())
    assert best["workload"]["model"] == CNN and best["config"]["runtime"] in ("eager", "torchscript")
    with Store(run.out.parent / "r.db") as st:
        assert st.count("trials") >= 4 and st.count("analyses") == 1


def test_the_report_states_the_figures_it_measured(run: OptimizeResult) -> None:
    text = (run.out / "report.html").read_text()
    assert "http://" not in text and "https://" not in text and "<script" not in text  # self-contained
    assert run.headline() in text.replace("&#x27;", "'")
    assert ">pending<" not in text  # every step it lists has finished (the report's own is the page)
    assert f"{run.tune.speedup['vanilla']['ratio']:.2f}x" in text
    for c in run.select.selection.choices:
        assert c.layer in text
    for cmd in run.commands:
        assert cmd.replace("'", "&#x27;") in text


def test_the_report_says_time_between_ops_only_where_the_ops_leave_some() -> None:
    """Op times that add up to all of the end-to-end time (or a little more, by noise) leave no
    time between ops: the report does not call a negative remainder time outside the ops."""
    import math
    from types import SimpleNamespace

    from rooftune.analysis.analyze import Analysis
    from rooftune.report.html import _between_ops

    def analysis(ratio: float, ci: tuple[float, float], rest: float) -> SimpleNamespace:
        a = SimpleNamespace(accounting_ratio=ratio, accounting_ci=ci, unattributed_s=rest)
        a.between_ops_s = Analysis.between_ops_s.fget(a)
        return a

    gap = analysis(0.9, (0.88, 0.93), 2.5e-3)
    assert gap.between_ops_s == 2.5e-3
    assert _between_ops(gap) == ("each run's op times add up to 90% of the end-to-end run timed beside it "
                                 "(the median, 95 % CI 88%-93%): "
                                 "2.5 ms is not in any op (Python and framework between ops)")
    for ratio, ci, rest in ((1.002, (0.99, 1.01), -37.5e-6), (0.995, (0.98, 1.004), 1e-4), (1.01, (-math.inf, math.inf), -1e-5)):
        a = analysis(ratio, ci, rest)
        text = _between_ops(a)
        assert a.between_ops_s is None and text.endswith(": no time between ops is measurable") and "not in any op" not in text
    # too few runs for an interval: the remainder's sign decides, and no interval is printed
    few = analysis(0.9, (-math.inf, math.inf), 2e-3)
    assert few.between_ops_s == 2e-3 and "CI" not in _between_ops(few)


def test_the_usage_calls_a_model_of_keywords_as_it_is_called(tmp_path: Path) -> None:
    from rooftune.pipeline import OptimizeResult

    r = OptimizeResult(model="pkg.models:build", batch=1, objective="latency", budget_s=60, out=tmp_path, steps={},
                       files={"best configuration": "best.json", "rewritten model": "selection/"},
                       call="model(tensor, extra={'bias': tensor}, scale=0.5)")
    lines = r.usage()
    assert "y = model(tensor, extra={'bias': tensor}, scale=0.5)  # inputs of the shapes it was tuned on" in "\n".join(lines)
    assert lines[-1].endswith("selection.json', module)")  # the user's module, called as it is
    r.call = None
    assert "y = model(x)  #" in "\n".join(r.usage()) and not r.usage()[-1].endswith(", module)")


def test_the_verification_table_says_when_several_outputs_were_checked() -> None:
    from types import SimpleNamespace

    from rooftune.report.html import _verification
    from rooftune.selection.rewrite import Verification

    def text(outputs: int) -> str:
        return _verification(SimpleNamespace(tune=None, select=SimpleNamespace(
            verification=Verification(True, 1e-6, 1.0, 1e-3, [], outputs))))

    assert "each of its 3 output tensors on its own scale, the figures the worst of them" in text(3)
    assert "output tensors" not in text(1)


@pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))
def test_the_report_renders_in_headless_chromium(run: OptimizeResult, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    r = open_report(run.out / "report.html", shot)
    severe = [e for e in r["log"] if e.get("level") == "SEVERE"]
    assert severe == [], severe
    assert len(r["images"]) == len(list((run.out / "figures").glob("*.png")))
    for img in r["images"]:
        assert img["complete"] and img["width"] > 100 and img["height"] > 100, img
    assert r["title"] == f"rooftune: {CNN}"
    assert "Runtime configuration" in r["text"] and "Reproduce" in r["text"]
    assert shot.stat().st_size > 10_000 and not blank(shot)


def test_exec_replays_the_saved_best_and_vanilla(run: OptimizeResult) -> None:
    for name in ("best.json", "vanilla.json"):
        cfg = run.out / name
        proc = subprocess.run([sys.executable, "-m", "rooftune.cli", "exec", "--config", str(cfg), "--",
                               sys.executable, "-m", "rooftune.tuning.replay", str(cfg), "--seconds", "0.5"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        assert r["verify"]["ok"] and r["median_s"] > 0 and r["samples"] >= 1
        # the harness's floor of samples, or its word that the budget cut the measurement short
        # (half a second, on a machine the suite's other worker keeps busy: 4 samples were seen)
        assert r["samples"] >= 6 or any("stopped by budget" in w for w in r["warnings"]), r
        saved = json.loads(cfg.read_text())["config"]
        if saved["set_threads"]:
            assert r["threads"] == saved["intra_threads"]


def test_the_usage_it_gives_runs_in_a_program_exec_starts(run: OptimizeResult) -> None:
    usage = run.usage()
    assert json.loads((run.out / "summary.json").read_text())["usage"] == usage
    assert "In your own program" in (run.out / "report.html").read_text()
    code = "\n".join(["import json, torch", "from tests.analysis.tiny_models import small_cnn", "x = small_cnn()[1]",
                      *usage,
                      "print(json.dumps({'y': list(y.shape), 'selected': list(selected(x).shape), 'notes': list(model.notes),",
                      "                  'close': torch.allclose(y, selected(x), atol=1e-4, rtol=1e-4)}))"])
    proc = subprocess.run([sys.executable, "-m", "rooftune.cli", "exec", "--config", str(run.out / "best.json"), "--",
                           sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    # started by exec, the program has the whole configuration; both results compute the model
    assert r["y"] == r["selected"] == [1, 10] and r["close"] and r["notes"] == []


def test_replay_refuses_a_config_without_its_workload(tmp_path: Path) -> None:
    from rooftune.tuning import RunConfig

    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"config": RunConfig(intra_threads=1).to_dict()}))
    proc = subprocess.run([sys.executable, "-m", "rooftune.tuning.replay", str(cfg)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: invalid --config") and "names no workload" in proc.stderr


def test_replay_quantizes_an_int8_config_with_the_trials_calibration_set(tmp_path: Path) -> None:
    from rooftune.runtimes import get_runtime
    from rooftune.runtimes.quantize import int8_missing
    from rooftune.tuning import RunConfig

    if int8_missing("onnxruntime") or get_runtime("onnxruntime").available():
        pytest.skip(int8_missing("onnxruntime") or get_runtime("onnxruntime").available())
    cfg = tmp_path / "int8.json"
    cfg.write_text(json.dumps({"config": RunConfig(runtime="onnxruntime", precision="int8").to_dict(),
                               "workload": {"model": CNN, "inputs": None, "options": {}}, "calibration": 4}))
    proc = subprocess.run([sys.executable, "-m", "rooftune.tuning.replay", str(cfg), "--seconds", "0.3"],
                          capture_output=True, text=True, timeout=300)
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "top-1 agreement" in r["verify"]["rule"] and 0.9 < r["verify"]["cosine"] <= 1.0 + 1e-6
    assert proc.returncode == (0 if r["verify"]["ok"] else 1)
    from rooftune.runtimes.quantize import calibration_inputs
    from rooftune.tuning.deploy import calibration_for
    from rooftune.workload import load_workload

    xs = load_workload(CNN).inputs
    got = calibration_for(RunConfig(precision="int8"), {"calibration": 4}, xs)
    want = calibration_inputs(xs, 4)  # what the trial's Setup calibrated with
    assert len(got) == 4 and all(torch.equal(a, b) for g, w in zip(got, want, strict=True)
                                 for a, b in zip(g, w, strict=True))
    assert calibration_for(RunConfig(), {"calibration": 4}, xs) == []
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "calibration": 0}))
    proc = subprocess.run([sys.executable, "-m", "rooftune.tuning.replay", str(cfg)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "invalid calibration 0" in proc.stderr


def test_reproduce_commands_carry_the_precisions(tmp_path: Path) -> None:
    from rooftune.pipeline import _commands

    r = OptimizeResult(model="resnet18", batch=1, objective="latency", budget_s=300, out=tmp_path, steps={})
    assert "--int8 --calibration 8 --out" in _commands(r, None, ("fp32", "int8"), 8)[0]
    assert "--bf16 --int8 --out" in _commands(r, None, ("fp32", "bf16", "int8"), 32)[0]
    assert "--int8" not in _commands(r, None)[0]


def test_reproduce_commands_carry_the_runtimes_and_the_data(tmp_path: Path) -> None:
    from rooftune.pipeline import _commands
    from rooftune.workload.data import DataSpec

    (tmp_path / "d.npz").write_bytes(b"")
    r = OptimizeResult(model="resnet18", batch=1, objective="latency", budget_s=300, out=tmp_path, steps={})
    data = DataSpec(str(tmp_path / "d.npz"), metric="agreement", max_drop=0.5)
    cmd = _commands(r, None, ("fp32", "int8"), None, runtimes=("onnxruntime", "openvino"), data=data)[0]
    assert f"--runtime onnxruntime,openvino --data {tmp_path / 'd.npz'} --metric agreement --max-drop 0.5" in cmd
    assert "--runtime" not in _commands(r, None)[0]


def test_ctrl_c_leaves_a_partial_report_and_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rooftune.tuning

    def interrupted(*_a: Any, **_k: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(rooftune.tuning, "tune_spec", interrupted)
    db = store_with_ceilings(tmp_path / "r.db")
    r = optimize(CNN, out=tmp_path / "out", store=str(db), **QUICK)
    assert r.interrupted
    assert [(s.name, s.status) for s in r.steps.values()] == [
        ("machine", "ok"), ("analyze", "ok"), ("tune", "interrupted"), ("select", "skipped"), ("report", "ok")]
    text = (tmp_path / "out" / "report.html").read_text()
    assert "Interrupted." in text and "The model on the roofline" in text
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["interrupted"] is True
    with Store(db) as s:
        assert s.count("analyses") == 1  # what finished is stored


def test_a_failing_step_is_reported_and_the_rest_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rooftune.selection

    def broken(*_a: Any, **_k: Any) -> None:
        raise RuntimeError("primitive library exploded\nsecond line")

    monkeypatch.setattr(rooftune.selection, "select", broken)
    db = store_with_ceilings(tmp_path / "r.db")
    r = optimize(CNN, out=tmp_path / "out", store=str(db), steps=("machine", "analyze", "select"), budget_s=60)
    steps = {s.name: s for s in r.steps.values()}
    assert steps["select"].status == "failed" and steps["select"].message == "RuntimeError: primitive library exploded"
    assert steps["tune"].status == "skipped" and steps["analyze"].status == "ok" and steps["report"].status == "ok"
    assert "step select failed: RuntimeError: primitive library exploded" in (tmp_path / "out" / "report.html").read_text()


def test_a_model_without_convolutions_skips_select(tmp_path: Path) -> None:
    db = store_with_ceilings(tmp_path / "r.db")
    r = optimize("tests.analysis.tiny_models:small_mlp", out=tmp_path / "out", store=str(db),
                 steps=("machine", "analyze", "select"), budget_s=60)
    steps = {s.name: s for s in r.steps.values()}
    assert steps["select"].status == "skipped" and "no 2-D convolution" in steps["select"].message
    # the messages and notes say why, should a step fail
    assert steps["analyze"].status == "ok", (steps["analyze"].message, r.notes)
    assert steps["report"].status == "ok", steps["report"].message
    assert not any(c.startswith("rooftune select") or c.startswith("rooftune exec") for c in r.commands)
    assert r.commands[0].endswith(f"--skip tune --db {db}")
    assert "failed" not in (tmp_path / "out" / "report.html").read_text()


def test_reproduce_commands_follow_the_steps_run(tmp_path: Path) -> None:
    from rooftune.pipeline import _commands

    r = OptimizeResult(model="resnet18", batch=1, objective="latency", budget_s=300, out=tmp_path, steps={})
    full = _commands(r, None)
    assert "--skip" not in full[0] and len(full) == 4 and full[-1].startswith("rooftune select")
    no_tune = _commands(r, None, steps=("machine", "analyze", "select"))
    assert "--skip tune" in no_tune[0] and [c.split()[1] for c in no_tune] == ["optimize", "select"]
    neither = _commands(r, None, steps=("machine", "analyze"))
    assert "--skip tune,select" in neither[0] and len(neither) == 1


def test_a_module_object_is_exported_and_optimized(tmp_path: Path) -> None:
    from tests.analysis.tiny_models import small_cnn

    module, x = small_cnn()
    db = store_with_ceilings(tmp_path / "r.db")
    r = rooftune.optimize(module, example_inputs=(x,), out=tmp_path / "out", store=str(db),
                          steps=("machine", "analyze", "select"), budget_s=60)
    assert r.model == str(tmp_path / "out" / "model.pt2") and r.steps["analyze"].status == "ok"
    # the report names the module given, not only the file made of it
    assert r.title == f"Sequential (exported to {r.model})"
    assert "<h1>rooftune optimize: Sequential (exported to" in (tmp_path / "out" / "report.html").read_text()
    assert r.analysis.flops > 0
    # select rewrites the module itself: the .pt2 file's graph has no nn.Conv2d
    assert r.steps["select"].status == "ok", r.steps["select"].message
    assert r.select.verification.ok and len(r.select.selection.choices) == 2
    from rooftune.selection import load_selected

    selected = load_selected(tmp_path / "out" / "selection" / "selection.json", module)
    with torch.no_grad():
        assert torch.allclose(selected(x), module.eval()(x), atol=1e-4)
    assert "load_selected(" in r.usage()[-1] and r.usage()[-1].endswith(", module)")
    with pytest.raises(InvalidArgument, match="an exported program holds its convolutions as graph ops"):
        rooftune.select(r.model)
    # the .pt2 file itself: select is left out, and the step says why and what to give instead
    r2 = rooftune.optimize(r.model, out=tmp_path / "o3", store=str(db), steps=("machine", "select"), budget_s=60)
    assert r2.steps["select"].status == "skipped" and "give optimize the module itself" in r2.steps["select"].message
    # a configuration of the exported model loads in a user's program from the .pt2 file
    from rooftune.tuning import RunConfig

    cfg = tmp_path / "out" / "vanilla.json"
    cfg.write_text(json.dumps({"config": RunConfig(runtime="eager", set_threads=False).to_dict(),
                               "workload": {"model": r.model, "inputs": None, "options": {}}}))
    tuned = rooftune.load_tuned(cfg)
    x2 = torch.randn_like(x)
    with torch.no_grad():
        assert tuned.check["ok"] and torch.allclose(tuned(x2), module.eval()(x2), atol=1e-5)
    with pytest.raises(InvalidArgument, match="example inputs"):
        rooftune.optimize(module, out=tmp_path / "o2", store=str(db))
    with pytest.raises(InvalidArgument, match="allowed a model name"):
        rooftune.optimize((module, x), out=tmp_path / "o2", store=str(db))
    assert not (tmp_path / "o2").exists()


def test_ctrl_c_in_a_terminal_exits_130_with_the_partial_report(tmp_path: Path) -> None:
    """SIGINT to the whole process group, as a terminal's Ctrl-C sends it, while trials run."""
    import os
    import signal
    import time

    db = store_with_ceilings(tmp_path / "r.db")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "rooftune.cli", "optimize", CNN, "--budget", "120", "--out", str(out),
                             "--runtime", "eager,torchscript", "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            # a terminal's process gets SIGINT's default action; a test suite started as a
                            # background job of a shell script inherits SIGINT ignored, and so would rooftune
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        with Store(db) as s:
            if s.count("trials") >= 1:  # the tuning step is running
                break
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "partial report" in stderr
    summary = json.loads((out / "summary.json").read_text())
    status = {s["name"]: s["status"] for s in summary["steps"]}
    assert summary["interrupted"] and status["analyze"] == "ok" and status["tune"] == "interrupted"
    assert "Interrupted." in (out / "report.html").read_text()
    with Store(db) as s:
        assert s.count("trials") >= 1 and s.count("analyses") == 1


def test_a_model_needing_its_input_shape_is_optimized_with_input_and_a_rerun_clears_the_folder(tmp_path: Path) -> None:
    """A callable that returns its module alone takes --input, as analyze and tune do; the reproduce
    commands carry it. A second run into the same folder removes what the first wrote and the
    second does not (its saved selection, its figures), so no stale best.json or load.py is left
    beside a report that does not list it."""
    db = store_with_ceilings(tmp_path / "r.db")
    model = "tests.analysis.tiny_models:small_cnn_module"
    p = rooftune_in_process("optimize", model, "--input", "1x3x32x32", "--skip", "tune", "--budget", "60",
                            "--out", str(tmp_path / "out"), db=db)
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["steps"][1]["status"] == "ok" and summary["steps"][3]["status"] == "ok", summary["steps"]
    assert summary["commands"][0].startswith(f"rooftune optimize {model} --input 1x3x32x32 --batch 1")
    assert any(c.startswith(f"rooftune select {model} --input 1x3x32x32") for c in summary["commands"])
    assert (tmp_path / "out" / "selection" / "load.py").exists() and (tmp_path / "out" / "figures" / "selection.png").exists()
    out = tmp_path / "out"
    # the user's files beside rooftune's, and a summary.json that lists them: they stay
    mine = {"notes.txt": "the user's own", "mydata.csv": "a,b\n", "selection/mine.py": "x = 1",
            "figures/mine.svg": "<svg/>", "figures/selection.bin": "w"}
    for rel, text in mine.items():
        (out / rel).write_text(text)
    summary = json.loads((out / "summary.json").read_text())
    summary["files"].update({"data": "mydata.csv", "mine": "selection/mine.py", "svg": "figures/mine.png"})
    (out / "summary.json").write_text(json.dumps(summary))
    again = optimize(model, inputs=[(1, 3, 32, 32)], out=out, store=str(db), steps=("machine", "analyze"), budget_s=60)
    assert again.steps["analyze"].status == "ok"
    assert not (out / "selection" / "load.py").exists() and not (out / "figures" / "selection.png").exists()
    assert {rel: (out / rel).read_text() for rel in mine} == mine  # only what rooftune wrote goes
    assert (out / "figures" / "roofline.png").exists()  # what the second run wrote stays
    assert "rewritten model" not in json.loads((tmp_path / "out" / "summary.json").read_text())["files"]
    with pytest.raises(InvalidArgument, match="allowed only with a model name"):
        optimize(torch.nn.Conv2d(3, 8, 3), example_inputs=(torch.randn(1, 3, 8, 8),), inputs=[(1, 3, 8, 8)],
                 out=tmp_path / "o2", store=str(db))


def _tuned_with_an_unbounded_interval() -> Any:
    """A tuning result whose comparisons had too few pairs for an interval: (-inf, inf)."""
    from rooftune.runconfig import RunConfig
    from rooftune.tuning.result import TrialResult, TuneResult

    t = TrialResult(RunConfig(name="vanilla"), True, latency_s=0.01, p90_s=0.011, p99_s=0.012, throughput=100.0)
    c = {"ratio": 1.0, "ci_low": -math.inf, "ci_high": math.inf}
    return TuneResult(model=CNN, objective="latency", batch=1, best=t, guideline=t, guideline_reasons=(),
                      baselines={"vanilla": t}, speedup={"vanilla": c}, trials=(t,), notes=(), duration_s=1.0)


def _strict(text: str) -> Any:
    def refuse(token: str) -> Any:
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def test_summary_json_and_json_output_are_strict_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An interval too few pairs could bound is null with its reason in summary.json and in
    `optimize --json`, never Infinity (which jq and most parsers refuse)."""
    import rooftune.pipeline
    from rooftune.pipeline import STEPS, _write_outputs
    from rooftune.report.optimize_result import Step

    r = OptimizeResult(model=CNN, batch=1, objective="latency", budget_s=60, out=tmp_path,
                       steps={s: Step(s, "skipped") for s in STEPS}, tune=_tuned_with_an_unbounded_interval())
    _write_outputs(r, set())
    head = _strict((tmp_path / "summary.json").read_text())["tune"]["headlines"]["best_fp32_peer"]
    assert head["ratio"] == 1.0 and head["ci_low"] is None and head["ci_high"] is None
    assert "interval is unbounded" in head["ci_high_note"]

    monkeypatch.setattr(rooftune.pipeline, "optimize", lambda *_a, **_k: r)
    proc = rooftune_in_process("optimize", "--json")
    assert proc.returncode == 0, proc.stderr
    assert _strict(proc.stdout)["speedup_vs_vanilla"]["ci_low"] is None

"""Trials in subprocesses: a working configuration, a crash, a hang, a wrong output; and a whole
small study, stored and resumed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import rooftune.tuning.compare as final
from rooftune.bench import Policy
from rooftune.runtimes import output_tensors
from rooftune.store import Store
from rooftune.tuning import RunConfig, TrialFailed, Worker, tune
from rooftune.units import speedup_text
from rooftune.workload import load_workload

CNN = "tests.analysis.tiny_models:small_cnn"
FAST = Policy(number=1, warmup_s=0.05, budget_s=0.3, min_samples=6, max_samples=60)


def reference(tmp_path: Path, model: str) -> Path:
    wl = load_workload(model)
    path = tmp_path / "ref.pt"
    with torch.no_grad():
        torch.save(output_tensors(wl()), path)
    return path


def spec(model: str) -> dict:
    return {"model": model, "inputs": None, "options": {}}


def test_a_worker_prepares_verifies_measures_and_samples(tmp_path: Path) -> None:
    ref = reference(tmp_path, CNN)
    cfg = RunConfig(runtime="torchscript", intra_threads=1, memory_format="channels_last")
    with Worker(cfg, spec(CNN), ref, tmp_path) as w:
        assert w.info["verify"]["ok"] and w.info["threads"] == 1
        assert 0 < w.info["start_s"] < 120  # the process's start apart from the preparation
        assert w.info["verify"]["max_rel"] < 1e-4
        assert Path(w.info["artifact"]).name == "model.torchscript.pt"
        m = w.measure({"number": 1, "warmup_s": 0.0, "budget_s": 0.2, "min_samples": 6}, "t")
        assert len(m["samples"]) >= 6 and all(s > 0 for s in m["samples"])
        assert w.sample(3) > 0 and w.sample(2, warmup=1) > 0


@pytest.mark.parametrize(("runtime", "options"), [("onnxruntime", {}), ("openvino", {}),
                                                  ("openvino", {"source": "onnx"}), ("ncnn", {})])
def test_a_process_running_a_prepared_artifact_does_not_build_the_model(tmp_path: Path, runtime: str,
                                                                         options: dict[str, str]) -> None:
    from rooftune.runtimes import get_runtime
    from rooftune.tuning.study import Setup

    model = "tests.analysis.tiny_models:built_outside_trials"  # raises when built inside a trial
    cfg = RunConfig(runtime=runtime, intra_threads=1, runtime_options=options)
    setup = Setup(spec(model), tmp_path)
    rt = get_runtime(runtime)
    if rt.available():
        pytest.skip(rt.available())
    # Without the artifact the trial must build the model, and cannot here.
    with pytest.raises(TrialFailed, match="built inside a trial"):
        setup.group(cfg)
    assert not rt.artifact_ready(cfg, tmp_path)
    rt.prepare(load_workload(model), cfg, tmp_path)  # the study's first trial of this artifact, in-process here
    assert rt.artifact_ready(cfg, tmp_path)
    with setup.group(cfg) as g:  # later trials and the final comparisons: inputs and artifact only
        info = g.workers[0].info
        assert info["verify"]["ok"] and info["verify"]["max_rel"] < 1e-4
        assert g.sample(2) > 0
    # the artifact was written aside and renamed into place: nothing half-written is left
    assert not [p.name for p in tmp_path.rglob(".*")]
    if options.get("source") == "onnx":  # OpenVINO read ONNX Runtime's export, and left it for it
        assert get_runtime("onnxruntime").artifact_ready(RunConfig(runtime="onnxruntime"), tmp_path)
        assert not get_runtime("openvino").artifact_ready(RunConfig(runtime="openvino"), tmp_path)  # another IR


def test_a_crash_and_a_hang_are_failed_trials_not_errors(tmp_path: Path) -> None:
    for name, fragment, timeout in (("crashes_in_trial", "crashed (exit 3)", 120.0), ("hangs_in_trial", "timed out", 8.0)):
        model = f"tests.analysis.tiny_models:{name}"
        ref = reference(tmp_path, model)
        with pytest.raises(TrialFailed, match=fragment.replace("(", r"\(").replace(")", r"\)")):
            Worker(RunConfig(runtime="eager", intra_threads=1), spec(model), ref, tmp_path, prepare_timeout_s=timeout)


def test_a_study_stores_every_trial_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rooftune.tuning.final_phases.RUNNERS_UP", 0)  # checked with stand-ins below
    db = tmp_path / "r.db"
    kwargs = dict(runtimes=["eager", "torchscript"], trials=2, budget_s=600, store=str(db),
                  trial_policy=FAST, compare_policy=FAST, compare_pairs=1, save=tmp_path / "out" / "best.json")
    r = tune(CNN, **kwargs)
    d = json.loads(json.dumps(r.to_dict(), default=str))
    assert {"model", "objective", "best", "baselines", "speedup", "guideline", "trials"} <= set(d)
    assert d["objective"] == "latency" and d["best"]["latency_s"] > 0
    assert set(d["baselines"]) == {"vanilla", "pytorch-launcher", "intel-recommended"}
    for name, sp in d["speedup"].items():
        assert sp["ci_low"] <= sp["ratio"] <= sp["ci_high"] or sp.get("pairs") == 0, name
    assert d["trials"]["count"] == 4 + 2 and d["trials"]["failed"] == 0  # guideline + 3 baselines + 2 searched
    best = r.best.trial_score("latency")
    # the fastest trial, unless an interleaved comparison put a runner-up, the guideline or a
    # baseline in its place (each such note ends "is the best")
    assert all(best <= t.score("latency") for t in r.trials) or any("is the best" in n for n in r.notes)
    saved = json.loads((tmp_path / "out" / "best.json").read_text())
    assert saved["config"]["runtime"] == r.best.config.runtime
    # best.json gives the figure the result reports: the best's interleaved median
    assert r.best.figures_from == "interleaved" and saved["figures"]["latency_s"] == pytest.approx(r.best.latency_s)
    assert r.best.latency_s == r.best_interleaved_s() and r.best.trial_latency_s == best
    # no path in the result points into the study's removed folder: the best's is its saved copy
    assert r.best.artifact == saved.get("artifact")
    assert all(t.artifact is None or Path(t.artifact).exists() for t in (*r.trials, r.guideline, *r.baselines.values()))
    # each trial's start was measured and stored, and the final comparisons' reserve built on it
    assert all(math.isfinite(t.start_s) and t.start_s > 0 for t in r.trials)
    assert r.phase_s["pair_start"] > 0 and "to start a pair" in r.time_line()
    with Store(db) as s:
        assert s.count("trials") == len({t.config.key() for t in r.trials})
    again = tune(CNN, **{**kwargs, "trials": 0, "save": None})
    assert again.resumed == len({t.config.key() for t in r.trials})
    # from the store, not re-measured
    assert again.guideline.trial_score("latency") == r.guideline.trial_score("latency")
    assert again.guideline.start_s == r.guideline.start_s
    with Store(db) as s:
        assert s.count("trials") == len({t.config.key() for t in r.trials})


def test_a_wrong_output_is_failed_and_never_best(tmp_path: Path) -> None:
    ref = tmp_path / "ref.pt"
    torch.save(torch.zeros(1, 10), ref)  # not what the model computes
    from rooftune.tuning.study import Setup, _evaluate

    setup = Setup(spec(CNN), tmp_path)
    setup._files[1] = (ref, None)
    r = _evaluate(RunConfig(runtime="eager", intra_threads=1), setup, FAST)
    assert not r.ok and r.error.startswith("wrong output") and math.isinf(r.score("latency"))


def test_a_paused_worker_uses_no_cpu_and_resumes(tmp_path: Path) -> None:
    """Interleaved comparisons pause the idle worker so its threads cannot take the timed one's cores."""
    import os

    from rooftune.tuning.trial import VirtualClock

    ref = reference(tmp_path, CNN)
    with Worker(RunConfig(runtime="eager", intra_threads=1), spec(CNN), ref, tmp_path) as a, \
            Worker(RunConfig(runtime="eager", intra_threads=1, name="b"), spec(CNN), ref, tmp_path) as b:
        clock = VirtualClock()
        run_a, run_b = clock.timed(a, idle=(b,)), clock.timed(b, idle=(a,))
        run_a()
        assert b.paused and not a.paused
        with open(f"/proc/{b.proc.pid}/stat") as f:
            assert f.read().split(")")[1].split()[0] == "T"  # stopped
        run_b()
        assert a.paused and not b.paused and clock() > 0
        os.kill(a.proc.pid, 0)  # still alive while paused
    assert a.proc.returncode is not None and b.proc.returncode is not None


class StandIn:
    """A set of trial processes for ``interleaved``, without processes: each sample reports
    ``seconds`` (times the next ``jitter`` factor, in turn) after ``delay_s`` of real time, as the
    pauses and pipes around a call take."""

    def __init__(self, seconds: float, items: int = 1, delay_s: float = 0.0, jitter: tuple[float, ...] = (1.0,)) -> None:
        import itertools

        self.seconds, self.items_per_call, self.delay_s = seconds, items, delay_s
        self.jitter, self.samples = itertools.cycle(jitter), 0

    def __enter__(self) -> StandIn:
        return self

    def __exit__(self, *exc: object) -> None: ...

    def ready(self) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def sample(self, warmup: int = 0) -> float:
        import time

        time.sleep(self.delay_s)
        self.samples += 1
        return self.seconds * next(self.jitter)


@pytest.mark.parametrize("objective", ["latency", "throughput"])
def test_a_final_comparison_spends_its_budget_on_the_wall_clock(objective: str) -> None:
    """Stand-ins for the trial processes whose calls report 20 us, and 16 items a call on one
    side, while each costs 2 ms of pauses and pipes. Metered by the samples' clock, the budget
    below would run its 2000 pairs at most (8 s); a 33-58 us model's comparisons took 35 s against 4."""
    import time
    import types

    from rooftune.tuning.compare import interleaved

    made: list[StandIn] = []

    def group(cfg: RunConfig, wait: bool = True) -> StandIn:
        made.append(StandIn(2e-5, items=16 if cfg.name == "batched" else 1, delay_s=0.002))
        return made[-1]

    policy = Policy(number=1, warmup_s=0.02, budget_s=0.2, min_samples=6, max_samples=2000, target_rel_ci=0.0)
    t0 = time.perf_counter()
    c = interleaved(RunConfig(runtime="eager", name="batched", batch=16), RunConfig(runtime="onnxruntime"),
                     types.SimpleNamespace(group=group), objective, policy, pairs=1)
    took = time.perf_counter() - t0
    # the old metering: 2000 pairs of 4 ms at least (8 s); the wall budget: about 50 pairs
    assert took < 4.0 and 6 <= c["pairs"] <= 60 and made[0].samples == made[1].samples
    assert c["ratio"] == pytest.approx(16.0 if objective == "throughput" else 1.0)  # per item: 16 a call


def test_a_comparison_over_two_pairs_of_processes_spans_what_each_pair_found() -> None:
    """Stand-ins: the baseline's second process runs 20 % slower than its first for its whole
    life (as a process can). The interval reaches both pairs' ratios and holds the pooled samples'."""
    import types

    from rooftune.tuning.compare import interleaved

    made: list[str] = []

    def group(cfg: RunConfig, wait: bool = True) -> StandIn:
        made.append(cfg.name)
        slow = cfg.name == "baseline" and made.count("baseline") == 2
        return StandIn(1.2e-3 if slow else 1e-3, jitter=(0.99, 1.0, 1.01, 1.005, 0.995))

    policy = Policy(number=1, warmup_s=0.0, budget_s=0.4, min_samples=10, max_samples=40, target_rel_ci=0.0)
    c = interleaved(RunConfig(runtime="eager", name="best"), RunConfig(runtime="onnxruntime", name="baseline"),
                     types.SimpleNamespace(group=group), "latency", policy, pairs=2)
    assert made == ["best", "baseline"] * 2 and c["process_pairs"] == 2
    assert c["process_pair_ratios"] == [pytest.approx(1.0, abs=0.02), pytest.approx(1.2, abs=0.02)]
    lo, hi = c["pooled_ci"]
    assert c["ci_low"] <= min(lo, 1.0) and c["ci_high"] >= max(hi, 1.19)
    assert 1.0 < c["ratio"] < 1.2


@pytest.mark.parametrize("ci", [(0.93, 0.97), (0.91, 1.04)], ids=["whole-ci-below-1", "ci-holds-1"])
def test_a_baseline_that_measured_faster_becomes_the_best(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          ci: tuple[float, float]) -> None:
    """The study's last phase with stand-ins for the trial processes: the trial medians rank a
    searched configuration first and onnxruntime-default third; the interleaved comparison against
    the baselines finds onnxruntime-default faster by the medians, with its whole CI below 1 or
    with an interval that holds 1 (the searched one not measurably faster: the baseline, which a
    user could pick by hand, is handed back). Baselines are not also taken as runners-up."""
    import rooftune.tuning.study as study
    from rooftune.tuning.study import TrialResult

    medians = {"vanilla": 0.010, "pytorch-launcher": 0.009, "intel-recommended": 0.009,
               "onnxruntime-default": 0.0046, "openvino-default": 0.0047, "openvino-latency": 0.0045, "guideline": 0.0042,
               "guideline (openvino from onnx)": 0.0044}

    def fake_evaluate(cfg, setup, policy, prepare_timeout_s):  # type: ignore[no-untyped-def]
        return TrialResult(cfg, True, latency_s=medians.get(cfg.name, 0.004), throughput=1.0,
                           verify={"ok": True})

    compared: list[tuple[str, str]] = []

    def fake_interleaved(a, b, setup, objective, policy, pairs=None):  # type: ignore[no-untyped-def]
        compared.append((a.name, b.name))
        if a.key() == b.key():
            return {"ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0, "pairs": 0}
        if b.name == "onnxruntime-default":  # the baseline is 5 % faster, its whole CI below 1
            return {"ratio": 0.95, "ci_low": ci[0], "ci_high": ci[1], "pairs": 40}
        if a.name == "onnxruntime-default" and b.name == "openvino-latency":
            return {"ratio": 1.08, "ci_low": 1.05, "ci_high": 1.10, "pairs": 40}
        return {"ratio": 2.0, "ci_low": 1.9, "ci_high": 2.1, "pairs": 40}

    monkeypatch.setattr(study, "_evaluate", fake_evaluate)
    monkeypatch.setattr(final, "interleaved", fake_interleaved)
    runtimes = [n for n in ("eager", "onnxruntime", "openvino")]
    from rooftune.runtimes import get_runtime

    if any(get_runtime(n).available() for n in runtimes[1:]):
        pytest.skip("needs ONNX Runtime and OpenVINO")
    # fp32 only: the bf16 seeds a native-bf16 CPU adds by default are not what this is about
    r = tune(CNN, runtimes=runtimes, trials=1, budget_s=600, store=str(tmp_path / "t.db"), precisions=("fp32",))
    assert r.best.config.name == "onnxruntime-default"
    assert r.speedup["onnxruntime-default"]["ratio"] == 1.0
    assert r.speedup["openvino-latency"]["ratio"] == 1.08  # measured against the new best
    assert list(r.speedup) == [n for n in r.baselines if n in r.speedup]  # the baselines' order
    # the searched best: Optuna's trial number depends on the space this machine offers (a sampled
    # configuration equal to one already measured is not run again)
    searched = compared[0][0]
    assert searched.startswith("trial ")
    won = compared.index((searched, "onnxruntime-default"))
    assert compared[won - 1] == (searched, "openvino-latency")  # the fastest baseline first, then the next
    after = compared[won + 1:]
    assert ("onnxruntime-default", "openvino-latency") in after  # compared again with the new best
    assert after and all(a == "onnxruntime-default" for a, _ in after)
    note = next(n for n in r.notes if "onnxruntime-default is the best" in n)
    assert "1.05x by the medians" in note and f"{ci[0]:.2f}-{ci[1]:.2f}" in note
    assert ("as fast as, or faster than" in note) == (ci[1] >= 1.0), note
    assert after[-1] == ("onnxruntime-default", "guideline")  # the guideline against the new best
    assert len(compared) == len(set(compared))  # no pair measured twice
    assert r.guideline_gap()[0] == 2.0


def test_the_baselines_are_handed_back_by_the_medians_once_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """against_baselines alone: a baseline the best beat by the medians stays a baseline however
    wide its interval; one that read faster by the medians takes the best's place even with an
    interval that holds 1; two baselines each faster than the other in turn are handed back once
    each, so the comparisons end."""
    from rooftune.tuning.study import TrialResult

    def trial(name: str, runtime: str, latency: float) -> TrialResult:
        return TrialResult(RunConfig(runtime=runtime, name=name), True, latency_s=latency, throughput=1 / latency)

    # median(b) / median(a) for each (a, b) compared: ort and ov tie, each reading faster than the other
    table = {("searched", "ort"): (0.98, 0.94, 1.03), ("searched", "ov"): (1.02, 0.96, 1.09),
             ("searched", "vanilla"): (2.5, 2.4, 2.6),
             ("ort", "ov"): (0.99, 0.95, 1.04), ("ort", "vanilla"): (2.4, 2.3, 2.5),
             ("ov", "ort"): (0.99, 0.96, 1.02), ("ov", "vanilla"): (2.4, 2.3, 2.5)}
    compared: list[tuple[str, str]] = []

    def fake_interleaved(a, b, setup, objective, policy, pairs=None):  # type: ignore[no-untyped-def]
        compared.append((a.name, b.name))
        r, lo, hi = table[(a.name, b.name)]
        return {"ratio": r, "ci_low": lo, "ci_high": hi, "pairs": 40}

    monkeypatch.setattr(final, "interleaved", fake_interleaved)
    base = {"vanilla": trial("vanilla", "eager", 0.010), "ort": trial("ort", "onnxruntime", 0.0046),
            "ov": trial("ov", "openvino", 0.0045)}
    notes: list[str] = []
    best, speedup = final.against_baselines(trial("searched", "openvino", 0.0044), base, None, "latency",
                                             Policy(), 1, notes, lambda *a: None)
    # ov first (its trial was faster), kept: 1.02 by the medians; then ort, faster by the medians
    assert compared[:2] == [("searched", "ov"), ("searched", "ort")]
    # ort is handed back and compared with ov and vanilla; ov reads faster than ort and is handed
    # back in turn; ort, compared with ov, reads faster again but was handed back once already
    assert best.config.name == "ov"
    assert compared[2:] == [("ort", "ov"), ("ov", "ort"), ("ov", "vanilla")]
    assert speedup["ov"]["ratio"] == 1.0 and speedup["ort"]["ratio"] == 0.99 and speedup["vanilla"]["ratio"] == 2.4
    assert [n.split(": ")[-1] for n in notes[:2]] == ["ort is the best", "ov is the best"]
    assert all("as fast as, or faster than" in n for n in notes[:2])
    # ort's last reading (0.99) stays in the table below 1: a note says why it is not the best
    assert len(notes) == 3 and notes[2].startswith("the baseline ort read 1.01x as fast as the best")
    assert "held the best's place once and lost it" in notes[2] and "neither measurably faster" in notes[2]


def test_a_baseline_handed_on_takes_its_place_back_where_the_pooled_comparison_reads_it_faster(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The guideline is the best; intel-recommended-tf reads faster and is handed back;
    tensorflow-vanilla reads faster than it on one pair of processes and is handed back in turn;
    compared again, pooled with that comparison, intel-recommended-tf reads faster with its whole
    interval below 1 (the three run alike on a small machine, and one pair of processes was
    slow): it takes its place back, once, rather than being reported faster than the best."""
    from rooftune.tuning.compare import Comparisons
    from rooftune.tuning.study import TrialResult

    def trial(name: str, latency: float, **kw: object) -> TrialResult:
        return TrialResult(RunConfig(runtime="tensorflow", name=name, **kw), True, latency_s=latency,
                           throughput=1 / latency)

    # (best, other) -> each pair of processes' (samples, the best's time, the other's time)
    table = {("guideline", "intel-recommended-tf"): [(10, 0.0135, 0.0132)],
             ("intel-recommended-tf", "tensorflow-vanilla"): [(10, 0.0136, 0.0133)],
             ("tensorflow-vanilla", "intel-recommended-tf"): [(10, 0.0136, 0.0128)] * 2,
             ("intel-recommended-tf", "tensorflow-vanilla", 2): [(10, 0.0130, 0.0136)] * 2}
    compared: list[tuple[str, str]] = []

    def fake_interleaved(a, b, setup, objective, policy, pairs=None):  # type: ignore[no-untyped-def]
        compared.append((a.name, b.name))
        n = compared.count((a.name, b.name))
        return _sampled(a, b, table.get((a.name, b.name, n)) or table[(a.name, b.name)])

    monkeypatch.setattr(final, "interleaved", fake_interleaved)
    base = {"tensorflow-vanilla": trial("tensorflow-vanilla", 0.01357, set_threads=False),
            "intel-recommended-tf": trial("intel-recommended-tf", 0.01324, pin=True)}
    notes: list[str] = []
    cmp = Comparisons(None, "latency", Policy())  # type: ignore[arg-type]
    lost_to: dict[str, str] = {}
    retaken: set[str] = set()
    best, speedup = final.against_baselines(trial("guideline", 0.0135, intra_threads=2), base, None, "latency",
                                             Policy(), 1, notes, lambda *a: None, comparisons=cmp, lost_to=lost_to,
                                             retaken=retaken)
    assert compared == [("guideline", "intel-recommended-tf"), ("intel-recommended-tf", "tensorflow-vanilla"),
                        ("tensorflow-vanilla", "intel-recommended-tf"), ("intel-recommended-tf", "tensorflow-vanilla")]
    assert best.config.name == "intel-recommended-tf" and retaken == {"intel-recommended-tf"}
    assert speedup["intel-recommended-tf"]["ratio"] == 1.0
    vanilla = speedup["tensorflow-vanilla"]  # pooled over every pair of the two: the best is not slower
    assert vanilla["ratio"] > 1.0 and vanilla["earlier_process_pairs"] == 3
    assert notes[-1].endswith("intel-recommended-tf is the best again (pooled with the comparison that had handed "
                              "the place on from it; a baseline takes its place back once at most)")
    assert "over 3 pairs of processes, 1 from an earlier comparison of the two" in notes[-1]


def _sampled(best: RunConfig, other: RunConfig, groups: list[tuple[int, float, float]]) -> dict:
    """What interleaved returns for pairs of processes given as (samples, best's time, other's time)."""
    from rooftune.tuning.compare import summary

    g_best = [[t_best] * n for n, t_best, _ in groups]
    g_other = [[t_other] * n for n, _, t_other in groups]
    return {**summary(g_other, g_best, "latency"), "process_pairs": len(groups),
            "groups": {best.key(): g_best, other.key(): g_other}}


def test_comparisons_of_the_same_two_configurations_pool_their_pairs_of_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second comparison of two configurations, either way round, counts the first one's pairs
    of processes too; a comparison of two others does not; nothing of the samples is handed out."""

    a, b, c = RunConfig(runtime="eager", name="a"), RunConfig(runtime="onnxruntime", name="b"), \
        RunConfig(runtime="openvino", name="c")
    runs = {("a", "b"): [(10, 0.010, 0.012), (10, 0.010, 0.012)], ("b", "a"): [(30, 0.012, 0.009)],
            ("a", "c"): [(10, 0.010, 0.020)]}
    monkeypatch.setattr(final, "interleaved", lambda x, y, setup, objective, policy, pairs=None:
                        _sampled(x, y, runs[(x.name, y.name)]))
    cmp = final.Comparisons(None, "latency", Policy())
    first = cmp(a, b, 2)
    assert first["ratio"] == pytest.approx(1.2) and "earlier_process_pairs" not in first and "groups" not in first
    again = cmp(b, a, 1)  # b the best now: median(a) / median(b) over all three pairs of processes
    assert again["earlier_process_pairs"] == 2 and again["process_pairs"] == 1 and again["pairs"] == 50
    assert again["ratio"] == pytest.approx(0.009 / 0.012)  # 30 of a's 50 samples read 9 ms
    assert again["this_comparison"]["ratio"] == pytest.approx(0.75) and "groups" not in again
    assert len(again["process_pair_ratios"]) == 3
    assert final.pooled_text(again) == ", over 3 pairs of processes, 2 from an earlier comparison of the two"
    other = cmp(a, c, 1)
    assert "earlier_process_pairs" not in other and other["ratio"] == pytest.approx(2.0)
    assert cmp.pairs_run == 4  # every pair of processes run, once


def test_a_comparison_that_would_end_past_the_budget_samples_for_less(monkeypatch: pytest.MonkeyPatch) -> None:
    """googlenet's best was handed on three times and its study ran 259 s of 240: a comparison
    that would end past the deadline has its sampling cut by the overrun, to LATE_BUDGET_S at the
    least, and the study says how many were."""
    a, b = RunConfig(runtime="eager", name="a"), RunConfig(runtime="onnxruntime", name="b")
    seen: list[float] = []

    def fake(x, y, setup, objective, policy, pairs=None):  # type: ignore[no-untyped-def]
        seen.append(policy.budget_s)
        return _sampled(x, y, [(10, 0.010, 0.012)] * (pairs or 1))

    monkeypatch.setattr(final, "interleaved", fake)
    now = [100.0]
    monkeypatch.setattr(final.time, "perf_counter", lambda: now[0])
    policy = Policy(number=1, warmup_s=0.3, budget_s=8.0, min_samples=10)
    cost = final.FinalCost(2.5, policy)  # one pair: 2.5 + 0.3 + 8 = 10.8 s
    cmp = final.Comparisons(None, "latency", policy, deadline=120.0, cost=cost)
    assert final.LATE_BUDGET_S == pytest.approx(2.0)
    cmp(a, b, 1)  # 20 s left: the whole budget
    now[0] = 113.0  # 7 s left: 3.8 s over, sampling cut to 4.2 s
    cmp(b, a, 1)
    now[0] = 125.0  # past the deadline: the floor
    cmp(a, b, 1)
    cmp(a, a, 1)  # a configuration against itself (interleaved runs nothing for it) is not counted
    assert seen == [8.0, pytest.approx(4.2), 2.0, 8.0]
    assert cmp.shortened == [pytest.approx(4.2), 2.0]
    assert cmp.shortened_note() == ("the budget would have ended during 2 final comparison(s): they sampled for "
                                    "2.0-4.2 s instead of 8 s (their intervals are the wider for it)")
    # without a deadline (or a cost model) nothing is cut
    free = final.Comparisons(None, "latency", policy)
    free(a, b, 1)
    assert seen[-1] == 8.0 and free.shortened == [] and free.shortened_note() == ""


def test_budget_left_over_steadies_the_unsteady_comparisons(monkeypatch: pytest.MonkeyPatch) -> None:
    """resnet18's main job: the search ran out of configurations early and the headline over
    vanilla pooled two pairs of processes that read 1.49x and 1.83x. With time left, such a
    comparison gets one more pair at a time (pooled) until its pairs agree, MAX_PROCESS_PAIRS are
    spread, or no pair fits; steady comparisons, ones the best did not win with its whole
    interval, and the best's own baseline get none."""
    from dataclasses import replace

    from rooftune.tuning.compare import summary
    from rooftune.tuning.study import TrialResult

    best_cfg = RunConfig(runtime="ncnn", name="trial 3")
    base = {n: TrialResult(RunConfig(runtime=rt, name=n), True, latency_s=0.02, verify={"ok": True})
            for n, rt in (("vanilla", "eager"), ("intel-recommended", "eager"), ("openvino-latency", "openvino"),
                          ("onnxruntime-default", "onnxruntime"))}
    base["intel-recommended"] = TrialResult(replace(base["vanilla"].config, name="intel-recommended"), True,
                                            latency_s=0.02, verify={"ok": True})  # vanilla's twin
    best = TrialResult(best_cfg, True, latency_s=0.0136, verify={"ok": True})
    # each later pair of vanilla reads 1.50x; openvino-latency's pairs disagree but the best did not win
    later = {"vanilla": (10, 0.010, 0.015), "openvino-latency": (10, 0.010, 0.012)}
    monkeypatch.setattr(final, "interleaved", lambda x, y, setup, objective, policy, pairs=None:
                        _sampled(x, y, [later[y.name]] * (pairs or 1)))
    now = [0.0]
    monkeypatch.setattr(final.time, "perf_counter", lambda: now[0])
    cost = final.FinalCost(2.5, Policy(number=1, warmup_s=0.3, budget_s=8.0))
    cmp = final.Comparisons(None, "latency", Policy())
    # the comparisons as the final phase left them: vanilla over pairs that read 1.49x and 1.83x
    cmp.seen[frozenset((best_cfg.key(), base["vanilla"].config.key()))] = {
        best_cfg.key(): [[0.010] * 10, [0.010] * 10], base["vanilla"].config.key(): [[0.0149] * 10, [0.0183] * 10]}
    vanilla = summary([[0.0149] * 10, [0.0183] * 10], [[0.010] * 10, [0.010] * 10], "latency")
    speedup = {"vanilla": vanilla, "intel-recommended": vanilla,
               "openvino-latency": {"ratio": 1.17, "ci_low": 0.88, "ci_high": 1.22, "process_pair_ratios": [1.21, 0.89]},
               "onnxruntime-default": {"ratio": 1.24, "ci_low": 1.22, "ci_high": 1.26, "process_pair_ratios": [1.24, 1.22]}}
    notes = final.steadier(best, base, speedup, cmp, cost, deadline=100.0, spread=1.10)
    v = speedup["vanilla"]
    assert len(v["process_pair_ratios"]) == final.MAX_PROCESS_PAIRS == 4  # 1.49, 1.83, 1.50, 1.50: still apart
    assert v["earlier_process_pairs"] == 3 and speedup["intel-recommended"] is v
    assert speedup["openvino-latency"]["ratio"] == 1.17 and speedup["onnxruntime-default"]["ratio"] == 1.24
    assert notes == [f"the budget left time for 2 more pair(s) of processes in the comparison with vanilla, unsteady "
                     f"over 2: {vanilla['ratio']:.2f}x ({vanilla['ci_low']:.2f}-{vanilla['ci_high']:.2f}) became "
                     f"{v['ratio']:.2f}x ({v['ci_low']:.2f}-{v['ci_high']:.2f}) over 4, still unsteady"]
    assert cmp.pairs_run == 2
    # no time left: nothing runs
    cmp2 = final.Comparisons(None, "latency", Policy())
    speedup2 = {"vanilla": vanilla}
    fresh = final.FinalCost(2.5, Policy(number=1, warmup_s=0.3, budget_s=8.0))  # a pair takes 10.8 s
    assert final.steadier(best, base, speedup2, cmp2, fresh, deadline=5.0, spread=1.10) == []
    assert speedup2["vanilla"] is vanilla and cmp2.pairs_run == 0


@pytest.mark.parametrize("last_pair", [40, 10], ids=["pooled-guideline-faster", "pooled-baseline-faster"])
def test_a_guideline_that_lost_its_place_is_compared_again_with_every_pair_of_processes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, last_pair: int) -> None:
    """The guideline is the best; openvino-latency reads faster than it over two pairs of processes
    and is handed back; compared again over one more pair, the guideline reads faster. With every
    pair pooled: where the guideline is faster by the medians it is the best again (once), the
    baselines compared with it; where it is not, the baseline stays and the guideline's gap is the
    pooled figure (a guideline slower than the best never reads faster than it in the report)."""
    import rooftune.tuning.study as study
    from rooftune.runtimes import get_runtime
    from rooftune.tuning.study import TrialResult

    if get_runtime("openvino").available():
        pytest.skip("needs OpenVINO")
    medians = {"vanilla": 0.010, "pytorch-launcher": 0.009, "intel-recommended": 0.009,
               "onnxruntime-default": 0.0046, "openvino-default": 0.0047, "openvino-latency": 0.0045, "guideline": 0.0035}

    def fake_evaluate(cfg, setup, policy, prepare_timeout_s):  # type: ignore[no-untyped-def]
        return TrialResult(cfg, True, latency_s=medians.get(cfg.name, 0.005), throughput=1.0, verify={"ok": True})

    compared: list[tuple[str, str]] = []

    def fake_interleaved(a, b, setup, objective, policy, pairs=None):  # type: ignore[no-untyped-def]
        compared.append((a.name, b.name))
        if a.key() == b.key():
            return {"ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0, "pairs": 0}
        if (a.name, b.name) == ("guideline", "openvino-latency"):
            # two pairs where openvino-latency is faster; compared again later (with the guideline
            # the best again), the same
            return _sampled(a, b, [(10, 0.0047, 0.0040)] * (pairs or 1))
        if (a.name, b.name) == ("openvino-latency", "guideline"):
            return _sampled(a, b, [(last_pair, 0.0040, 0.0030)])
        return _sampled(a, b, [(10, 0.004, 0.008)] * (pairs or 1))  # the best is 2x faster

    monkeypatch.setattr(study, "_evaluate", fake_evaluate)
    monkeypatch.setattr(final, "interleaved", fake_interleaved)
    r = tune(CNN, runtimes=["eager", "openvino"], trials=1, budget_s=600, store=str(tmp_path / "t.db"))
    handed_back = next(n for n in r.notes if "openvino-latency is the best" in n)
    assert "1.18x by the medians" in handed_back and "earlier comparison" not in handed_back
    back_to_ov = compared.index(("openvino-latency", "guideline"))
    if last_pair == 40:  # the guideline's 40 samples at 3.0 ms outnumber its 20 at 4.7 ms
        assert r.best.config.name == "guideline"
        note = next(n for n in r.notes if n.endswith("it is the best again"))
        assert "1.33x faster by the medians, over 3 pairs of processes, 2 from an earlier comparison" in note
        assert r.guideline_gap()[:3] == (1.0, 1.0, 1.0)
        # the baselines compared with the guideline again; openvino-latency (handed back once) is
        # not handed back a second time, whatever it reads: pooled over 5 pairs of processes the
        # guideline's samples are half at 3.0 ms, half at 4.7 ms, openvino-latency's all at 4.0 ms
        assert ("guideline", "openvino-latency") in compared[back_to_ov + 1:]
        ov = r.speedup["openvino-latency"]
        assert ov["earlier_process_pairs"] == 3 and ov["process_pairs"] == 2
        assert ov["ratio"] == pytest.approx(0.0040 / ((0.0030 + 0.0047) / 2))
        assert len([n for n in r.notes if n.endswith("openvino-latency is the best")]) == 1
    else:  # 10 at 3.0 ms against 20 at 4.7 ms: the guideline is slower over the three pairs
        assert r.best.config.name == "openvino-latency"
        assert not [n for n in r.notes if n.endswith("it is the best again")]
        ratio, lo, hi, interleaved = r.guideline_gap()
        assert interleaved and ratio == pytest.approx(0.0047 / 0.0040) and ratio > 1
        assert compared[back_to_ov + 1:] == []  # nothing after the guideline's comparison


def test_a_guideline_that_lost_its_place_down_a_chain_of_baselines_takes_it_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guideline is the best; onnxruntime-default reads 1.04x faster by the medians and is
    handed back; openvino-latency reads faster than it and is handed back in turn; the guideline,
    never compared with openvino-latency before (onnxruntime-default's trial was the faster, so it
    was compared first), reads 0.81x its time: it is the best again and
    the baselines are compared with it (each handed back once only), so no report gives the
    guideline as faster than the best."""
    import rooftune.tuning.study as study
    from rooftune.runtimes import get_runtime
    from rooftune.tuning.study import TrialResult

    if get_runtime("openvino").available() or get_runtime("onnxruntime").available():
        pytest.skip("needs ONNX Runtime and OpenVINO")
    medians = {"vanilla": 0.010, "pytorch-launcher": 0.009, "intel-recommended": 0.009,
               "onnxruntime-default": 0.0044, "openvino-default": 0.0047, "openvino-latency": 0.0045, "guideline": 0.0035}

    def fake_evaluate(cfg, setup, policy, prepare_timeout_s):  # type: ignore[no-untyped-def]
        return TrialResult(cfg, True, latency_s=medians.get(cfg.name, 0.005), throughput=1.0, verify={"ok": True})

    # (best, other) -> (the best's time, the other's) in every pair of processes
    times = {("guideline", "onnxruntime-default"): (0.0050, 0.0048),
             ("onnxruntime-default", "openvino-latency"): (0.0048, 0.00466),
             ("openvino-latency", "guideline"): (0.00466, 0.00378),
             ("guideline", "openvino-latency"): (0.00378, 0.00466)}
    compared: list[tuple[str, str]] = []

    def fake_interleaved(a, b, setup, objective, policy, pairs=None):  # type: ignore[no-untyped-def]
        compared.append((a.name, b.name))
        if a.key() == b.key():
            return {"ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0, "pairs": 0}
        t_best, t_other = times.get((a.name, b.name), (0.004, 0.008))
        return _sampled(a, b, [(10, t_best, t_other)] * (pairs or 1))

    monkeypatch.setattr(study, "_evaluate", fake_evaluate)
    monkeypatch.setattr(final, "interleaved", fake_interleaved)
    r = tune(CNN, runtimes=["eager", "onnxruntime", "openvino"], trials=1, budget_s=600, store=str(tmp_path / "t.db"))
    assert [n.split(": ")[-1] for n in r.notes if n.split(": ")[-1].startswith(("onnxruntime-default is",
                                                                                 "openvino-latency is", "it is"))] == [
        "onnxruntime-default is the best", "openvino-latency is the best", "it is the best again"]
    note = next(n for n in r.notes if n.endswith("it is the best again"))
    assert note.startswith("the guideline, measured against openvino-latency, read 1.23x faster by the medians (")
    assert r.best.config.name == "guideline" and r.guideline_gap()[:3] == (1.0, 1.0, 1.0)
    back = compared.index(("openvino-latency", "guideline"))
    assert ("guideline", "openvino-latency") not in compared[:back]  # not pooled: never compared before
    assert {("guideline", "onnxruntime-default"), ("guideline", "openvino-latency")} <= set(compared[back + 1:])
    # compared with the guideline again, each pooled with its earlier pairs; neither handed back twice
    assert r.speedup["openvino-latency"]["ratio"] == pytest.approx(0.00466 / 0.00378)
    assert r.speedup["onnxruntime-default"]["ratio"] == pytest.approx(0.96)
    assert r.speedup["onnxruntime-default"]["earlier_process_pairs"] >= 1


def test_the_table_shows_the_interleaved_medians_and_says_when_they_reverse_the_trials() -> None:
    """A baseline whose one-process trial read faster than the best's, where the interleaved pairs
    found the best faster: the table gives both sides' interleaved medians and one line on why."""
    from rooftune.report.html import _tuning
    from rooftune.tuning.study import TrialResult, TuneResult
    from rooftune.units import interleaved_text

    def trial(name: str, latency: float, runtime: str = "eager") -> TrialResult:
        return TrialResult(RunConfig(runtime=runtime, name=name), True, latency_s=latency, p90_s=latency,
                           p99_s=latency, throughput=1 / latency, verify={"ok": True})

    best = trial("trial 3", 0.0575, "openvino")
    base = {"vanilla": trial("vanilla", 0.0968), "onnxruntime-default": trial("onnxruntime-default", 0.0537, "onnxruntime")}
    speedup = {"vanilla": {"ratio": 1.72, "ci_low": 1.64, "ci_high": 1.86, "pairs": 40,
                           "baseline_latency_s": 0.0960, "best_latency_s": 0.0558},
               "onnxruntime-default": {"ratio": 1.07, "ci_low": 1.04, "ci_high": 1.09, "pairs": 40,
                                       "baseline_latency_s": 0.0613, "best_latency_s": 0.0573}}
    guide = trial("guideline", 0.0546, "onnxruntime")
    r = TuneResult("m", "latency", 1, best, guide, (), base, speedup, (best, guide, *base.values()), (), 1.0,
                   guideline_vs_best={"ratio": 1.02, "ci_low": 0.99, "ci_high": 1.05})
    assert r.interleaved("onnxruntime-default") == (0.0613, 0.0573)
    assert r.interleaved("guideline") is None  # no medians given
    # the best: the median of its sides, 55.8 and 57.3 ms
    assert r.interleaved("best") == (pytest.approx(0.05655), pytest.approx(0.05655))
    # the guideline's trial also read faster, but its interval holds 1: only the baseline is named
    assert r.reversed_by_interleaving() == ["onnxruntime-default"]
    assert r.reversal_line().startswith("onnxruntime-default: the trial read faster than the best's")
    assert interleaved_text(r.interleaved("onnxruntime-default")) == "61.3 ms / 57.3 ms"
    assert interleaved_text((0.1, 0.05), "throughput") == "10 / 20 samples/s"
    # in the report's table too
    from types import SimpleNamespace

    html = _tuning(SimpleNamespace(tune=r), {})
    assert "61.3 ms / 57.3 ms" in html and "interleaved: it / best" in html and "the trial read faster" in html
    # where the interleaved comparison agrees with the trials, nothing is said
    agree = TuneResult("m", "latency", 1, best, guide, (), {"vanilla": base["vanilla"]}, {"vanilla": speedup["vanilla"]},
                       (best,), (), 1.0)
    assert agree.reversed_by_interleaving() == [] and agree.reversal_line() == ""


def test_a_comparison_whose_pairs_of_processes_disagree_is_named_unsteady() -> None:
    """The main job's vanilla comparison once read 1.48 and 1.79 in its two pairs of processes:
    the result, the command's table line, the report and the JSON name it; pairs that agree
    within 10 %, a lone pair and a comparison with none are not named."""
    from types import SimpleNamespace

    from rooftune.report.html import _tuning, escape
    from rooftune.tuning.study import UNSTEADY_PAIR_SPREAD, TrialResult, TuneResult

    def trial(name: str, latency: float) -> TrialResult:
        return TrialResult(RunConfig(runtime="eager", name=name), True, latency_s=latency, p90_s=latency,
                           p99_s=latency, throughput=1 / latency, verify={"ok": True})

    best = trial("trial 3", 0.0135)
    base = {n: trial(n, 0.03) for n in ("vanilla", "pytorch-launcher", "intel-recommended", "openvino-latency")}
    speedup = {"vanilla": {"ratio": 1.62, "ci_low": 1.47, "ci_high": 2.01, "process_pair_ratios": [1.48, 1.79]},
               "pytorch-launcher": {"ratio": 1.5, "ci_low": 1.45, "ci_high": 1.55, "process_pair_ratios": [1.45, 1.55]},
               "intel-recommended": {"ratio": 1.5, "ci_low": 1.4, "ci_high": 1.6, "process_pair_ratios": [1.5]},
               "openvino-latency": {"ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0}}
    guide = {"ratio": 1.1, "ci_low": 0.8, "ci_high": 1.3, "process_pair_ratios": [0.83, 1.21, 1.2]}
    r = TuneResult("m", "latency", 1, best, trial("guideline", 0.014), (), base, speedup, (best,), (), 1.0,
                   guideline_vs_best=guide)
    assert UNSTEADY_PAIR_SPREAD == pytest.approx(1.10)
    # 1.55 / 1.45 = 1.069 agrees; 1.79 / 1.48 = 1.21 and 1.21 / 0.83 do not
    assert r.unsteady() == {"guideline": [0.83, 1.21, 1.2], "vanilla": [1.48, 1.79]}
    line = r.unsteady_line()
    assert line.startswith("unsteady comparisons, each pair of processes' own ratio (guideline: 0.83, 1.21, 1.20; "
                           "vanilla: 1.48, 1.79)") and "more than 10%" in line
    assert r.to_dict()["unsteady"] == {"guideline": [0.83, 1.21, 1.2], "vanilla": [1.48, 1.79]}
    assert f"<p class=warn>{escape(line)}</p>" in _tuning(SimpleNamespace(tune=r), {})
    # the main job's headline, which makes the claim over vanilla, says so too
    from rooftune.pipeline import OptimizeResult

    run = OptimizeResult(model="m", batch=1, objective="latency", budget_s=60.0, out=Path("out"), steps={}, tune=r)
    assert run.headline().endswith("; unsteady: its pairs of processes read 1.48x, 1.79x")
    steady = TuneResult("m", "latency", 1, best, trial("guideline", 0.014), (), base,
                        {k: v for k, v in speedup.items() if k != "vanilla"}, (best,), (), 1.0)
    assert steady.unsteady() == {} and steady.unsteady_line() == "" and steady.to_dict()["unsteady"] == {}
    assert "unsteady" not in _tuning(SimpleNamespace(tune=steady), {})


def test_trial_times_far_off_their_interleaved_medians_are_named() -> None:
    """A busy host: vanilla's trial read 16 ms where its interleaved median was 189 us; the table's
    trial columns then mislead, and a line says to read the ratios. Within 1.5x nothing is said."""
    from types import SimpleNamespace

    from rooftune.report.html import _tuning, escape
    from rooftune.tuning.study import DRIFT, TrialResult, TuneResult

    def trial(name: str, latency: float) -> TrialResult:
        return TrialResult(RunConfig(runtime="eager", name=name), True, latency_s=latency, p90_s=latency,
                           p99_s=latency, throughput=1 / latency, verify={"ok": True})

    best = trial("trial 0", 30e-6)
    base = {"vanilla": trial("vanilla", 16e-3), "pytorch-launcher": trial("pytorch-launcher", 100e-6)}
    speedup = {"vanilla": {"ratio": 5.9, "ci_low": 5.5, "ci_high": 6.3, "baseline_latency_s": 189e-6, "best_latency_s": 32e-6},
               "pytorch-launcher": {"ratio": 3.0, "ci_low": 2.9, "ci_high": 3.1, "baseline_latency_s": 90e-6,
                                    "best_latency_s": 30e-6}}
    r = TuneResult("m", "latency", 1, best, trial("guideline", 40e-6), (), base, speedup, (best,), (), 1.0,
                   guideline_vs_best={"ratio": 1.2, "ci_low": 1.1, "ci_high": 1.3, "baseline_latency_s": 38e-6,
                                      "best_latency_s": 31e-6})
    assert DRIFT == pytest.approx(1.5)
    assert set(r.drifted()) == {"vanilla"} and r.drifted()["vanilla"] == pytest.approx(16e-3 / 189e-6)
    line = r.drift_line()
    assert line.startswith("trial times off their interleaved medians (vanilla 85x)") and "interleaved ratios" in line
    assert r.to_dict()["drifted"] == r.drifted()
    assert f"<p class=warn>{escape(line)}</p>" in _tuning(SimpleNamespace(tune=r), {})
    quiet = TuneResult("m", "latency", 1, best, trial("guideline", 40e-6), (), {"pytorch-launcher": base["pytorch-launcher"]},
                       {"pytorch-launcher": speedup["pytorch-launcher"]}, (best,), (), 1.0)
    assert quiet.drifted() == {} and quiet.drift_line() == ""
    assert r.best_interleaved_s() == pytest.approx(31e-6) and r.to_dict()["best"]["interleaved_median_s"] == pytest.approx(31e-6)


def test_a_best_whose_trial_ran_slow_is_named_with_its_interleaved_time() -> None:
    """googlenet on the Zen 4 VM: ncnn's guideline trial read 30.2 ms in a slow stretch, then beat
    ONNX Runtime's default (16.3 ms) 1.17x interleaved and became the best; its row showed 30.2 ms
    above a baseline of 16.3 ms it was faster than, and nothing said so."""
    from rooftune.tuning.study import TrialResult, TuneResult

    def trial(name: str, latency: float) -> TrialResult:
        return TrialResult(RunConfig(runtime="eager", name=name), True, latency_s=latency, p90_s=latency,
                           p99_s=latency, throughput=1 / latency, verify={"ok": True})

    best = trial("guideline", 30.2e-3)
    base = {"onnxruntime-default": trial("onnxruntime-default", 16.3e-3), "openvino-latency": trial("openvino-latency", 17.5e-3)}
    speedup = {"onnxruntime-default": {"ratio": 1.17, "ci_low": 1.12, "ci_high": 1.18, "baseline_latency_s": 16.2e-3,
                                       "best_latency_s": 13.9e-3},
               "openvino-latency": {"ratio": 1.19, "ci_low": 0.88, "ci_high": 1.21, "baseline_latency_s": 17.0e-3,
                                    "best_latency_s": 14.3e-3}}
    r = TuneResult("googlenet", "latency", 1, best, best, (), base, speedup, (best,), (), 1.0)
    assert r.best_interleaved_s() == pytest.approx(14.1e-3)
    assert r.drifted() == {"best": pytest.approx(30.2 / 14.1)}
    assert r.interleaved("best") == (pytest.approx(14.1e-3), pytest.approx(14.1e-3))
    assert r.drift_line().startswith("trial times off their interleaved medians (best 2.1x)")
    d = r.to_dict()
    assert d["best"]["latency_s"] == pytest.approx(30.2e-3) and d["best"]["interleaved_median_s"] == pytest.approx(14.1e-3)
    # no comparison at all (a study of one configuration): nothing to name, no figure
    alone = TuneResult("m", "latency", 1, best, best, (), {}, {}, (best,), (), 1.0)
    assert alone.drifted() == {} and math.isnan(alone.best_interleaved_s())


def test_the_guideline_and_a_baseline_that_is_the_best_are_said_so() -> None:
    """A user saw 'guideline: 0.99x the best's latency' under a best that stayed the best (the
    guideline's CI held 1), and a baseline that is the best read '1.00x (1.00-1.00)' as if
    measured: the first is said to be as fast as the best within its CI, the second 'the best
    itself', in the table, the report and the guideline's own cell."""
    from types import SimpleNamespace

    from rooftune.report.html import _tuning, escape
    from rooftune.tuning.compare import itself
    from rooftune.tuning.study import TrialResult, TuneResult

    def trial(name: str, latency: float) -> TrialResult:
        return TrialResult(RunConfig(runtime="onnxruntime", name=name), True, latency_s=latency, p90_s=latency,
                           p99_s=latency, throughput=1 / latency, verify={"ok": True})

    best = trial("onnxruntime-default", 0.0234)
    base = {"onnxruntime-default": best, "vanilla": trial("vanilla", 0.06)}
    speedup = {"onnxruntime-default": itself(),
               "vanilla": {"ratio": 2.5, "ci_low": 2.4, "ci_high": 2.6, "pairs": 40}}

    def result(vs_best: dict) -> TuneResult:
        return TuneResult("m", "latency", 1, best, trial("guideline", 0.0232), (), base, speedup, (best,), (), 1.0,
                          guideline_vs_best=vs_best)

    close = result({"ratio": 0.97, "ci_low": 0.94, "ci_high": 1.03, "pairs": 24})
    assert close.guideline_text() == ("0.97x the best's latency (95 % CI 0.94-1.03, interleaved), as fast as the best "
                                      "within its CI (it takes the best's place only with its whole CI below 1)")
    assert speedup_text(close.comparison("onnxruntime-default")) == "the best itself"
    assert speedup_text(close.comparison("guideline")) == "0.97x (0.94-1.03)"
    html = _tuning(SimpleNamespace(tune=close), {})
    assert f"The instant guideline configuration is {escape(close.guideline_text() or '')}: " in html
    assert "the best itself" in html
    assert "1.00x (1.00-1.00)" not in html
    slower = result({"ratio": 1.2, "ci_low": 1.18, "ci_high": 1.22, "pairs": 24})
    assert slower.guideline_text() == "1.20x the best's latency (95 % CI 1.18-1.22, interleaved)"
    assert result(itself()).guideline_text() == "the best itself"
    # no interleaved comparison: the two trials' medians, and nothing said about a CI
    assert result({}).guideline_text() == f"{0.0232 / 0.0234:.2f}x the best's latency (trial medians)"


def test_the_guideline_is_measured_interleaved_against_the_best(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guideline's distance from the best is an interleaved comparison, not the ratio of two
    trial medians taken at different times; a guideline faster with its whole CI becomes the best."""
    import rooftune.tuning.study as study
    from rooftune.tuning.study import TrialResult

    medians = {"guideline": 0.0045, "trial 0": 0.003}  # trial medians: the guideline 1.5x the best

    def fake_evaluate(cfg, setup, policy, prepare_timeout_s):  # type: ignore[no-untyped-def]
        return TrialResult(cfg, True, latency_s=medians.get(cfg.name, 0.004), throughput=1.0, verify={"ok": True})

    def run(guide_ratio: tuple[float, float, float], path: Path) -> tuple[study.TuneResult, list[tuple[str, str]]]:
        compared: list[tuple[str, str]] = []

        def fake_interleaved(a, b, setup, objective, policy, pairs=None):  # type: ignore[no-untyped-def]
            compared.append((a.name, b.name))
            if a.key() == b.key():
                return {"ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0, "pairs": 0}
            if b.name == "guideline":
                return dict(zip(("ratio", "ci_low", "ci_high"), guide_ratio, strict=True), pairs=40)
            return {"ratio": 2.0, "ci_low": 1.9, "ci_high": 2.1, "pairs": 40}

        monkeypatch.setattr(final, "interleaved", fake_interleaved)
        return tune(CNN, runtimes=["eager"], trials=1, budget_s=600, store=str(path)), compared

    class Steal:  # the hypervisor's share of the CPU time over the study
        share_of = 0.0

        def share(self) -> float:
            return Steal.share_of

    monkeypatch.setattr(study, "_evaluate", fake_evaluate)
    monkeypatch.setattr(study, "Steal", Steal)
    r, compared = run((1.03, 0.99, 1.06), tmp_path / "a.db")
    assert not any("steal" in n for n in r.notes)
    assert r.best.config.name == "trial 0"
    assert ("trial 0", "guideline") in compared
    assert r.guideline_gap() == (1.03, 0.99, 1.06, True)  # not 0.0045 / 0.003
    g = r.to_dict()["guideline"]
    assert (g["vs_best"], g["vs_best_ci_low"], g["vs_best_ci_high"], g["vs_best_interleaved"]) == (1.03, 0.99, 1.06, True)
    # the guideline was not also taken as a runner-up
    assert compared.count(("trial 0", "guideline")) == 1

    Steal.share_of = 0.3
    r, compared = run((0.90, 0.88, 0.93), tmp_path / "b.db")
    assert any("30% of the CPU time during the study (steal time)" in n for n in r.notes), r.notes
    assert r.best.config.name == "guideline" and r.guideline_gap()[0] == 1.0
    assert any("the guideline was 1.11x faster" in n for n in r.notes), r.notes
    assert all(a == "guideline" for a, _ in compared[compared.index(("trial 0", "guideline")) + 1:])


@pytest.mark.parametrize("allocators", [True, False])
def test_the_final_comparisons_cost_what_was_measured_and_keep_to_the_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, allocators: bool) -> None:
    """The seconds kept for the final comparisons come from the trials' measured starts; when the
    search ran late, the runners-up are not re-measured and the last baselines are compared over
    one pair of processes instead of two, so the study ends within its budget (a stand-in
    clock: trials take 10 s, the searched one long enough to leave no time for the runner-up, a
    comparison what the model says it takes; the figures hold for any number of cores and
    whether or not pytorch-launcher and intel-recommended are twins)."""
    import types

    import rooftune.runconfig as config
    import rooftune.tuning.final_phases as final_phases
    import rooftune.tuning.phases as phases
    import rooftune.tuning.study as study
    from rooftune.platform import current_platform
    from rooftune.tuning.compare import COMPARE_POLICY, comparison_s, pair_start_s
    from rooftune.tuning.study import TrialResult

    if not allocators:  # as where apt-get was not available: pytorch-launcher is intel-recommended's twin
        monkeypatch.setattr(config, "_LIB_DIRS", ())
    elif not (config.allocator_library("jemalloc") or config.allocator_library("tcmalloc")):
        pytest.skip("jemalloc and tcmalloc are not installed (the README's test command installs them)")
    now = [0.0]
    for module in (study, phases, final_phases):  # the study's clock, in each module of its phases
        monkeypatch.setattr(module, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    monkeypatch.setattr(final, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))

    search_s = [10.0]

    def fake_evaluate(cfg, setup, policy, prepare_timeout_s):  # type: ignore[no-untyped-def]
        now[0] += search_s[0] if cfg.name.startswith("trial") else 10.0
        return TrialResult(cfg, True, latency_s=0.005 if cfg.name.startswith("trial") else 0.004, throughput=1.0,
                           verify={"ok": True}, start_s=2.0)

    used: dict[str, int] = {}  # pairs of processes per configuration compared with the best
    start = pair_start_s([TrialResult(RunConfig(runtime="eager"), True, start_s=2.0)], current_platform().usable_cores)

    def fake_interleaved(a, b, setup, objective, policy, pairs=None):  # type: ignore[no-untyped-def]
        now[0] += comparison_s(pairs, start, COMPARE_POLICY)
        used[b.name] = pairs
        return {"ratio": 1.3, "ci_low": 1.2, "ci_high": 1.4, "pairs": 40, "process_pairs": pairs}

    monkeypatch.setattr(study, "_evaluate", fake_evaluate)
    monkeypatch.setattr(final, "interleaved", fake_interleaved)
    # with no search and a generous budget: no runner-up is kept for, every baseline gets two pairs
    r = tune(CNN, runtimes=["eager"], trials=0, budget_s=600, store=str(tmp_path / "a.db"))
    assert r.phase_s["pair_start"] == start >= 2.0 + final.CACHED_START_S
    distinct = len({b.config.key() for b in r.baselines.values()})
    one, two = comparison_s(1, start, COMPARE_POLICY), comparison_s(2, start, COMPARE_POLICY)
    assert one < two < 2 * one
    assert r.phase_s["reserved"] == pytest.approx(distinct * two + one)  # baselines, and the guideline
    assert all(used[n] == 2 for n in r.baselines if n in used) and used["guideline"] == 1
    assert len(used) == distinct + 1  # a baseline that is another's twin is compared once
    assert all(r.speedup[n]["ratio"] == 1.3 for n in r.baselines)
    # a search that ends late (one trial started 5 s before the search's share ran out, ending
    # after the time the runner-up needed but before what the baselines need at one pair each);
    # the guideline stays the best, the searched trial is its runner-up
    now[0] = 0.0
    used.clear()
    reserve = distinct * two + 3 * one  # two runners-up now
    budget = r.phase_s["fixed"] + reserve + 5.0
    # after the search and the guideline's comparison: time for every baseline but the last at two
    # pairs and the last at one, half a pair's difference to spare (for any number of distinct ones)
    search_s[0] = reserve + 5.0 - one - ((distinct - 1) * two + one + 0.5 * (two - one))
    r = tune(CNN, runtimes=["eager"], trials=1, budget_s=budget, store=str(tmp_path / "b.db"))
    assert r.phase_s["reserved"] == pytest.approx(reserve)
    assert [t.config.name for t in r.trials][-1] == "trial 0" and r.best.config.name == "guideline"
    assert any(n.startswith("no time left in the budget to re-measure 1 runner(s)-up") for n in r.notes), r.notes
    # the baselines compared first (the fastest, the closest calls) keep two pairs, the last give theirs up
    order = [used[n] for n in used if n in r.baselines]
    assert "trial 0" not in used and order == sorted(order, reverse=True) and order[0] == 2 and order[-1] == 1, used
    assert any(n.startswith("the budget left too little time to spread every comparison over 2 pairs") for n in r.notes)
    assert r.duration_s <= budget


def test_a_runtime_that_crashed_under_a_preloaded_allocator_is_not_run_under_it_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trials' processes replaced by a stand-in where torchscript aborts under either preloaded
    allocator (as OpenVINO does on some machines), whatever its other settings."""
    import rooftune.tuning.study as study
    from rooftune.tuning.study import TrialResult

    monkeypatch.setattr("rooftune.tuning.space.allocator_library", lambda name: f"/lib/{name}.so")
    ran: list[RunConfig] = []

    def fake_evaluate(cfg: RunConfig, setup, policy, prepare_timeout_s) -> TrialResult:  # noqa: ANN001
        ran.append(cfg)
        if cfg.runtime == "torchscript" and cfg.allocator != "glibc":
            return TrialResult(cfg, False, error="the trial process crashed (exit -6): free(): invalid pointer")
        return TrialResult(cfg, True, latency_s=0.004 if cfg.runtime == "eager" else 0.003, throughput=1.0,
                           verify={"ok": True})

    monkeypatch.setattr(study, "_evaluate", fake_evaluate)
    monkeypatch.setattr(final, "interleaved", lambda *a, **k: {"ratio": 1.0, "ci_low": 0.9, "ci_high": 1.1})
    r = tune(CNN, runtimes=["eager", "torchscript"], trials=40, budget_s=600, store=str(tmp_path / "c.db"))
    crashed = [c for c in ran if c.runtime == "torchscript" and c.allocator != "glibc"]
    assert crashed, "the search never proposed torchscript under a preloaded allocator"
    assert len({c.allocator for c in crashed}) == len(crashed)  # each pair ran once
    skipped = [t for t in r.trials if (t.error or "").startswith("not run: torchscript under the preloaded")]
    assert skipped and all(not t.ok and t.config.allocator != "glibc" for t in skipped)
    assert "crashed in trial" in skipped[0].error and "free(): invalid pointer" in skipped[0].error
    # a crash is the pair's, not the runtime's: torchscript still runs under glibc, eager under both
    assert any(c.runtime == "torchscript" and c.allocator == "glibc" for c in ran)
    assert r.best.config.runtime == "torchscript" and r.best.ok
    # --trials counts the configurations measured, not the proposals skipped (the seeded search
    # does not run out of new proposals here)
    assert not any("search stopped" in n for n in r.notes)
    assert any(t.config.name.startswith("trial") for t in skipped)
    assert len([c for c in ran if c.name.startswith("trial")]) == 40
    with Store(tmp_path / "c.db") as s:  # what was not run is not stored
        assert s.count("trials") == len(ran)
    # the out-of-memory killer's SIGKILL is one configuration's, not the pair's
    from rooftune.tuning.skips import crashed_under_preload as _crashed_under_preload

    aborted, other, killed, silent, bus = (
        TrialResult(RunConfig(runtime="torchscript", allocator="tcmalloc"), False,
                    error=f"the trial process crashed (exit {code}): {why}")
        for code, why in ((-6, "munmap_chunk(): invalid pointer"), (-11, "segfault in a kernel"), (-9, ""), (-11, ""),
                          (-7, "")))
    later = RunConfig(runtime="torchscript", allocator="tcmalloc", batch=2)
    assert _crashed_under_preload(aborted, later)
    assert not _crashed_under_preload(other, later) and not _crashed_under_preload(killed, later)
    # a fault that printed nothing, as OpenVINO's under a preloaded allocator, is the pair's
    assert _crashed_under_preload(silent, later) and _crashed_under_preload(bus, later)
    assert not _crashed_under_preload(silent, RunConfig(runtime="torchscript", allocator="glibc"))
    assert not _crashed_under_preload(aborted, RunConfig(runtime="torchscript", allocator="jemalloc"))


def test_a_model_openvinos_pytorch_frontend_cannot_convert_is_read_from_onnx(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trials' processes replaced by a stand-in where OpenVINO's PyTorch frontend refuses the
    model (as it refuses nn.TransformerEncoder's fast path under a padding mask) and its ONNX export
    runs: the guideline (OpenVINO where ONNX Runtime is not searched) and the openvino-latency
    baseline read the export, with a note naming the ops, and the search does not convert the model
    from PyTorch again."""
    pytest.importorskip("openvino")
    pytest.importorskip("onnx")
    import rooftune.tuning.study as study
    from rooftune.tuning.skips import frontend_refused as _frontend_refused
    from rooftune.tuning.study import TrialResult

    ran: list[RunConfig] = []
    refusal = ("OpConversionFailure: No conversion rule found for operations: aten::_nested_tensor_from_mask, "
               "aten::to_padded_tensor")

    def fake_evaluate(cfg: RunConfig, setup, policy, prepare_timeout_s) -> TrialResult:  # noqa: ANN001
        ran.append(cfg)
        if cfg.runtime == "openvino" and cfg.option("source") == "framework":
            return TrialResult(cfg, False, error=refusal)
        return TrialResult(cfg, True, latency_s=0.002 if cfg.runtime == "openvino" else 0.004, throughput=1.0,
                           verify={"ok": True})

    monkeypatch.setattr(study, "_evaluate", fake_evaluate)
    monkeypatch.setattr(final, "interleaved", lambda *a, **k: {"ratio": 1.0, "ci_low": 0.9, "ci_high": 1.1})
    r = tune(CNN, runtimes=["eager", "openvino"], trials=30, budget_s=600, store=str(tmp_path / "f.db"))
    ov = r.baselines["openvino-latency"]
    assert ov.ok and ov.config.runtime_options == {"hint": "LATENCY", "source": "onnx"} and ov.config.vendor_defaults
    assert r.guideline.ok and r.guideline.config.runtime == "openvino"
    assert r.guideline.config.runtime_options["source"] == "onnx"
    assert ("guideline, openvino-default and openvino-latency read the ONNX export: OpenVINO's PyTorch frontend could not convert "
            "the model (No conversion rule found for operations: aten::_nested_tensor_from_mask, "
            "aten::to_padded_tensor)") in r.notes, r.notes
    from_pytorch = [c for c in ran if c.runtime == "openvino" and c.option("source") == "framework"]
    assert [c.name for c in from_pytorch] == ["guideline"]  # converted from PyTorch once
    skipped = [t for t in r.trials if (t.error or "").startswith("not run: OpenVINO's PyTorch frontend")]
    assert skipped and all(t.config.runtime == "openvino" for t in skipped)
    assert "in guideline (OpConversionFailure: No conversion rule" in skipped[0].error
    assert any(c.runtime == "openvino" and c.name.startswith("trial") for c in ran)  # from ONNX, searched
    with Store(tmp_path / "f.db") as s:  # what was not run is not stored
        assert s.count("trials") == len(ran)
    # other failures, or OpenVINO from ONNX, say nothing about the frontend
    failed = TrialResult(RunConfig(runtime="openvino"), False, error="TimeoutError: preparing took over 600 s")
    assert not _frontend_refused(failed, RunConfig(runtime="openvino", intra_threads=2))
    refused = TrialResult(RunConfig(runtime="openvino"), False, error=refusal)
    assert _frontend_refused(refused, RunConfig(runtime="openvino", precision="int8"))
    assert not _frontend_refused(refused, RunConfig(runtime="openvino", runtime_options={"source": "onnx"}))


def test_a_model_tf2onnx_cannot_convert_is_not_converted_again_by_any_runtime_reading_its_onnx() -> None:
    """A TensorFlow model's op tf2onnx has no conversion for fails every runtime that reads the
    conversion (ONNX Runtime, ncnn, OpenVINO from ONNX) alike: one failure skips the others;
    OpenVINO's own frontend and TensorFlow still run, and other failures skip nothing."""
    from rooftune.tuning.skips import NOT_RUN, not_run
    from rooftune.tuning.study import TrialResult

    error = "OpConversionFailure: tf2onnx has no conversion for op BesselI1e in layer bessel"
    failed = TrialResult(RunConfig(runtime="onnxruntime", name="onnxruntime-default"), False, error=error)
    for cfg in (RunConfig(runtime="onnxruntime", intra_threads=2), RunConfig(runtime="ncnn"),
                RunConfig(runtime="openvino", runtime_options={"source": "onnx"})):
        skipped = not_run(cfg, [failed])
        assert skipped is not None and not skipped.ok
        assert skipped.error == f"{NOT_RUN}tf2onnx could not convert the model in onnxruntime-default ({error})"
    for cfg in (RunConfig(runtime="openvino"), RunConfig(runtime="tensorflow")):
        assert not_run(cfg, [failed]) is None
    timeout = TrialResult(RunConfig(runtime="onnxruntime"), False, error="TimeoutError: preparing took over 600 s")
    assert not_run(RunConfig(runtime="onnxruntime", intra_threads=2), [timeout]) is None


def test_int8_on_a_runtime_whose_quantizer_quantized_nothing_is_not_tried_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trials' processes replaced by a stand-in where ONNX Runtime's quantizer leaves the model
    in fp32 (as it leaves a GRU): its first int8 trial fails and says so, its later int8 proposals
    are not run, its fp32 and the other runtime's int8 still are."""
    from rooftune.runtimes.quantize import int8_missing

    if int8_missing("onnxruntime") or int8_missing("eager"):
        pytest.skip(int8_missing("onnxruntime") or int8_missing("eager"))
    import rooftune.tuning.study as study
    from rooftune.tuning.skips import nothing_quantized as _nothing_quantized
    from rooftune.tuning.study import TrialResult

    ran: list[RunConfig] = []
    nothing = ("ValueError: int8: ONNX Runtime's static quantizer quantized no op of this model (its ops: GRU, "
               "Reshape); it would run in fp32")

    def fake_evaluate(cfg: RunConfig, setup, policy, prepare_timeout_s) -> TrialResult:  # noqa: ANN001
        ran.append(cfg)
        if cfg.runtime == "onnxruntime" and cfg.precision == "int8":
            return TrialResult(cfg, False, error=nothing)
        return TrialResult(cfg, True, latency_s=0.003, throughput=1.0, verify={"ok": True})

    monkeypatch.setattr(study, "_evaluate", fake_evaluate)
    monkeypatch.setattr(final, "interleaved", lambda *a, **k: {"ratio": 1.0, "ci_low": 0.9, "ci_high": 1.1})
    r = tune(CNN, runtimes=["eager", "onnxruntime"], precisions=("fp32", "int8"), trials=30, budget_s=600,
             store=str(tmp_path / "q.db"))
    assert len([c for c in ran if c.runtime == "onnxruntime" and c.precision == "int8"]) == 1
    skipped = [t for t in r.trials if (t.error or "").startswith("not run: onnxruntime's int8 quantizer quantized no op")]
    assert skipped and all(t.config.runtime == "onnxruntime" and t.config.precision == "int8" for t in skipped)
    assert skipped[0].error.endswith(f"({nothing})")
    assert [n for n in r.notes if "quantized no op" in n] == [
        "int8 not on onnxruntime: ONNX Runtime's static quantizer quantized no op of this model (its ops: GRU, "
        "Reshape); it would run in fp32"]
    assert any(c.runtime == "eager" and c.precision == "int8" for c in ran)
    assert any(c.runtime == "onnxruntime" and c.precision == "fp32" and c.name.startswith("trial") for c in ran)
    failed = TrialResult(RunConfig(runtime="onnxruntime", precision="int8"), False, error=nothing)
    assert _nothing_quantized(failed, RunConfig(runtime="onnxruntime", precision="int8", intra_threads=2))
    assert not _nothing_quantized(failed, RunConfig(runtime="onnxruntime"))
    assert not _nothing_quantized(failed, RunConfig(runtime="openvino", precision="int8"))
    # a mixed set, or a peer's own quantizer, that quantized nothing says nothing of another
    mixed = TrialResult(RunConfig(runtime="onnxruntime", precision="int8", keep=("fc",)), False, error=nothing)
    assert not _nothing_quantized(mixed, RunConfig(runtime="onnxruntime", precision="int8"))
    peer = TrialResult(RunConfig(runtime="openvino", precision="int8", vendor_defaults=True,
                                 runtime_options={"quantizer": "accuracy-control"}), False, error=nothing)
    assert not _nothing_quantized(peer, RunConfig(runtime="openvino", precision="int8"))


@pytest.mark.parametrize("objective", ["latency", "throughput"])
def test_the_result_names_the_batch_the_search_chose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     objective: str) -> None:
    """A throughput study searches the batch: its header names the batches searched and the best's,
    not the model's own batch 1; a latency study, or one given --batch, names its one batch."""
    import rooftune.tuning.study as study
    from rooftune.tuning.study import TrialResult

    def fake_evaluate(cfg, setup, policy, prepare_timeout_s):  # type: ignore[no-untyped-def]
        # larger batches are faster per item: the search's best is a batch above 1
        return TrialResult(cfg, True, latency_s=0.004, throughput=100.0 * cfg.batch, verify={"ok": True})

    def fake_interleaved(a, b, setup, objective, policy, pairs=None):  # type: ignore[no-untyped-def]
        return {"ratio": 1.0 if a.key() == b.key() else 2.0, "ci_low": 1.0, "ci_high": 2.0, "pairs": 1}

    monkeypatch.setattr(study, "_evaluate", fake_evaluate)
    monkeypatch.setattr(final, "interleaved", fake_interleaved)
    r = tune(CNN, runtimes=["eager"], trials=3, objective=objective, store=str(tmp_path / "t.db"))
    assert r.batch == 1
    if objective == "latency":
        assert r.batch_text() == "batch 1" and r.to_dict()["batches"] == [1]
    else:
        searched = list(study.THROUGHPUT_BATCHES)
        assert r.to_dict()["batches"] == searched
        assert r.best.config.batch > 1
        assert r.batch_text() == (f"batch searched over {', '.join(map(str, searched))} "
                                  f"(the best: {r.best.config.batch})")
        fixed = tune(CNN, runtimes=["eager"], trials=1, objective=objective, batch=4, store=str(tmp_path / "f.db"))
        assert fixed.batch_text() == "batch 4"


def test_every_runtime_prepares_an_exported_program(tmp_path: Path) -> None:
    """A .pt2 file's module refuses eval() and OpenVINO's tracing; each runtime runs it all the same."""
    from rooftune.runtimes import get_runtime
    from rooftune.workload import load_workload
    from tests.analysis.tiny_models import small_cnn

    module, x = small_cnn()
    torch.export.save(torch.export.export(module.eval(), (x,)), tmp_path / "cnn.pt2")
    with torch.no_grad():
        want = module(x)
    for runtime in ("eager", "torchscript", "onnxruntime", "openvino", "ncnn"):
        rt = get_runtime(runtime)
        if rt.available():
            continue
        wl = load_workload(str(tmp_path / "cnn.pt2"))
        layout = "channels_last" if rt.uses_openmp else "contiguous"
        config = RunConfig(runtime=runtime, set_threads=False, memory_format=layout)
        (out,) = rt.prepare(wl, config, tmp_path / runtime).output()
        assert torch.allclose(out, want, atol=1e-4), runtime


def test_a_study_of_a_model_of_several_outputs_has_its_own_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Trials stored when only a model's first output was checked are not resumed as checked: the
    output count is in the key of a study whose model has more than one (single-output studies keep
    their key, and their stored trials)."""
    import rooftune.tuning.prepare as prepare
    import rooftune.tuning.study as study
    from rooftune.tuning.study import TrialResult

    spaces = []
    real_key = study.study_key

    def key(model, objective, batch, platform_id, space):  # type: ignore[no-untyped-def]
        spaces.append(space)
        return real_key(model, objective, batch, platform_id, space)

    monkeypatch.setattr(prepare, "study_key", key)
    monkeypatch.setattr(study, "_evaluate", lambda cfg, setup, policy, prepare_timeout_s: TrialResult(
        cfg, True, latency_s=0.004, throughput=250.0, verify={"ok": True}))
    monkeypatch.setattr(final, "interleaved", lambda a, b, setup, objective, policy, pairs=None: {
        "ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0, "pairs": 1})
    for model in (CNN, "tests.analysis.tiny_models:two_heads"):
        tune(model, runtimes=["eager"], trials=1, store=str(tmp_path / "t.db"))
    assert "outputs" not in spaces[0] and spaces[1]["outputs"] == 2


def test_a_module_is_tuned_as_a_pt2_named_by_its_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tune(module, example_inputs=...) exports it where the trials' processes can load it: beside
    --save, else in rooftune's data folder; the same module (the same weights) lands on the same
    file and its study resumes, other weights on another."""
    import rooftune.tuning.study as study
    from rooftune.tuning.study import TrialResult

    runs: list[str] = []

    def fake_evaluate(cfg, setup, policy, prepare_timeout_s):  # type: ignore[no-untyped-def]
        runs.append(cfg.name)
        return TrialResult(cfg, True, latency_s=0.004, throughput=250.0, verify={"ok": True})

    monkeypatch.setattr(study, "_evaluate", fake_evaluate)
    monkeypatch.setattr(final, "interleaved", lambda a, b, setup, objective, policy, pairs=None: {
        "ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0, "pairs": 1})
    monkeypatch.setattr("rooftune.store.urls.data_dir", lambda: tmp_path / "data")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    x = torch.randn(1, 3, 16, 16)
    r = tune(m, example_inputs=(x,), runtimes=["eager"], trials=1, store=str(tmp_path / "t.db"))
    path = Path(r.model)
    assert path.parent == tmp_path / "data" / "modules" and path.name.startswith("Sequential-") and path.suffix == ".pt2"
    assert torch.allclose(torch.export.load(str(path)).module()(x), m(x))
    first = len(runs)
    again = tune(m, example_inputs=x, runtimes=["eager"], trials=1, store=str(tmp_path / "t.db"))
    assert again.model == r.model and again.resumed == first and len(runs) == first  # nothing ran again
    saved = tune(m, example_inputs=(x,), runtimes=["eager"], trials=0, store=str(tmp_path / "t.db"),
                 save=str(tmp_path / "out" / "best.json"))
    assert Path(saved.model).parent == tmp_path / "out" and Path(saved.model).name == path.name
    assert json.loads((tmp_path / "out" / "best.json").read_text())["workload"]["model"] == saved.model
    with torch.no_grad():
        m[0].weight.add_(1.0)
    other = tune(m, example_inputs=(x,), runtimes=["eager"], trials=0, store=str(tmp_path / "t.db"))
    assert other.model != r.model and Path(other.model).parent == path.parent
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no partial file left


@pytest.mark.parametrize("source", ["framework", "onnx"])
def test_openvino_bf16_runs_the_fp32_model_at_bf16_and_passes_bf16s_rule(tmp_path: Path, source: str) -> None:
    """bf16 on OpenVINO is the plugin's precision hint over the fp32 IR. A model converted from
    bf16 weights took bf16 inputs, fed float32 arrays, and answered wrongly under either hint."""
    from rooftune.runtimes import get_runtime
    from rooftune.tuning.verify import compare_outputs

    rt = get_runtime("openvino")
    if rt.available():
        pytest.skip(rt.available())
    wl = load_workload(CNN)
    with torch.no_grad():
        ref = output_tensors(wl())
    fp32 = RunConfig(runtime="openvino", intra_threads=1, runtime_options={"source": source})
    bf16 = RunConfig(runtime="openvino", intra_threads=1, precision="bf16", runtime_options={"source": source})
    assert rt.artifact_file(bf16, tmp_path) == rt.artifact_file(fp32, tmp_path)  # one IR, converted once
    prepared = rt.prepare(wl, bf16, tmp_path)
    check = compare_outputs(prepared.output(), ref, "bf16")
    assert check["ok"], check
    assert check["cosine"] > 0.999
    import openvino as ov

    ir = ov.Core().read_model(str(prepared.artifact))
    assert [str(i.get_element_type()) for i in ir.inputs] == ["<Type: 'float32'>"]


@pytest.mark.parametrize("allocator", ["tcmalloc", "jemalloc"])
def test_openvino_runs_under_a_preloaded_allocator(tmp_path: Path, allocator: str) -> None:
    """oneTBB's hwloc binding, loaded with RTLD_DEEPBIND, aborted every OpenVINO process under a
    preloaded malloc ("free(): invalid pointer"); the configuration's environment turns that off."""
    from rooftune.runconfig import allocator_library
    from rooftune.runtimes import get_runtime

    if get_runtime("openvino").available() or not allocator_library(allocator):
        pytest.skip(f"needs OpenVINO and {allocator}")
    ref = reference(tmp_path, CNN)
    cfg = RunConfig(runtime="openvino", intra_threads=1, allocator=allocator)
    assert cfg.environment()["TBB_ENABLE_SANITIZERS"] == "1"
    with Worker(cfg, spec(CNN), ref, tmp_path) as w:
        assert w.info["verify"]["ok"]
        assert w.sample(2) > 0


def test_the_models_own_batch_is_every_configurations(tmp_path: Path) -> None:
    """Example inputs of batch 4 (a callable's, a .pt2's): the guideline, the seeds and the search
    run batch 4 like the baselines, not batch 1 against them."""
    r = tune("tests.analysis.tiny_models:small_cnn_b4", runtimes=["eager", "onnxruntime"], trials=2, budget_s=600,
             store=str(tmp_path / "b.db"), trial_policy=FAST, compare_policy=FAST, compare_pairs=1)
    assert r.batch == 4
    assert {t.config.batch for t in r.trials} == {4}, [(t.config.name, t.config.batch) for t in r.trials]


def test_a_best_from_the_store_is_saved_with_its_artifact(tmp_path: Path) -> None:
    """The second study reads every trial from the store, where the artifacts went with the first
    study's folder: --save prepares the best's again, so best.json runs what was measured."""
    kwargs = dict(runtimes=["onnxruntime"], guidelines_only=True, budget_s=600, store=str(tmp_path / "s.db"),
                  trial_policy=FAST, compare_policy=FAST, compare_pairs=1)
    first = tune(CNN, **kwargs, save=tmp_path / "a" / "best.json")
    again = tune(CNN, **kwargs, save=tmp_path / "b" / "best.json")
    assert again.resumed == len(first.trials)
    saved = json.loads((tmp_path / "b" / "best.json").read_text())
    # ONNX Runtime runs this small network several times as fast as eager PyTorch: the best is one
    # of its configurations, which run an ONNX file
    assert again.best.config.runtime == "onnxruntime", again.best.config.describe()
    assert saved.get("artifact") and Path(saved["artifact"]).exists(), again.notes
    assert Path(saved["artifact"]).parent == tmp_path / "b" and again.best.artifact == saved["artifact"]
    assert any("prepared again" in n for n in again.notes)

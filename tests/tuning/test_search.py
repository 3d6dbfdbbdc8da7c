"""The search starts from what was measured: the guideline, baselines and seeds are told to the
sampler, and its first questions are the fastest one's neighbours."""

from __future__ import annotations

from dataclasses import replace

import optuna
import pytest

from rooftune.platform import Platform
from rooftune.runtimes import get_runtime
from rooftune.tuning import RunConfig
from rooftune.tuning.space import NEIGHBOUR_ORDER, known_trial, neighbours, run_key, search_space
from rooftune.tuning.space import suggest as _suggest

RUNTIMES = ("eager", "onnxruntime", "openvino", "ncnn", "compile")


@pytest.fixture
def space(fake_platform: Platform) -> dict:
    return search_space(fake_platform, {n: get_runtime(n) for n in RUNTIMES}, ["fp32"])


def test_an_option_left_out_reads_as_what_the_runtime_runs_without_it() -> None:
    ov = RunConfig(runtime="openvino", runtime_options={"hint": "THROUGHPUT"})
    assert (ov.option("hint"), ov.option("streams"), ov.option("pinning"), ov.option("source")) == ("THROUGHPUT", 1, False, "framework")
    assert RunConfig(runtime="ncnn").option("conv") == "winograd"
    assert RunConfig(runtime="onnxruntime").option("conv") == "direct"
    assert RunConfig(runtime="eager").option("conv") is None  # eager has no such option
    for name in RUNTIMES:
        rt = get_runtime(name)
        choices = {**rt.options, **rt.peer_options}
        assert set(rt.absent) == set(choices), name  # every option has its default ...
        assert all(rt.absent[k] in choices[k] for k in choices), name  # ... among its allowed values
    # a peer's option stays out of the search space (no study's key changes with it) and out of a
    # configuration at its default
    assert "quantizer" not in get_runtime("openvino").options
    assert RunConfig(runtime="openvino").option("quantizer") == "default"
    peer = RunConfig(runtime="openvino", precision="int8", runtime_options={"quantizer": "default"})
    assert get_runtime("openvino").normalize(peer).runtime_options == {}


def test_a_configuration_is_one_run_whether_its_defaults_are_written_or_not() -> None:
    seed = RunConfig(runtime="openvino", intra_threads=2, runtime_options={"hint": "LATENCY", "streams": 1, "source": "onnx"})
    searched = replace(seed, runtime_options={**seed.runtime_options, "pinning": False, "conv": "direct"})
    assert seed.key() != searched.key() and run_key(seed) == run_key(searched)
    assert run_key(replace(searched, runtime_options={**searched.runtime_options, "pinning": True})) != run_key(seed)
    defaults = RunConfig(runtime="openvino", set_threads=False, vendor_defaults=True, runtime_options={"hint": "LATENCY"})
    assert run_key(defaults) == defaults.key()  # what the vendor defaults run is the runtime's to say


def test_what_was_measured_is_told_where_the_space_holds_it(space: dict) -> None:
    guide = RunConfig(runtime="onnxruntime", intra_threads=2, runtime_options={"execution_mode": "sequential", "spinning": True})
    t = known_trial(guide, space, 0.01)
    assert t is not None and t.value == 0.01 and t.state == optuna.trial.TrialState.COMPLETE
    # the options it left out are told as what they run (graph_optimization all, conv direct)
    assert t.params["onnxruntime.graph_optimization"] == "all" and t.params["onnxruntime.conv"] == "direct"
    assert t.params["intra_threads"] == 2 and t.params["allocator"] == "glibc"
    # the trial asks the same questions back and gives the same run
    study = optuna.create_study()
    study.add_trial(t)
    study.enqueue_trial(t.params)
    again = _suggest(study.ask(), space)
    assert run_key(again) == run_key(guide)
    # an eager configuration with OpenMP unset is the space's "default" wait and "none" binding
    launcher = known_trial(RunConfig(runtime="eager", intra_threads=2, allocator="glibc"), space, 0.05)
    assert launcher is not None and (launcher.params["bind"], launcher.params["wait"]) == ("none", "default")
    # not told: threads left to the runtime, vendor defaults, settings outside the space
    assert known_trial(RunConfig(runtime="eager", set_threads=False), space, 0.05) is None
    assert known_trial(RunConfig(runtime="onnxruntime", set_threads=False, vendor_defaults=True), space, 0.02) is None
    assert known_trial(RunConfig(runtime="eager", intra_threads=2, omp={"OMP_PROC_BIND": "master"}), space, 0.05) is None
    assert known_trial(RunConfig(runtime="eager", intra_threads=2, omp={"KMP_AFFINITY": "compact"}), space, 0.05) is None


def test_the_first_questions_change_the_fastest_one_setting_at_a_time(space: dict) -> None:
    space = {**space, "allocator": ["glibc", "jemalloc", "tcmalloc"]}
    best = known_trial(RunConfig(runtime="onnxruntime", intra_threads=2,
                                 runtime_options={"execution_mode": "sequential", "graph_optimization": "all",
                                                  "spinning": True, "conv": "winograd"}), space, 0.01)
    assert best is not None
    near = neighbours(best)
    changed = [next(k for k in p if p[k] != best.params[k]) for p in near]
    # one setting each, every other value of every setting but the runtime, batch and instances
    assert all(sum(p[k] != best.params[k] for k in p) == 1 for p in near)
    assert changed == ["allocator", "allocator", "onnxruntime.execution_mode", "onnxruntime.graph_optimization",
                       "onnxruntime.graph_optimization", "onnxruntime.spinning", "onnxruntime.conv", "intra_threads"]
    assert {"runtime", "batch", "instances"}.isdisjoint(changed)
    assert NEIGHBOUR_ORDER[0] == "allocator" and NEIGHBOUR_ORDER[-1] == "intra_threads"
    # a study asks them first, in that order, each a configuration the space can run
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=3))
    study.add_trial(best)
    for p in near:
        study.enqueue_trial(p)
    asked = [_suggest(study.ask(), space) for _ in near]
    assert [c.allocator for c in asked[:2]] == ["jemalloc", "tcmalloc"]
    assert asked[2].option("execution_mode") == "parallel" and asked[-1].intra_threads == 1
    assert all(get_runtime(c.runtime).normalize(c) == c for c in asked)

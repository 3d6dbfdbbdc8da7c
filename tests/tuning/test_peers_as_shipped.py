"""The figures a user reads first: the peers as their users run them (OpenVINO as installed, in
the precision it picks), the reported latency of a configuration as its interleaved figure, the two
headlines, and the precisions a study searches by default."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import rooftune.tuning.compare as final
from rooftune.cli import main
from rooftune.errors import InvalidArgument
from rooftune.tuning import RunConfig, Worker, baselines, default_precisions, precisions_for, tune
from rooftune.tuning.study import TrialResult, TuneResult
from rooftune.tuning.table import TUNE_COLUMNS, guard_lines, tune_rows

CNN = "tests.analysis.tiny_models:small_cnn"


def _platform(isa: tuple[str, ...]) -> SimpleNamespace:
    return SimpleNamespace(effective_isa=isa, physical_cores=2, logical_cores=2, usable_cores=2, sockets=1,
                           openmp={"library": "libgomp"},
                           affinity=(0, 1), numa_nodes=1)


def test_default_precisions_add_bf16_only_where_a_peer_runs_it_natively() -> None:
    ov = {"eager": object(), "openvino": object()}
    assert default_precisions(_platform(("avx512f", "avx512_bf16")), ov) == ("fp32", "bf16")
    assert default_precisions(_platform(("avx512f", "amx_bf16")), ov) == ("fp32", "bf16")
    assert default_precisions(_platform(("avx512f",)), ov) == ("fp32",)  # no native bf16
    assert default_precisions(_platform(("avx512_bf16",)), {"eager": object()}) == ("fp32",)  # no peer picks it


def test_fp32_keeps_to_fp32_and_refuses_the_wider_switches() -> None:
    assert precisions_for(fp32=True) == ("fp32",)
    assert precisions_for() is None  # the default, resolved by the study on its machine
    with pytest.raises(InvalidArgument, match=r"invalid --fp32 'with --int8'.*allowed alone"):
        precisions_for(fp32=True, int8=True)


def test_the_cli_refuses_fp32_with_bf16_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["tune", CNN, "--fp32", "--bf16"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "--fp32" in err and "--bf16" in err and "Traceback" not in err


def test_openvino_as_installed_is_a_peer_beside_the_pinned_one() -> None:
    from rooftune.runtimes import chosen_runtimes

    available, _ = chosen_runtimes(None)
    if "openvino" not in available:
        pytest.skip("needs OpenVINO")
    peers = {c.name: c for c in baselines(_platform(("avx512f",)), available)}  # type: ignore[arg-type]
    assert peers["openvino-default"].precision == "default" and peers["openvino-default"].runtime_options == {}
    assert peers["openvino-default"].vendor_defaults and not peers["openvino-default"].set_threads
    assert peers["openvino-latency"].precision == "fp32"
    peers["openvino-default"].validate()
    assert "precision as installed" in peers["openvino-default"].describe()


def test_openvino_as_installed_reports_the_precision_it_chose_and_is_checked_by_its_rule(tmp_path: Path) -> None:
    """OpenVINO with nothing set computes in bf16 on a CPU with native bf16 (f32 elsewhere): the
    trial says which, and its output passes the guard of that precision."""
    from rooftune.platform import current_platform
    from rooftune.runtimes import get_runtime
    from rooftune.runtimes.base import output_tensors
    from rooftune.workload import load_workload

    if get_runtime("openvino").available():
        pytest.skip("needs OpenVINO")
    wl = load_workload(CNN)
    ref = tmp_path / "ref.pt"
    with torch.no_grad():
        torch.save(output_tensors(wl.module(*wl.inputs)), ref)
    cfg = RunConfig(runtime="openvino", set_threads=False, vendor_defaults=True, precision="default",
                    name="openvino-default")
    with Worker(cfg, {"model": CNN, "inputs": None, "options": {}}, ref, tmp_path) as w:
        native = bool(set(current_platform().effective_isa) & {"avx512_bf16", "amx_bf16"})
        assert w.info["precision"] == ("bf16" if native else "fp32")
        assert w.info["verify"]["ok"], w.info["verify"]
        if native:
            assert "cosine" in w.info["verify"]["rule"] and w.info["verify"]["max_rel"] > 0


def _groups(median: float, spread: float, n: int, seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    return [[median * (1 + rng.uniform(-spread, spread)) for _ in range(n)] for _ in range(2)]


def test_reported_latency_is_the_interleaved_figure_after_a_slow_stretch(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    """The baselines' trials ran in a slow stretch of the host (twice as slow); the comparisons
    then timed both sides in turn: every reported latency is the interleaved one, so the table's
    times divide into the ratios beside them; the trials' medians are kept as trial_latency_s."""
    import rooftune.tuning.study as study

    trial_s = {"vanilla": 0.040, "pytorch-launcher": 0.036, "intel-recommended": 0.036, "guideline": 0.010}
    truth = {"vanilla": 0.020, "pytorch-launcher": 0.018, "intel-recommended": 0.018, "guideline": 0.011}

    def fake_evaluate(cfg, setup, policy, prepare_timeout_s):  # type: ignore[no-untyped-def]
        t = trial_s.get(cfg.name, 0.010)
        return TrialResult(cfg, True, latency_s=t, p90_s=t * 1.1, p99_s=t * 1.2, throughput=1 / t,
                           verify={"ok": True})

    def fake_interleaved(a, b, setup, objective, policy, pairs=None):  # type: ignore[no-untyped-def]
        if a.key() == b.key():
            return final.itself()
        best, other = _groups(0.010, 0.02, 20, 1), _groups(truth.get(b.name, 0.012), 0.02, 20, 2)
        return {**final.summary(other, best, objective), "process_pairs": 2}

    monkeypatch.setattr(study, "_evaluate", fake_evaluate)
    monkeypatch.setattr(final, "interleaved", fake_interleaved)
    r = tune(CNN, runtimes=["eager"], trials=0, budget_s=600, store=str(tmp_path / "s.db"), precisions=("fp32",),
             save=tmp_path / "best.json")
    assert r.best.figures_from == "interleaved" and r.best.latency_s == r.best_interleaved_s()
    d = json.loads(json.dumps(r.to_dict(), default=str))
    for name in ("vanilla", "pytorch-launcher", "intel-recommended"):
        b, sp = d["baselines"][name], d["speedup"][name]
        assert b["figures_from"] == "interleaved" and b["trial_latency_s"] == trial_s[name]
        # the reported figures agree with the ratio beside them (not 3.6-4x from the trials)
        assert b["latency_s"] / d["best"]["latency_s"] == pytest.approx(sp["ratio"], rel=1e-9)
        assert sp["ci_low"] <= b["latency_s"] / d["best"]["latency_s"] <= sp["ci_high"]
        assert b["throughput"] == pytest.approx(1 / b["latency_s"])
    assert "vanilla" in r.drifted()  # the trial's own figure is still named as off
    assert json.loads((tmp_path / "best.json").read_text())["figures"]["latency_s"] == r.best.latency_s
    rows = {row[0]: row for row in tune_rows(r)}
    p50, trial_p50 = TUNE_COLUMNS.index("p50"), TUNE_COLUMNS.index("trial p50")
    assert rows["vanilla"][p50].startswith("2") and rows["vanilla"][p50].endswith(" ms"), rows["vanilla"]
    assert rows["vanilla"][trial_p50] == "40 ms", rows["vanilla"]


def _trial(name: str, runtime: str, latency: float, precision: str = "fp32", ran: str = "") -> TrialResult:
    return TrialResult(RunConfig(runtime=runtime, precision=precision, name=name), True, latency_s=latency,
                       throughput=1 / latency, ran_precision=ran,
                       verify={"ok": True, "cosine": 0.9999, "top1": 1.0, "max_rel": 0.004, "rule": "bf16 rule"})


def _result(best: TrialResult, speedup: dict[str, dict[str, float]], **kw: object) -> TuneResult:
    base = {"vanilla": _trial("vanilla", "eager", 0.040),
            "openvino-default": _trial("openvino-default", "openvino", 0.012, "default", "bf16"),
            "openvino-latency": _trial("openvino-latency", "openvino", 0.020)}
    return TuneResult(model="m", objective="latency", batch=1, best=best, guideline=best, guideline_reasons=(),
                      baselines=base, speedup=speedup, trials=(best,), notes=(), duration_s=1.0, **kw)  # type: ignore[arg-type]


def test_two_headlines_over_the_peer_as_shipped_and_over_the_fp32_peer() -> None:
    sp = {"vanilla": {"ratio": 4.0, "ci_low": 3.8, "ci_high": 4.2, "pairs": 20},
          "openvino-default": {"ratio": 1.10, "ci_low": 1.05, "ci_high": 1.15, "pairs": 20},
          "openvino-latency": {"ratio": 1.9, "ci_low": 1.8, "ci_high": 2.0, "pairs": 20}}
    best = _trial("guideline bf16", "onnxruntime", 0.010, "bf16")
    fp32 = _trial("trial 3", "onnxruntime", 0.018)
    r = _result(best, sp, fp32_best=fp32,
                fp32_vs_peer={"ratio": 1.07, "ci_low": 1.03, "ci_high": 1.11, "pairs": 20, "peer": "openvino-latency"})
    h = r.headlines()
    assert h["best_peer_as_shipped"]["peer"] == "openvino-default"
    assert h["best_peer_as_shipped"]["peer_precision"] == "bf16" and h["best_peer_as_shipped"]["ratio"] == 1.10
    assert h["best_fp32_peer"]["peer"] == "openvino-latency" and h["best_fp32_peer"]["ratio"] == 1.07
    assert h["best_fp32_peer"]["precision"] == "fp32" and "trial 3" not in h["best_fp32_peer"]["of"]
    lines = r.headline_lines()
    assert lines[0].startswith("over the best peer as shipped: 1.10x (95 % CI 1.05-1.15) against openvino-default (bf16)")
    assert lines[1].startswith("fp32 over the best fp32 peer: 1.07x (95 % CI 1.03-1.11) against openvino-latency (fp32)")
    rows = {row[0]: row for row in tune_rows(r)}
    assert rows["openvino-default"][TUNE_COLUMNS.index("precision")] == "bf16"
    assert rows["fp32 best"][-1].startswith("openvino-latency is 1.07x")
    guards = guard_lines(r)
    assert any(g.startswith("openvino-default runs bf16: mean cosine 0.9999") for g in guards)
    assert any(g.startswith("best runs bf16") for g in guards)
    d = r.to_dict()
    assert d["headlines"]["best_fp32_peer"]["ratio"] == 1.07 and d["fp32"]["best"]["precision"] == "fp32"
    assert d["baselines"]["openvino-default"]["precision"] == "bf16"


def test_an_fp32_best_takes_its_fp32_headline_from_its_own_comparisons() -> None:
    sp = {"vanilla": {"ratio": 4.0, "ci_low": 3.8, "ci_high": 4.2, "pairs": 20},
          "openvino-default": {"ratio": 0.95, "ci_low": 0.9, "ci_high": 1.0, "pairs": 20},
          "openvino-latency": {"ratio": 1.3, "ci_low": 1.2, "ci_high": 1.4, "pairs": 20}}
    r = _result(_trial("trial 1", "onnxruntime", 0.010), sp)
    h = r.headlines()
    assert h["best_peer_as_shipped"]["peer"] == "openvino-default" and h["best_peer_as_shipped"]["ratio"] == 0.95
    assert h["best_fp32_peer"]["peer"] == "openvino-latency" and h["best_fp32_peer"]["ratio"] == 1.3
    assert r.fp32_best is None and r.to_dict()["fp32"] is None


def test_a_stored_trial_keeps_the_precision_its_runtime_chose() -> None:
    t = _trial("openvino-default", "openvino", 0.012, "default", "bf16")
    row = {"config": t.config.to_dict(), "status": "ok", "result": json.loads(json.dumps(t.to_dict()))}
    back = TrialResult.from_stored(row)
    assert back.precision == "bf16" and back.config.precision == "default"
    plain = _trial("x", "eager", 0.01)
    again = TrialResult.from_stored({"config": plain.config.to_dict(), "status": "ok", "result": plain.to_dict()})
    assert again.ran_precision == "" and again.precision == "fp32"
    assert math.isnan(replace(again).trial_latency_s)


def test_the_launcher_and_intel_recipes_pin_cores_and_preload_intel_openmp() -> None:
    """torch.backends.xeon.run_cpu preloads Intel OpenMP where it finds it, sets its affinity and
    block time, preloads tcmalloc (else jemalloc) and binds the instance to its physical cores;
    Intel's guide does the same with KMP_BLOCKTIME=0."""
    from rooftune.runconfig import allocator_library, intel_openmp_library

    if intel_openmp_library() is None:
        pytest.skip("needs the intel-openmp package")
    peers = {c.name: c for c in baselines(_platform(("avx512f",)), {})}  # type: ignore[arg-type]
    launcher, intel = peers["pytorch-launcher"], peers["intel-recommended"]
    for cfg in (launcher, intel):
        assert cfg.openmp == "intel" and cfg.pin and cfg.intra_threads == 2
        env = cfg.environment()
        assert env["LD_PRELOAD"].split(":")[0] == intel_openmp_library()
        assert env["OMP_NUM_THREADS"] == "2"
    assert launcher.omp == {"KMP_AFFINITY": "granularity=fine,compact,1,0", "KMP_BLOCKTIME": "1"}
    assert intel.omp["KMP_BLOCKTIME"] == "0" and "compact" in intel.omp["KMP_AFFINITY"]
    if allocator_library("tcmalloc"):
        assert launcher.environment()["LD_PRELOAD"].endswith(str(allocator_library("tcmalloc")))
    assert "intel OpenMP, pinned" in launcher.describe()


def test_the_launcher_falls_back_to_jemalloc_with_its_own_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without tcmalloc the launcher preloads jemalloc and exports its MALLOC_CONF with it."""
    from rooftune.runconfig import LAUNCHER_JEMALLOC_CONF
    from rooftune.tuning import guidelines

    monkeypatch.setattr(guidelines, "allocator_library",
                        lambda name: "/usr/lib/libjemalloc.so.2" if name == "jemalloc" else None)
    launcher = {c.name: c for c in baselines(_platform(("avx512f",)), {})}["pytorch-launcher"]  # type: ignore[arg-type]
    assert launcher.allocator == "jemalloc"
    assert launcher.omp["MALLOC_CONF"] == LAUNCHER_JEMALLOC_CONF
    with pytest.raises(InvalidArgument, match="MALLOC_CONF"):
        RunConfig(runtime="eager", omp={"MALLOC_CONF": "prof:true,prof_prefix:/tmp/x"})


def test_settings_added_later_leave_a_stored_configurations_key_alone() -> None:
    import hashlib

    cfg = RunConfig(runtime="eager", intra_threads=2, name="x")
    d = cfg.to_dict()
    for k in ("name", "openmp", "pin", "keep"):
        d.pop(k)
    old = hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]
    assert cfg.key() == old
    assert replace(cfg, pin=True).key() != old and replace(cfg, openmp="intel").key() != old
    int8 = replace(cfg, precision="int8")
    assert replace(int8, keep=("fc",)).key() != int8.key()  # a mixed set is another configuration


def test_a_pinned_configuration_is_bound_to_one_cpu_per_core(tmp_path: Path) -> None:
    from rooftune.platform.sysfs import one_cpu_per_core
    from rooftune.runconfig import pinned_cpus

    for cpu, core in ((0, 0), (1, 1), (2, 0), (3, 1)):  # 2 cores, 2 threads each
        topo = tmp_path / f"sys/devices/system/cpu/cpu{cpu}/topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text("0\n")
        (topo / "core_id").write_text(f"{core}\n")
    assert one_cpu_per_core([0, 1, 2, 3], root=tmp_path) == (0, 1)
    import os

    assert set(pinned_cpus(1)) <= os.sched_getaffinity(0) and len(pinned_cpus(1)) == 1
    cores = one_cpu_per_core(sorted(os.sched_getaffinity(0)))
    if len(cores) > 1:  # each pinned instance on cores of its own, as the launcher's --ninstances
        assert pinned_cpus(1, 1) == cores[1:2] and not set(pinned_cpus(1, 0)) & set(pinned_cpus(1, 1))
    with pytest.raises(ValueError, match="instance"):
        pinned_cpus(1, len(cores))
    RunConfig(runtime="eager", instances=2, intra_threads=1, pin=True).validate(4)
    with pytest.raises(InvalidArgument, match="pin"):
        RunConfig(runtime="eager", instances=3, intra_threads=2, pin=True).validate(4)
    with pytest.raises(InvalidArgument, match="openmp"):
        RunConfig(runtime="eager", openmp="gnu").validate()


def test_an_fp32_trial_slower_than_the_fp32_peer_hands_the_fp32_answer_to_the_peer() -> None:
    """The fastest fp32 trial (by its trial) read slower than ONNX Runtime's default interleaved:
    the fp32 answer is the peer itself, never slower than what the user would pick by hand."""
    from rooftune.tuning.final_phases import _fp32_answer

    best = _trial("guideline bf16", "openvino", 0.002, "bf16")
    ours = _trial("trial 4", "openvino", 0.0028)
    base = {"onnxruntime-default": _trial("onnxruntime-default", "onnxruntime", 0.0030),
            "openvino-default": _trial("openvino-default", "openvino", 0.0021, "default", "bf16")}
    speedup = {"onnxruntime-default": {"ratio": 1.6, "ci_low": 1.5, "ci_high": 1.7, "pairs": 20},
               "openvino-default": {"ratio": 1.05, "ci_low": 1.03, "ci_high": 1.06, "pairs": 20}}
    notes: list[str] = []

    def slower(a, b, pairs):  # type: ignore[no-untyped-def]
        assert (a.name, b.name) == ("trial 4", "onnxruntime-default")  # the fastest fp32 peer, not the bf16 one
        return {"ratio": 0.97, "ci_low": 0.96, "ci_high": 1.0, "pairs": 40}

    got, c = _fp32_answer(best, [best, ours, *base.values()], base, speedup, slower, 2, "latency",  # type: ignore[arg-type]
                          lambda *a: None, notes)
    assert got.config.name == "onnxruntime-default" and c is not None and c["pairs"] == 0 and c["peer"] == "onnxruntime-default"
    assert any("the fp32 best is onnxruntime-default" in n for n in notes)
    plain = _result(best, speedup)
    r = replace(plain, baselines={**plain.baselines, **base}, fp32_best=got, fp32_vs_peer=c)
    assert r.headlines()["best_fp32_peer"]["ratio"] == 1.0
    assert {row[0]: row for row in tune_rows(r)}["fp32 best"][-1] == "it is onnxruntime-default"

    def faster(a, b, pairs):  # type: ignore[no-untyped-def]
        return {"ratio": 1.08, "ci_low": 1.05, "ci_high": 1.1, "pairs": 40}

    got, c = _fp32_answer(best, [best, ours, *base.values()], base, speedup, faster, 2, "latency",  # type: ignore[arg-type]
                          lambda *a: None, [])
    assert got.config.name == "trial 4" and c is not None and c["ratio"] == 1.08


def test_under_fp32_a_peer_that_ran_bf16_stays_a_peer_however_fast(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    import rooftune.tuning.study as study
    from rooftune.runtimes import get_runtime

    if get_runtime("openvino").available():
        pytest.skip("needs OpenVINO")

    def fake_evaluate(cfg, setup, policy, prepare_timeout_s):  # type: ignore[no-untyped-def]
        t = 0.002 if cfg.name == "openvino-default" else 0.004
        return TrialResult(cfg, True, latency_s=t, throughput=1 / t, verify={"ok": True},
                           ran_precision="bf16" if cfg.precision == "default" else "")

    def fake_interleaved(a, b, setup, objective, policy, pairs=None):  # type: ignore[no-untyped-def]
        if a.key() == b.key():
            return final.itself()
        ratio = 0.5 if b.name == "openvino-default" else 1.2
        return {"ratio": ratio, "ci_low": ratio * 0.95, "ci_high": ratio * 1.05, "pairs": 20}

    monkeypatch.setattr(study, "_evaluate", fake_evaluate)
    monkeypatch.setattr(final, "interleaved", fake_interleaved)
    kw = dict(runtimes=["eager", "openvino"], trials=0, budget_s=600)
    r = tune(CNN, precisions=("fp32",), store=str(tmp_path / "a.db"), **kw)
    assert r.best.config.name != "openvino-default" and r.best.precision == "fp32"
    assert r.speedup["openvino-default"]["ratio"] == 0.5  # still compared, and reported as faster
    assert any("openvino-default (bf16)" in n and "it stays a peer" in n for n in r.notes)
    assert r.headlines()["best_peer_as_shipped"]["ratio"] == 0.5  # the honest headline: the peer is faster
    both = tune(CNN, precisions=("fp32", "bf16"), store=str(tmp_path / "b.db"), **kw)
    assert both.best.config.name == "openvino-default"  # bf16 allowed: the faster peer is the answer


def test_the_fp32_best_row_divides_into_the_ratio_with_its_peer() -> None:
    sp = {"vanilla": {"ratio": 4.0, "ci_low": 3.8, "ci_high": 4.2, "pairs": 20,
                      "baseline_latency_s": 0.041, "best_latency_s": 0.0102},
          "openvino-default": {"ratio": 1.10, "ci_low": 1.05, "ci_high": 1.15, "pairs": 20,
                               "baseline_latency_s": 0.011, "best_latency_s": 0.0099},
          "openvino-latency": {"ratio": 1.9, "ci_low": 1.8, "ci_high": 2.0, "pairs": 20,
                               "baseline_latency_s": 0.019, "best_latency_s": 0.0101}}
    r = _result(_trial("guideline bf16", "onnxruntime", 0.010, "bf16"), sp, fp32_best=_trial("trial 3", "onnxruntime", 0.030),
                fp32_vs_peer={"ratio": 1.07, "ci_low": 1.03, "ci_high": 1.11, "pairs": 20, "peer": "openvino-latency",
                              "baseline_latency_s": 0.0185, "best_latency_s": 0.0170}).with_interleaved_figures()
    assert r.fp32_best is not None and r.fp32_best.figures_from == "interleaved"
    peer = r.baselines["openvino-latency"]
    assert peer.latency_s / r.fp32_best.latency_s == pytest.approx(1.07)
    assert peer.latency_s / r.best.latency_s == pytest.approx(1.9)
    assert r.fp32_best.trial_latency_s == 0.030

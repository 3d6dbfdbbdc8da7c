"""A study with a serving scenario (rooftune.tuning.serving): its arguments refused in one line
before anything runs, a configuration served from worker processes' slots, and a whole server
study of a small CNN with its peers, its answer, best.json and the table. Figures are never
asserted: only that every setup was checked, measured and reported."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import rooftune.tuning.serving as serving
from rooftune.bench import Policy
from rooftune.bench.serving import run_load
from rooftune.errors import InvalidArgument
from rooftune.fileio import json_text
from rooftune.runconfig import RunConfig
from rooftune.tuning import tune
from rooftune.tuning.spec import TuneSpec

FAST = Policy(number=1, warmup_s=0.05, budget_s=0.3, min_samples=6, max_samples=60)
CNN = "tests.analysis.tiny_models:small_cnn"


@pytest.mark.parametrize("kwargs,name,allowed", [
    (dict(scenario="server"), "--scenario", "needs a latency target"),
    (dict(scenario="batch"), "--scenario", "allowed single-stream, server, offline"),
    (dict(scenario="server", slo_p99_ms=0), "--slo-p99", "milliseconds > 0"),
    (dict(scenario="server", slo_p99_ms=-5.0), "--slo-p99", "milliseconds > 0"),
    (dict(scenario="server", slo_p99_ms=math.nan), "--slo-p99", "milliseconds > 0"),
    (dict(slo_p99_ms=50.0), "--slo-p99", "only with --scenario server"),
    (dict(scenario="offline", slo_p90_ms=50.0), "--slo-p90", "only with --scenario server"),
    (dict(scenario="server", slo_p99_ms=50.0, slo_p90_ms=20.0), "--slo-p90", "one latency target"),
    (dict(scenario="offline", objective="latency"), "--objective", "throughput with --scenario offline"),
    (dict(scenario="server", slo_p99_ms=50.0, train=True), "--scenario", "without --train"),
])
def test_a_scenario_that_cannot_run_is_refused_in_one_line(kwargs: dict, name: str, allowed: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        TuneSpec(**kwargs)
    assert e.value.name == name and allowed in str(e.value) and "\n" not in str(e.value)


def test_a_scenario_decides_the_objective_and_the_default_budget() -> None:
    assert TuneSpec(scenario="offline").objective == "throughput"
    server = TuneSpec(scenario="server", slo_p99_ms=50)
    assert server.objective == "latency" and server.budget_s == 480.0 and server.slo == ("p99", 50.0)
    assert TuneSpec().budget_s == 240.0 and TuneSpec(scenario="single-stream").budget_s == 240.0


def test_the_cli_refuses_a_server_without_a_target_in_one_line(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "rooftune", "tune", CNN, "--scenario", "server", "--db",
                        str(tmp_path / "t.db")], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "--scenario" in p.stderr and "--slo-p99" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_an_slo_below_the_single_request_latency_is_refused_with_the_latency() -> None:
    """The fastest configuration answers one request in 5 ms: a 2 ms p99 target is refused, the
    message giving the latency."""
    study = SimpleNamespace(spec=TuneSpec(scenario="server", slo_p99_ms=2.0), started=0.0, notes=[],
                            results=[SimpleNamespace(ok=True, latency_s=0.005)], best=SimpleNamespace(ok=True))
    with pytest.raises(InvalidArgument) as e:
        serving.ServingPhase.serving(study)  # type: ignore[arg-type]
    assert "--slo-p99" in str(e.value) and "5.00 ms" in str(e.value)


def test_a_runtimes_streams_serve_side_by_side(tmp_path: Path) -> None:
    """OpenVINO with two streams in one process: two slots, each on its own infer request, checked
    like any trial, then served by the load generator."""
    pytest.importorskip("openvino")
    from rooftune.tuning.server import Server
    from rooftune.tuning.setup import Setup

    setup = Setup({"model": CNN}, tmp_path)
    cfg = RunConfig(runtime="openvino", intra_threads=2, runtime_options={"streams": 2, "hint": "THROUGHPUT"})
    with Server(setup.group(cfg), streams=None) as server:
        assert server.info["verify"]["ok"] and len(server.slots) == 2
        run = run_load(server.slots, np.zeros(50))
        assert len(run.latencies) == 50 and all(x > 0 for x in run.latencies)


@pytest.mark.timeout(900)
def test_a_server_study_serves_its_setups_and_the_peers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("SEARCH_STEPS", 3), ("PROBE_S", 0.3), ("OFFLINE_S", 0.3), ("SERVER_ROUNDS", 1)):
        monkeypatch.setattr(serving, name, value)
    candidates = serving.serving_candidates  # the fastest configuration as it is and as instances
    monkeypatch.setattr(serving, "serving_candidates",
                        lambda trials, cores, bases=2, objective="latency": candidates(trials, cores, 1, objective)[:2])
    save = tmp_path / "best.json"
    r = tune(CNN, runtimes=["eager", "onnxruntime"], guidelines_only=True, precisions=("fp32",), budget_s=120,
             store=str(tmp_path / "t.db"), save=save, trial_policy=FAST, compare_policy=FAST, compare_pairs=1,
             scenario="server", slo_p99_ms=50.0)
    s = r.serving
    assert s is not None and s["scenario"] == "server" and s["quantile"] == "p99" and s["slo_ms"] == 50.0
    names = {x["name"] for x in s["setups"]}
    assert {"vanilla", "onnxruntime-default"} <= names, names
    ran = [x for x in s["setups"] if x["error"] is None]
    assert ran and all(x["verify"]["ok"] for x in ran)
    assert any(not x["peer"] for x in ran), s["setups"]  # at least one of the study's own setups served
    assert s["best"] in names and s["best_peer"] in names
    best = next(x for x in s["setups"] if x["name"] == s["best"])
    assert best["rate"] > 0 and best["lo"] <= best["rate"] <= best["hi"]
    assert best["at_rate"]["percentiles"]["p99"]["ms"] > 0 and best["at_rate"]["requests"] >= 368
    assert set(s["speedup"]) == {x["name"] for x in ran if x["peer"] and x["name"] != s["best"]}
    assert s["generator_cpu_us_per_request"] > 0 and "rooftune exec --config best.json" in s["exec"]
    saved = json.loads(save.read_text())
    assert saved["serving"]["name"] == s["best"] and saved["serving"]["slo_ms"] == 50.0
    assert RunConfig.from_dict(saved["config"]).to_dict() == best["config"]
    json.loads(json_text(r.to_dict()), parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))

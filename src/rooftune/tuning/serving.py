"""The serving phase of a study (``--scenario server`` or ``offline``): after the study found the
fastest configurations per runtime and precision, the knobs a server has - instances (processes,
each pinned to cores of its own), threads per instance, a runtime's streams, batch and dynamic
batching's wait - are tried on the best of them, and every setup, the peers' included, is served
by the same open-loop load generator (:mod:`rooftune.bench.serving`).

    peers        each serving peer as its users run it, started, checked and measured
    candidates   variants of the study's best configurations, in a fixed order, within the budget
    final        the best and every peer measured again, interleaved round by round

Server: a setup's figure is the largest Poisson arrival rate whose p99 (or p90) latency, queueing
included, stays within the target, bisected between 0 and its offline rate; its interval is where
the probes' own percentile intervals decided. Offline: the rate of everything queued at once,
the median of interleaved rounds. Every setup runs the configuration its trial checked (the
instances' outputs are checked again as they start): a setup that computes wrong is never served.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rooftune.bench import stats
from rooftune.bench.serving import (
    QUANTILES,
    LoadRun,
    RateSearch,
    poisson_arrivals,
    rate_under_slo,
    run_load,
    samples_for_quantile,
)
from rooftune.errors import InvalidArgument
from rooftune.runconfig import RunConfig
from rooftune.tuning.guidelines import physical_usable
from rooftune.tuning.server import Server
from rooftune.tuning.trial import TrialFailed

#: The share of a serving study's budget its ordinary phases get (the fastest configurations per
#: runtime and precision); the serving phase has the rest.
STUDY_SHARE = 0.4
#: Probes of the rate search per setup, and the relative width at which it stops earlier.
SEARCH_STEPS = 5
SEARCH_TOLERANCE = 0.04
#: Seconds of arrivals a probe lasts at least (more where the quantile needs more requests), and
#: at most.
PROBE_S = 2.0
PROBE_MAX_S = 10.0
#: Seconds an offline run lasts (its request count from a short run first).
OFFLINE_S = 1.5
#: Interleaved rounds of the final measurements: confirmations at each finalist's rate (server),
#: offline runs (offline: six is the fewest whose median's interval is bounded).
SERVER_ROUNDS = 1
OFFLINE_ROUNDS = 6
#: The seed of every schedule: each setup faces the same arrivals at a given rate.
SEED = 0


@dataclass(frozen=True)
class ServeSetup:
    """A configuration as a server runs it: ``streams`` slots per instance (None: as many as the
    runtime recommends, one without streams) and dynamic batching's ``wait_ms`` (with a batch > 1),
    named, with the source of a peer's recipe."""

    config: RunConfig
    streams: int | None = None
    wait_ms: float = 0.0
    name: str = ""
    source: str = ""
    peer: bool = False

    def describe(self, slots: int | None = None) -> str:
        c = self.config
        parts = [c.describe()]
        if slots is not None and slots > c.instances:
            parts.append(f"{slots // max(1, c.instances)} streams each")
        if c.batch > 1:
            parts.append(f"dynamic batching up to {c.batch}, wait {self.wait_ms:.1f} ms" if self.wait_ms
                         else f"batches of {c.batch}")
        return ", ".join(parts)


def serving_peers(platform: Any, available: dict[str, Any], framework: str = "torch") -> list[ServeSetup]:
    """The peers a user serves with, as shipped, each with its source: PyTorch eager as installed,
    PyTorch's launcher's multi-instance recipe, ONNX Runtime as installed, OpenVINO with its
    THROUGHPUT hint (benchmark_app's default on CPU, as many infer requests as it recommends) and
    with its LATENCY hint."""
    from rooftune.tuning.guidelines import baselines

    cores = physical_usable(platform)
    by_name = {c.name: c for c in baselines(platform, available, framework)}
    out = []
    if "vanilla" in by_name:
        out.append(ServeSetup(by_name["vanilla"], streams=1, name="vanilla", peer=True,
                              source="PyTorch eager as installed, one request at a time"))
    if "pytorch-launcher" in by_name and cores > 1:
        launcher = by_name["pytorch-launcher"]
        out.append(ServeSetup(replace(launcher, instances=cores, intra_threads=1), streams=1,
                              name="pytorch-launcher-instances", peer=True,
                              source=f"python -m torch.backends.xeon.run_cpu --ninstances {cores}: one core each, "
                                     "pinned, its allocator and OpenMP settings"))
    if "onnxruntime" in available:
        out.append(ServeSetup(RunConfig(runtime="onnxruntime", set_threads=False, vendor_defaults=True,
                                        name="onnxruntime-default"), streams=1, name="onnxruntime-default", peer=True,
                              source="ONNX Runtime as installed, one session"))
    if "openvino" in available:
        for hint, source in (("THROUGHPUT", "OpenVINO's THROUGHPUT hint (benchmark_app's default on CPU), its "
                                            "recommended number of infer requests"),
                             ("LATENCY", "OpenVINO's LATENCY hint, one infer request")):
            name = f"openvino-{hint.lower()}-hint"
            cfg = RunConfig(runtime="openvino", set_threads=False, vendor_defaults=True, precision="default",
                            runtime_options={"hint": hint}, name=name)
            out.append(ServeSetup(cfg, streams=None if hint == "THROUGHPUT" else 1, name=name, source=source, peer=True))
    return out


def serving_candidates(trials: list[Any], cores: int, bases: int = 2, objective: str = "latency") -> list[ServeSetup]:
    """Variants of the ``bases`` best verified configurations (by the study's ``objective``) of
    distinct runtime and precision, in the order they are tried: as they are; one pinned instance
    per core; OpenVINO's streams, one per core; batches of 2 and 4 with a dynamic batcher that
    waits at most one call of the configuration."""
    seen: set[tuple[str, str]] = set()
    picked = []
    for t in sorted((t for t in trials if t.ok and math.isfinite(t.score(objective))),
                    key=lambda t: t.score(objective)):
        k = (t.config.runtime, t.precision)
        if k not in seen:
            seen.add(k)
            picked.append(t)
    out: list[ServeSetup] = []
    for t in picked[:bases]:
        cfg = replace(t.config, name=t.config.name or "best")
        wait = 1e3 * t.latency_s
        out.append(ServeSetup(cfg, streams=1, name=f"{cfg.name}"))
        # the variants set their own threads: a peer's configuration (as installed, in the precision
        # its runtime picked) becomes that runtime with the precision it ran in
        own = replace(cfg, vendor_defaults=False, set_threads=True, precision=t.precision, instances=1, batch=1)
        if cores > 1:
            out.append(ServeSetup(_instances(own, cores), streams=1, name=f"{cfg.name}, {cores} instances"))
        if cfg.runtime == "openvino" and cores > 1:
            streams = replace(own, intra_threads=cores, runtime_options={**own.runtime_options, "streams": 2})
            out.append(ServeSetup(streams, streams=None, name=f"{cfg.name}, 2 streams"))
        for b in (2, 4):
            out.append(ServeSetup(replace(_instances(own, cores) if cores > 1 else own, batch=b), streams=1,
                                  wait_ms=wait, name=f"{cfg.name}, dynamic batching {b}"))
    unique: dict[tuple[str, int | None, float], ServeSetup] = {}
    for s in out:
        unique.setdefault((s.config.key(), s.streams, s.wait_ms), s)
    return list(unique.values())


def _instances(cfg: RunConfig, cores: int) -> RunConfig:
    """``cfg`` as one pinned single-thread instance per core."""
    return replace(cfg, instances=cores, intra_threads=1, inter_threads=1, pin=True, set_threads=True)


class ServingPhase:
    """The serving phase, a part of :class:`rooftune.tuning.study.Study` (which gives ``spec``,
    ``setup``, ``platform``, ``available``, ``framework``, ``results``, ``best``, ``step``,
    ``notes``, ``started``)."""

    spec: Any
    setup: Any
    platform: Any
    available: dict[str, Any]
    framework: str
    results: list[Any]
    best: Any
    objective: str
    step: Any
    notes: list[str]
    started: float
    serving_result: dict[str, Any] | None = None
    serving_artifact: str | None = None
    saved_best_artifact: str | None = None

    def _data_record(self) -> dict[str, Any] | None: ...

    def serving(self) -> None:
        """The serving phase where the spec's scenario asks for one (see the module)."""
        scenario = self.spec.scenario
        if scenario == "single-stream" and self.best.ok:
            from rooftune.tuning.serving_table import single_stream

            self.serving_result = single_stream(self.best)
        if scenario not in ("server", "offline"):
            return
        until = self.started + self.spec.budget_s
        slo_s = quantile = None
        if scenario == "server":
            quantile, slo_ms = self.spec.slo
            slo_s = slo_ms / 1e3
            fastest = min((t.latency_s for t in self.results if t.ok), default=math.nan)
            if math.isfinite(fastest) and slo_s < fastest:
                raise InvalidArgument(f"--slo-{quantile}", f"{slo_ms:g}", f"allowed at least the single-request "
                                      f"latency, {1e3 * fastest:.2f} ms on this machine (the fastest configuration's)")
        run = _Runner(self, scenario, quantile, slo_s)
        peers = serving_peers(self.platform, self.available, self.framework)
        measured: list[dict[str, Any]] = []
        live: dict[str, Server] = {}
        try:
            for i, setup in enumerate(peers):  # measured whatever the budget, as the study's baselines are
                self.step(f"serving: {setup.name}", i, len(peers))
                measured.append(run.setup(setup, live, keep=True))
            best: dict[str, Any] | None = None
            for setup in serving_candidates(self.results, physical_usable(self.platform),
                                            objective=self.objective):
                if any(m["name"] == setup.name for m in measured):  # a trial named like a peer (vanilla)
                    setup = replace(setup, name=f"{setup.name} (served)")
                # the final rounds (the peers and the best, again) are kept out of the search's time
                if time.perf_counter() > until - run.cost() - run.final_cost(len(peers) + 1):
                    self.notes.append(f"serving: no time left in the budget for {setup.name}")
                    break
                self.step(f"serving: {setup.name}", 0, 1)
                r = run.setup(setup, live, keep=True)
                measured.append(r)
                if r.get("error") is None and (best is None or run.figure(r) > run.figure(best)):
                    if best is not None:
                        live.pop(best["name"]).close()
                    best = r
                elif r["name"] in live:
                    live.pop(r["name"]).close()
            self.serving_result = run.final(measured, best, live)
            self.serving_artifact = run.best_artifact
        finally:
            for server in live.values():
                server.close()

    def save_serving(self) -> None:
        """With ``save`` and a serving answer: the saved configuration is the setup served best
        (its instances, pinning and batch, its artifact beside it), with a ``serving`` block that
        gives its streams, dynamic batching's wait, the figure and the scenario."""
        import json
        from pathlib import Path

        from rooftune.fileio import json_text, write_atomic
        from rooftune.tuning.result import TrialResult, save_config

        r = self.serving_result
        save = getattr(self, "save", None)
        if not save or not r or r.get("best") is None:
            return
        best = next(x for x in r["setups"] if x["name"] == r["best"])
        trial = TrialResult(RunConfig(**best["config"]), True, verify=best.get("verify"),
                            artifact=self.serving_artifact)
        path = Path(save)
        save_config(trial, path, getattr(self, "workload", None), calibration_size=getattr(self, "calibration_size", None),
                    validate=getattr(self, "validate_spec", None), data_spec=self._data_record())
        if best["config"] != self.best.config.to_dict():  # best.json now holds another configuration (and
            self.saved_best_artifact = None               # its artifact's copy may have the same name)
        data = json.loads(path.read_text())
        data["figures"] = {"requests_per_s": best["rate"], "ci_low": best.get("lo"), "ci_high": best.get("hi"),
                           "percentiles_at_rate": (best.get("at_rate") or {}).get("percentiles")}
        data["serving"] = {k: best.get(k) for k in ("name", "slots", "batch", "wait_ms", "rate", "lo", "hi", "precision")}
        data["serving"].update(scenario=r["scenario"], quantile=r["quantile"], slo_ms=r["slo_ms"], exec=r.get("exec"))
        write_atomic(path, json_text(data, indent=2))


class _Runner:
    """Measures setups for one serving phase and puts its result together."""

    def __init__(self, study: ServingPhase, scenario: str, quantile: str | None, slo_s: float | None) -> None:
        self.study, self.scenario, self.quantile, self.slo_s = study, scenario, quantile, slo_s
        self.spent: list[float] = []
        self.requests = samples_for_quantile(QUANTILES[quantile]) * 2 if quantile else 0
        self.cpu_s = 0.0
        self.served = 0
        self.best_artifact: str | None = None
        self.run_s: list[float] = []  # each load run's length

    def cost(self) -> float:
        """What one more setup is expected to take (the mean so far, else 30 s)."""
        return float(np.mean(self.spent)) if self.spent else 30.0

    def final_cost(self, contenders: int) -> float:
        """What the final rounds of ``contenders`` setups are expected to take (each round a run of
        each, at the mean run's time so far)."""
        rounds = SERVER_ROUNDS if self.scenario == "server" else OFFLINE_ROUNDS
        return rounds * contenders * (float(np.mean(self.run_s)) if self.run_s else 3.0)

    def figure(self, r: dict[str, Any]) -> float:
        return float(r["rate"])

    def _count(self, run: LoadRun) -> LoadRun:
        self.run_s.append(run.seconds)
        self.cpu_s += run.generator_cpu_s
        self.served += len(run.latencies)
        return run

    def offline(self, server: Server, batch: int) -> LoadRun:
        slots = len(server.slots)
        short = self._count(run_load(server.slots, np.zeros(8 * slots * batch), batch=batch, warmup=1))
        n = max(8 * slots * batch, math.ceil(short.served * OFFLINE_S))
        return self._count(run_load(server.slots, np.zeros(n), batch=batch, warmup=1))

    def probe(self, server: Server, setup: ServeSetup, rate: float, seed: int = SEED) -> LoadRun:
        # the quantile's interval needs its requests, but a slow model's probe lasts PROBE_MAX_S at
        # most (its p99 then has a wider interval, or none above, and the table says so)
        n = min(max(self.requests, math.ceil(rate * PROBE_S)), max(math.ceil(rate * PROBE_MAX_S), 16))
        return self._count(run_load(server.slots, poisson_arrivals(rate, n, seed), batch=setup.config.batch,
                                    wait_s=setup.wait_ms / 1e3, warmup=1, offered=rate))

    def setup(self, setup: ServeSetup, live: dict[str, Server], keep: bool) -> dict[str, Any]:
        """``setup`` started, checked and measured: its offline rate and, for the server scenario,
        its rate search; kept running (paused) in ``live`` where ``keep``."""
        t0 = time.perf_counter()
        record: dict[str, Any] = {"name": setup.name, "peer": setup.peer, "source": setup.source,
                                  "config": setup.config.to_dict(), "wait_ms": setup.wait_ms,
                                  "batch": setup.config.batch, "error": None, "rate": 0.0}
        server = None
        try:
            server = Server(self.study.setup.group(setup.config), setup.streams)
            record.update(slots=len(server.slots), describe=setup.describe(len(server.slots)),
                          precision=server.info.get("precision") or setup.config.precision,
                          verify=server.info.get("verify"), _artifact=server.info.get("artifact"))
            off = self.offline(server, setup.config.batch)
            record["capacity"] = off.served
            if self.scenario == "offline":
                record.update(rate=off.served, offline=[off.served])
            else:
                assert self.slo_s is not None and self.quantile is not None
                search = rate_under_slo(lambda rate: self.probe(server, setup, rate), self.slo_s, off.served,
                                        quantile=self.quantile, steps=SEARCH_STEPS, rel_tol=SEARCH_TOLERANCE)
                record.update(_search_record(search))
                # a call after idle time against one back to back: what a server at low load sees
                lowest = min(search.probes, key=lambda p: p[0])[1]
                record.update(call_ms_back_to_back=1e3 * float(np.median(off.call_s)),
                              call_ms_at_lowest_rate=1e3 * float(np.median(lowest.call_s)))
            server.pause()
            if keep:
                live[setup.name] = server
                server = None
        except Exception as exc:  # a setup that cannot start or be served is reported, never the answer
            record.update(error=str(exc) if isinstance(exc, TrialFailed) else f"{type(exc).__name__}: {exc}",
                          describe=setup.describe())
        finally:
            if server is not None:
                server.close()
            self.spent.append(time.perf_counter() - t0)
        record["_setup"] = setup
        return record

    def final(self, measured: list[dict[str, Any]], best: dict[str, Any] | None,
              live: dict[str, Server]) -> dict[str, Any]:
        """The best and the peers measured again, interleaved; the result's figures."""
        peers = [r for r in measured if r["peer"] and r["error"] is None]
        contenders = [r for r in measured if r["error"] is None and (r["peer"] or r is best)]
        notes: list[str] = []
        if not contenders:
            return self._result(measured, None, {}, ["no serving setup ran: see each one's error"])
        rounds: dict[str, list[Any]] = {r["name"]: [] for r in contenders}
        n_rounds = SERVER_ROUNDS if self.scenario == "server" else OFFLINE_ROUNDS
        for k in range(n_rounds):
            for r in list(contenders):
                server = live[r["name"]]
                self.study.step(f"serving: final round {k + 1} of {n_rounds}", k, n_rounds)
                try:
                    server.resume()
                    if self.scenario == "offline":
                        rounds[r["name"]].append(self.offline(server, r["batch"]).served)
                    elif r["rate"] > 0:
                        rounds[r["name"]].append(self.probe(server, r["_setup"], r["rate"], seed=SEED + 1 + k))
                    server.pause()
                except Exception as exc:  # it failed now: out of the comparison, with its error
                    r["error"] = f"in the final rounds: {exc}"
                    contenders.remove(r)
                    live.pop(r["name"]).close()
        peers = [r for r in peers if r["error"] is None]
        if not contenders:
            return self._result(measured, None, {}, ["no serving setup ran through the final rounds: see each "
                                                     "one's error"])
        for r in contenders:
            if self.scenario == "offline":
                r["offline"] = rounds[r["name"]]
                r["rate"] = stats.median(rounds[r["name"]])
                r["lo"], r["hi"] = stats.median_ci(rounds[r["name"]])
            elif rounds[r["name"]]:
                runs = [*rounds[r["name"]], *([r["_at_rate"]] if r.get("_at_rate") else [])]
                pooled = _pooled(runs)
                r["at_rate"] = pooled.to_dict()
                q = QUANTILES[self.quantile or "p99"]
                value = pooled.quantile(q)[0]
                r["confirmed"] = bool(self.slo_s is not None and value <= self.slo_s)
                if not r["confirmed"]:
                    notes.append(f"{r['name']}: its {self.quantile} at {r['rate']:.1f} requests/s over the final rounds "
                                 f"was {1e3 * value:.1f} ms, above the target: the rate is at the edge of the SLO")
        best_r = max(contenders, key=lambda r: (self.figure(r), not r["peer"]))
        if self.figure(best_r) <= 0:
            return self._result(measured, None, {}, [f"no setup met the {self.quantile} target at any rate tried"])
        if best is not None and best_r is not best and best_r["peer"]:
            notes.append(f"the peer {best_r['name']} served more than every setup tried: it is the answer")
        speedup = {p["name"]: self._ratio(best_r, p, rounds) for p in peers if p is not best_r}
        return self._result(measured, best_r, speedup, notes)

    def _ratio(self, a: dict[str, Any], b: dict[str, Any], rounds: dict[str, list[Any]]) -> dict[str, Any]:
        if b["rate"] <= 0:
            return {"ratio": None, "ci_low": None, "ci_high": None,
                    "why": f"{b['name']} met the target at no rate tried"}
        if self.scenario == "offline":
            lo, hi = stats.comparison_ci(rounds[a["name"]], rounds[b["name"]])
            return {"ratio": a["rate"] / b["rate"], "ci_low": lo if math.isfinite(lo) else None,
                    "ci_high": hi if math.isfinite(hi) else None}
        # the rates' intervals from the searches: the ratio's is their extremes
        return {"ratio": a["rate"] / b["rate"], "ci_low": a["lo"] / b["hi"] if b["hi"] > 0 else None,
                "ci_high": a["hi"] / b["lo"] if b["lo"] > 0 else None}

    def _result(self, measured: list[dict[str, Any]], best: dict[str, Any] | None, speedup: dict[str, Any],
                notes: list[str]) -> dict[str, Any]:
        setups = [{k: v for k, v in r.items() if not k.startswith("_")} for r in measured]
        peers = [r for r in measured if r["peer"] and r["error"] is None and r is not best]
        best_peer = max(peers, key=self.figure)["name"] if peers else None
        out: dict[str, Any] = {
            "scenario": self.scenario, "quantile": self.quantile,
            "slo_ms": None if self.slo_s is None else self.slo_s * 1e3,
            "samples_for_quantile": samples_for_quantile(QUANTILES[self.quantile]) if self.quantile else None,
            "generator_cpu_us_per_request": 1e6 * self.cpu_s / max(1, self.served),
            "best": None if best is None else best["name"], "best_peer": best_peer, "speedup": speedup,
            "setups": setups, "notes": notes,
        }
        if best is not None:
            self.best_artifact = best.get("_artifact")
            cfg = RunConfig(**best["config"])
            instances = f" --instances {cfg.instances}" if cfg.instances > 1 else ""
            wait = f", wait {best['wait_ms']:.1f} ms" if cfg.batch > 1 and best["wait_ms"] else ""
            out["exec"] = (f"rooftune exec --config best.json{instances} -- python your_server.py  "
                           f"# {best.get('slots', 1)} slot(s) in all, batch {cfg.batch}{wait}")
        return out


def _search_record(search: RateSearch) -> dict[str, Any]:
    d = search.to_dict()
    return {"rate": search.rate, "lo": search.lo, "hi": search.hi, "capacity": search.capacity,
            "at_rate": d["at_rate"], "probes": d["probes"], "_at_rate": search.at_rate}


def _pooled(runs: list[LoadRun]) -> LoadRun:
    """Runs at one rate as one: their latencies together (their percentiles' intervals narrow)."""
    return LoadRun(offered=runs[0].offered, latencies=tuple(x for r in runs for x in r.latencies),
                   batches=tuple(x for r in runs for x in r.batches), seconds=sum(r.seconds for r in runs),
                   generator_cpu_s=sum(r.generator_cpu_s for r in runs))

"""The phases of a tuning study up to its search (:class:`rooftune.tuning.study.Study` runs them in
this order, see its module's docstring): the guideline and the baselines, the guideline's seeds,
then the search, on this machine or shared with a cluster's other nodes through the store; and
the time a seed or searched trial may take to prepare.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

from rooftune.runconfig import RunConfig
from rooftune.tuning.cluster import Claims, SharedSampler, StudyUnit
from rooftune.tuning.guidelines import (
    baselines,
    data_baselines,
    framework_seeds,
    guideline,
    precision_seeds,
    runtime_seeds,
    source_seeds,
    train_guideline,
    train_precision_seeds,
)
from rooftune.tuning.result import TrialResult
from rooftune.tuning.skips import CONVERSION_FAILED, NOT_RUN, frontend_refused, not_run
from rooftune.tuning.space import known_trial, neighbours, run_key, sampler_study, suggest, told_value
from rooftune.tuning.trial import PREPARE_TIMEOUT_S

#: Proposals in a row of configurations already measured after which the search stops.
MAX_REPEATS = 25
#: Seconds a seed or searched trial may always take to prepare, however little budget is left.
MIN_PREPARE_S = 30.0
#: A training trial may take this many times the longest preparation among the study's trials so
#: far (its step built, then checked over TRAIN_CHECK_STEPS steps: the model's own step time
#: decides it): another configuration's step can run slower (another layout, bf16 where the CPU
#: converts, a graph to compile), and a trial cut off while it prepares is lost whole.
TRAIN_PREPARE_MARGIN = 2.0


def prepare_timeout(left: float, least: float = MIN_PREPARE_S) -> float:
    """What a seed or searched trial may take to prepare with ``left`` seconds of its share of the
    budget left (a large model's torch.compile or quantization takes minutes on few cores), and
    ``least`` however little is left."""
    return max(least, min(PREPARE_TIMEOUT_S, left))


class SearchPhases:
    """The phases of :class:`rooftune.tuning.study.Study` up to its search, which this class is a
    part of: its methods read and set the study's shared state (the trials, each configuration's
    trial by what it runs, the notes, where the time went) and measure through ``evaluate``."""

    def _left(self, until: float) -> float:
        """Seconds from now until ``until`` seconds into the study."""
        return until - (time.perf_counter() - self.started)

    def _slowest_prepare(self) -> float:
        """A training study's longest trial preparation so far (0 for inference, or before any):
        what a trial of it costs before its first timed step."""
        if self.train is None:
            return 0.0
        return max((r.prepare_s for r in self.results if math.isfinite(r.prepare_s)), default=0.0)

    def _room(self, until: float) -> bool:
        """Whether a seed or searched trial starts with ``until`` ahead: some time left, and for a
        training study as much as its slowest preparation so far (a trial started with less
        overruns the share by its steps, or is cut off and lost)."""
        left = self._left(until)
        return left > 0 and left >= self._slowest_prepare()

    def _trial_prepare_timeout(self, until: float) -> float:
        """The preparation time of a seed or searched trial starting now, with ``until`` ahead."""
        return prepare_timeout(self._left(until), max(MIN_PREPARE_S, TRAIN_PREPARE_MARGIN * self._slowest_prepare()))

    def fixed_configurations(self) -> None:
        """The guideline and every baseline (with the user's data and int8, the quantizers' own
        answers on it too: :func:`~rooftune.tuning.guidelines.data_baselines`); one that OpenVINO's
        PyTorch frontend cannot convert runs from the model's ONNX export instead (what an OpenVINO
        user does next)."""
        if self.train is not None:
            self.guide_cfg, self.reasons = train_guideline(self.platform, self.graph, self.wl.batch)
        else:
            self.guide_cfg, self.reasons = guideline(self.platform, self.graph, self.available,
                                                     objective=self.objective, batch=self.batch)
        peers = baselines(self.platform, self.available, self.framework)
        if self.split is not None and "int8" in self.precisions:  # the quantizers' own answers on the same data
            peers += data_baselines(self.available)
        fixed = [self.guide_cfg, *(replace(b, batch=self.wl.batch) for b in peers)]
        from_onnx: list[str] = []
        why_onnx = ""
        for i, cfg in enumerate(fixed):
            self.step(f"guideline and baselines: {cfg.name}", i, len(fixed))
            r = self.evaluate(cfg)
            refused = next((x for x in self.done.values() if frontend_refused(x, cfg)), None)
            onnx = replace(cfg, runtime_options={**cfg.runtime_options, "source": "onnx"})
            if not r.ok and refused is not None and self.available["openvino"].unsupported(onnx) is None:
                from_onnx.append(cfg.name)
                why_onnx = refused.error.removeprefix(CONVERSION_FAILED)
                r = self.evaluate(onnx)
            twin = next((x.config.name for x in self.results if x.config.key() == r.config.key()), None)
            if twin:
                self.notes.append(f"{cfg.name} is the same configuration as {twin} on this machine")
            self.results.append(r)
        if from_onnx:
            names = from_onnx[0] if len(from_onnx) == 1 else f"{', '.join(from_onnx[:-1])} and {from_onnx[-1]}"
            self.notes.append(f"{names} read{'s' if len(from_onnx) == 1 else ''} the ONNX export: "
                              f"OpenVINO's {'TensorFlow' if self.framework == 'tensorflow' else 'PyTorch'} frontend "
                              f"could not convert the model ({why_onnx})")
        self.guide, self.base = self.results[0], {r.config.name: r for r in self.results[1:]}
        self.phase_s["fixed"] = time.perf_counter() - self.started

    def _precision_seeds(self) -> list[RunConfig]:
        """The guideline in each reduced precision allowed (a training study's on eager), and each
        int8 one again with the sensitivity pass's mixed set kept at higher precision where it
        keeps some layers and quantizes others."""
        if self.train is not None:
            return train_precision_seeds(self.guide_cfg, self.precisions)
        seeds = precision_seeds(self.guide_cfg, self.available, self.precisions)
        s = self.sensitivity
        if s is not None and s.keep and s.quantized():  # the mixed set beside each uniform int8 seed
            seeds += [replace(c, keep=s.keep, name=c.name.replace("int8", "int8 mixed", 1))
                      for c in seeds if c.precision == "int8"]
        return seeds

    def _plan(self) -> list[RunConfig]:
        """The seeds in the order they run, and the budget's share kept for the final comparisons
        (:meth:`~rooftune.tuning.final_phases.FinalPhases._reserve`)."""
        seeds = self._precision_seeds()
        # the runtime that ran fastest in fp32 here goes first: where the budget leaves time for
        # one seed (a large model's quantization takes minutes on few cores), it is that one
        fastest: dict[str, float] = {}
        for r in self.results:
            fastest[r.config.runtime] = min(fastest.get(r.config.runtime, math.inf), r.score(self.objective))
        seeds.sort(key=lambda c: fastest.get(c.runtime, math.inf))
        seeds += framework_seeds(self.platform, self.graph, self.guide_cfg, objective=self.objective, batch=self.batch)
        seeds += source_seeds(self.guide_cfg, self.available, self.objective)
        seeds += runtime_seeds(self.platform, self.graph, self.available, self.guide_cfg, objective=self.objective,
                               batch=self.batch)
        self._reserve(bool(seeds))
        return seeds

    def guideline_seeds(self) -> None:
        """The guideline in each reduced precision allowed, then from its other sources (OpenVINO
        from the ONNX export) and on the runtimes its rules name, before the search, within the
        budget's share for them. Without a search, the guideline's threads and layout in each
        reduced precision allowed are guideline configurations too, measured and checked like the
        rest, as is a TensorFlow model's guideline on TensorFlow where it runs on another runtime
        (and ncnn's seeds where ncnn's converter refused the model for the guideline)."""
        if self.guidelines_only:
            seeds = self._precision_seeds() + framework_seeds(self.platform, self.graph, self.guide_cfg,
                                                              objective=self.objective, batch=self.batch)
            if not self.guide.ok and self.guide_cfg.runtime == "ncnn":  # its converter refused the model
                seeds += runtime_seeds(self.platform, self.graph, self.available, self.guide_cfg,
                                       objective=self.objective, batch=self.batch)
            for i, cfg in enumerate(seeds):
                self.step(f"guideline seeds: {cfg.name}", i, len(seeds))
                self.results.append(self.evaluate(cfg))
            return
        seeds = self._plan()
        for i, cfg in enumerate(seeds):
            if not self._room(self.seeds_until):
                self.notes.append(f"no time left in the budget for {', '.join(c.name for c in seeds[i:])}")
                break
            self.step(f"guideline seeds: {cfg.name}", i, len(seeds))
            self.results.append(self.evaluate(cfg, prepare_timeout_s=self._trial_prepare_timeout(self.seeds_until)))

    def search(self) -> None:
        """TPE within the budget's share for it (none with ``guidelines_only``): first told every
        configuration measured so far and asked the fastest one's neighbours, then its own draws,
        until ``trials`` ran or it proposes only what was measured."""
        if not self.guidelines_only:
            self._search()
        self.phase_s["search"] = time.perf_counter() - self.started - self.phase_s["fixed"]

    def _search(self) -> None:
        """The search itself: the sampler told what was measured, then asked until the search's
        share of the budget or ``trials`` runs out."""
        study = sampler_study()
        limit = self.trials if self.trials is not None else 10_000
        told: list[Any] = []
        for r in self.results:
            t0 = known_trial(r.config, self.space, told_value(r, self.results, self.objective))
            if t0 is not None:
                study.add_trial(t0)
                told.append(t0)
        self.phase_s["told"] = len(told)
        if told:
            for params in neighbours(min(told, key=lambda t: t.value)):
                study.enqueue_trial(params, skip_if_exists=True)
        n = repeats = 0
        seen = {run_key(r.config) for r in self.results}
        while n < limit and self._room(self.search_until):
            self.step("search", min(int(time.perf_counter() - self.started), int(self.budget_s)), int(self.budget_s))
            t = study.ask()
            cfg = replace(suggest(t, self.space), name=f"trial {t.number - len(told)}")  # the told ones come first
            # a searched trial may not take the final comparisons' share of the budget to prepare
            r = self.evaluate(cfg, prepare_timeout_s=self._trial_prepare_timeout(self.search_until))
            if run_key(cfg) not in seen:
                seen.add(run_key(cfg))
                self.results.append(r)
                n += not (r.error or "").startswith(NOT_RUN)  # --trials counts what ran
                repeats = 0
            else:
                repeats += 1
                if repeats >= MAX_REPEATS:  # TPE keeps proposing measured configurations: the space is exhausted
                    self.notes.append(f"search stopped after {MAX_REPEATS} proposals in a row that were already measured")
                    break
            study.tell(t, told_value(r, self.results, self.objective))

    def shared_search(self, unit: StudyUnit) -> dict[str, Any]:
        """(A search worker of a study on a cluster) the search, its sampler shared through the
        store with the other nodes' workers (:mod:`rooftune.tuning.cluster`), until ``unit``'s
        ``search_until`` or, over all workers, ``trials`` searched trials."""
        from rooftune.fleet import current_node

        node = current_node()[0]
        started = time.time()
        self.stamp = {"node": node, "search": unit.run_id}
        claims = Claims(self.store, self.platform, self.key, unit.run_id, unit.worker, node)
        claims.take_back()
        sampler = SharedSampler(self.space, self.objective, unit.worker, unit.workers)
        self.results = list(self.done.values())  # every trial stored before: the search's start
        for r in self.results:
            sampler.tell_known(r, self.results)
        sampler.start()
        limit = self.trials if self.trials is not None else 10_000
        ran = repeats = taken = 0
        while time.time() < unit.search_until and repeats < MAX_REPEATS:
            for row in self.store.trials(self.key):  # what the other nodes stored since
                stored = TrialResult.from_stored(row)
                if run_key(stored.config) not in self.done:
                    self.done[run_key(stored.config)] = stored
                    self.results.append(stored)
                    sampler.tell_known(stored, self.results)
            t = sampler.ask()
            cfg = self._normalized(replace(suggest(t, self.space), name=f"trial {unit.worker}.{ran}"))
            if run_key(cfg) in self.done or not_run(cfg, self.done.values()) is not None:
                r = self.evaluate(cfg)  # measured before, or refused by a skip rule: nothing runs
                if run_key(cfg) not in {run_key(x.config) for x in self.results}:
                    self.results.append(r)
                repeats += 1
                sampler.tell(t, r, self.results)
                continue
            row = claims.claim(cfg.key(), cfg.to_dict())
            if not row["mine"]:  # another node runs it, or stored it since this node last read
                taken += 1
                repeats += 1
                sampler.tell(t, None, self.results)
                continue
            if claims.rank(row["id"]) >= limit:  # the other workers' trials made up --trials first
                claims.release(row["id"])
                break
            left = unit.search_until - time.time()
            r = self.evaluate(cfg, prepare_timeout_s=prepare_timeout(left))  # stored over the claim
            self.results.append(r)
            ran += 1
            repeats = 0
            sampler.tell(t, r, self.results)
        if repeats >= MAX_REPEATS:
            self.notes.append(f"search stopped after {MAX_REPEATS} proposals in a row that were already measured "
                              f"or claimed by another node")
        return {"node": node, "worker": unit.worker, "ran": ran, "taken": taken, "started_at": started,
                "ended_at": time.time(), "notes": self.notes}

    def from_store(self, handed: dict[str, Any]) -> None:
        """(The final unit of a study on a cluster) the study as the lead and the search workers
        stored it: the guideline, the baselines (their trials read from the store, nothing run
        again), the budget's plan, then every other stored trial; the lead's notes and times."""
        self.resume()
        self.fixed_configurations()
        if not self.guidelines_only:
            self._plan()
        known = {run_key(r.config) for r in self.results}
        self.results += [r for k, r in self.done.items() if k not in known]
        self.notes += [n for n in handed.get("notes", ()) if n not in self.notes]
        self.phase_s.update(fixed=handed["phase_s"]["fixed"], search=handed.get("search_s", 0.0))

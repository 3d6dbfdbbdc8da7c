"""A campaign on a fleet: the same :func:`~rooftune.profiling.campaign.run_campaign`, one spec at a
time on the executor's nodes (:mod:`rooftune.fleet`), every platform of the fleet profiling every spec.

A unit is one spec (at every thread count of the campaign) and a number of passes: the campaign
runs in waves, wave ``k`` bringing every spec to ``k`` passes on every platform, so a row's passes
stay a whole pass over the campaign apart as on one machine; the last wave adds the confirmation
passes. On its node a unit runs ``run_campaign`` over its one spec against the shared store, under
the node's own platform: resumable as a campaign is (rows stored are skipped, a spec's rows are
committed together), so a unit run again after its node was lost stores nothing twice, and a
profiled row of the same (platform, spec, primitive, threads) stored meanwhile by another node is
kept, not duplicated (the store's unique key). Each node keeps one profiling worker warm across
the units it runs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rooftune.bench import Policy
from rooftune.fleet import Executor, node_store
from rooftune.primitives import ConvSpec
from rooftune.profiling.campaign import PROFILE_POLICY, CampaignResult, run_campaign
from rooftune.profiling.work import Runner


@dataclass(frozen=True)
class Unit:
    """One spec of a campaign, brought to ``passes`` passes (plus ``extra_passes`` confirmation
    passes) on the node that runs it."""

    db: str
    spec: ConvSpec
    sources: tuple[str, ...]
    threads: tuple[int, ...] | None
    primitives: tuple[str, ...] | None
    passes: int
    extra_passes: int
    transforms: bool = True
    budget_s: float = 3600.0
    policy: Policy = PROFILE_POLICY


#: The node's profiling worker, kept warm across the units its process runs (a Ray worker process
#: runs many); it is a child of this process and dies with it.
_RUNNER: dict[str, Runner] = {}


def run_unit(unit: Unit) -> dict[str, Any]:
    """(On a node) the unit's campaign over its one spec; its result as a dict."""
    from rooftune.platform import current_platform
    from rooftune.profiling.isolated import Isolated

    runner = _RUNNER.get("warm")
    if runner is None:
        runner = _RUNNER["warm"] = Isolated()
    threads = list(unit.threads or [current_platform().usable_cores])
    result = run_campaign([(unit.spec, list(unit.sources))], store=node_store(unit.db), primitives=unit.primitives,
                          threads=threads, budget_s=unit.budget_s, policy=unit.policy, transforms=unit.transforms,
                          passes=unit.passes, extra_passes=unit.extra_passes, runner=runner)
    return result.to_dict()


@dataclass
class FleetCampaign:
    """A campaign's results per platform, added up over its units."""

    results: dict[str, CampaignResult] = field(default_factory=dict)
    units: int = 0
    stopped_by_budget: bool = False

    def add(self, platform_id: str, r: dict[str, Any], first_wave: bool) -> None:
        c = self.results.setdefault(platform_id, CampaignResult(platform_id))
        if first_wave:  # later waves find the spec planned before
            c.planned += r["planned"]
            c.skipped += r["skipped"]
        c.added += r["added"]
        c.retimed += r["retimed"]
        c.passes, c.extra_passes = max(c.passes, r["passes"]), max(c.extra_passes, r["extra_passes"])
        c.extra_run = max(c.extra_run, r["extra_run"])
        for k in ("ok", "unsupported", "failed"):
            if first_wave:
                c.counts[k] = c.counts.get(k, 0) + int(r.get(k) or 0)
        c.stopped_by_budget = c.stopped_by_budget or r["stopped_by_budget"]
        self.units += 1


def run_on_fleet(executor: Executor, specs: Sequence[tuple[ConvSpec, Sequence[str]]], *, db: str,
                 threads: Sequence[int] | None, primitives: Sequence[str] | None, budget_s: float, passes: int,
                 extra_passes: int, transforms: bool = True, policy: Policy = PROFILE_POLICY,
                 progress: Any = None, name: str = "campaign") -> FleetCampaign:
    """Run the campaign of ``specs`` on every platform of ``executor``'s nodes (see the module's
    doc); recorded in the store as a fleet run while it goes."""
    from rooftune.store import Store

    started = time.perf_counter()
    out = FleetCampaign()
    nodes = executor.nodes()
    waves = list(range(1, passes + 1))
    total = len(specs) * len(waves) * len({n.platform_id for n in nodes})
    run_id = str(uuid.uuid4())
    with Store(db) as store:
        store.start_fleet_run(run_id, kind="campaign", name=name, cluster=getattr(executor, "address", "local"),
                              nodes={n.id: n.platform_id for n in nodes}, planned=total)
        status = "interrupted"
        try:
            for wave in waves:
                left = budget_s - (time.perf_counter() - started)
                units = [Unit(db, spec, tuple(sources), tuple(threads) if threads else None,
                              tuple(primitives) if primitives else None, wave,
                              extra_passes if wave == passes else 0, transforms, max(left, 1e-3), policy)
                         for spec, sources in specs]

                def done(platform_id: str, unit: Unit, result: dict[str, Any], first: bool = wave == 1) -> None:
                    out.add(platform_id, result, first)
                    store.update_fleet_run(run_id, done=out.units)
                    if progress is not None:
                        progress(f"profiling on the fleet, pass {unit.passes} of {passes}", out.units, total)

                def spent() -> bool:
                    out.stopped_by_budget = out.stopped_by_budget or time.perf_counter() - started > budget_s
                    return out.stopped_by_budget

                executor.map(run_unit, units, on_result=done, stop=spent)
                if out.stopped_by_budget:
                    break
            status = "stopped" if out.stopped_by_budget else "done"
        finally:
            store.update_fleet_run(run_id, done=out.units, status=status)
    for c in out.results.values():
        c.duration_s = time.perf_counter() - started
        c.stopped_by_budget = c.stopped_by_budget or out.stopped_by_budget
    return out

"""A sweep on a fleet: the points of :func:`rooftune.sweep.run.sweep`, one per unit, on the nodes
of the executor (:mod:`rooftune.fleet`), every platform of the fleet sweeping every point.

The driver checks the arguments as a sweep on one machine does, then plans each platform's points
from its nodes' fingerprints (its own thread counts and the precisions it lacks, skipped with the
reason), so that a platform's points and keys are those a sweep on one of its machines would have.
Three phases run on the executor, each unit once per platform:

    ceilings   one unit: the platform's ceilings read from the shared store, measured there once
               when missing (before any point, so that two nodes of a platform never both measure)
    points     one unit per point: on its node the point is taken from the store when its key is
               there, else built, checked against fp32, timed and placed, and stored in its own
               transaction under the node's platform. A unit run again after its node was lost
               finds its point stored (or runs it, if the loss came first): nothing is lost and
               nothing stored twice (the store's unique key, an ``ON CONFLICT DO NOTHING`` insert)
    confirm    one unit: the findings' speedups of the platform measured again interleaved on one
               node of it, never across nodes

Each platform's result (points, findings, roofs) is its own, as a sweep of one machine of it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rooftune.errors import ClusterError, InvalidArgument
from rooftune.fleet import node_store
from rooftune.sweep.plan import Plan, PointSpec
from rooftune.sweep.point import SweepPoint
from rooftune.sweep.run import (
    POINT_BUDGET_S,
    Arguments,
    SweepResult,
    check_arguments,
    confirmations,
    plan_for,
    roof_dict,
)


@dataclass(frozen=True)
class CeilingsUnit:
    """Read (or measure once) a platform's ceilings; report the roofs at its sweep's most threads."""

    db: str
    quick: bool
    threads: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class PointUnit:
    """The ``index``-th point of each platform's plan (None where its plan is shorter)."""

    db: str
    quick: bool
    index: int
    specs: tuple[tuple[str, PointSpec | None], ...]
    first_layout: str
    policy: Any


@dataclass(frozen=True)
class ConfirmUnit:
    """Each platform's points, whose speedups the findings state (``findings.to_confirm``) are
    measured again interleaved."""

    family: str
    points: tuple[tuple[str, tuple[SweepPoint, ...]], ...]
    policy: Any


#: The node's ceilings (by store URL, quick and platform): read once per worker process, not once
#: per point.
_CEILINGS: dict[tuple[str, bool, str], Any] = {}


def _ceilings(db: str, quick: bool) -> Any:
    from rooftune.machine import get_ceilings
    from rooftune.platform import current_platform

    host = current_platform()
    key = (db, quick, host.id)
    if key not in _CEILINGS:
        _CEILINGS[key] = get_ceilings(quick=quick, store=node_store(db), platform=host)
    return _CEILINGS[key]


def _mine(specs: Mapping[str, Any], platform_id: str) -> Any:
    if platform_id not in specs:  # (the driver planned from this node's own fingerprint)
        raise ClusterError(f"a node reads its platform as {platform_id}, which the sweep did not plan for; is its "
                           "rooftune the driver's version?")
    return specs[platform_id]


def run_ceilings(unit: CeilingsUnit) -> dict[str, Any]:
    """(On a node) its platform's roofs."""
    from rooftune.analysis.placement import Roofs

    c = _ceilings(unit.db, unit.quick)
    return {"platform_id": c.platform.id,
            "roofs": roof_dict(Roofs.from_ceilings(c, _mine(dict(unit.threads), c.platform.id)))}


def run_point_unit(unit: PointUnit) -> dict[str, Any]:
    """(On a node) its platform's point of the unit, from the store or run and stored."""
    from rooftune.analysis.placement import Roofs
    from rooftune.sweep.families import get_family
    from rooftune.sweep.point import run_point

    c = _ceilings(unit.db, unit.quick)
    platform = c.platform
    spec = _mine(dict(unit.specs), platform.id)
    if spec is None:
        return {"index": unit.index, "point": None, "resumed": False}
    store = node_store(unit.db)
    key = spec.key(platform.id)
    stored = store.sweep_points(platform.id, spec.family, key=key)
    if stored:
        return {"index": unit.index, "point": stored[0], "resumed": True}
    point = run_point(get_family(spec.family), spec, roofs=Roofs.from_ceilings(c, spec.variant.threads),
                      platform_id=platform.id, policy=unit.policy, first_layout=unit.first_layout)
    store.save_sweep_point(platform, point.to_dict())
    return {"index": unit.index, "point": point.to_dict(), "resumed": False}


def run_confirm(unit: ConfirmUnit) -> dict[str, Any]:
    """(On a node) its platform's pairs measured again interleaved."""
    from rooftune.platform import current_platform
    from rooftune.sweep.families import get_family

    points = _mine(dict(unit.points), current_platform().id)
    confirmed = confirmations(get_family(unit.family), points, unit.policy)
    return {"confirmed": [[a, b, *ratio] for (a, b), ratio in confirmed.items()]}


@dataclass
class FleetSweep:
    """A sweep's results, one per platform of the fleet."""

    results: dict[str, SweepResult] = field(default_factory=dict)
    units: int = 0
    rerun: int = 0
    stopped_by_budget: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"sweeps": {pid: r.to_dict() for pid, r in self.results.items()}, "units": self.units,
                "rerun": self.rerun, "stopped_by_budget": self.stopped_by_budget}


def sweep_on_cluster(cluster: str, family: str, grid: Mapping[str, Any] | None = None, *, db: str | None = None,
                     store: Any = None, ceilings: Any = None, quick: bool = False, confirm: bool = True,
                     progress: Callable[[int, int, SweepPoint], None] | None = None, **kwargs: Any) -> FleetSweep:
    """:func:`rooftune.sweep.run.sweep` (the same arguments) on every platform of the Ray cluster at
    ``cluster``, into the store its nodes share (see the module's doc)."""
    from rooftune.fleet import RayExecutor, check_address

    check_address(cluster)
    if ceilings is not None:
        raise InvalidArgument("ceilings", "given", "not allowed with a cluster (each node reads its platform's "
                              "ceilings from the shared store, measured there once when missing)")
    args = check_arguments(family, grid, **{"passes": None, "precisions": None, "algorithms": None, "layouts": None,
                                            "threads": None, "device": None, "autotune": (False, True),
                                            "launches": None, "budget_s": float("inf"), "point_budget_s": POINT_BUDGET_S,
                                            "memory_cap": None} | kwargs)
    if args.on_cuda:
        raise InvalidArgument("device", kwargs.get("device"), "cpu only with a cluster (each node sweeps its CPU)")
    if store is not None and db is None:
        db = store.url
    executor = RayExecutor(cluster)  # an unreachable cluster is named before anything is written
    try:
        return run_on_fleet(executor, args, db=db, quick=quick, confirm=confirm, progress=progress)
    finally:
        executor.close()


def run_on_fleet(executor: Any, args: Arguments, *, db: str | None, quick: bool = False, confirm: bool = True,
                 progress: Callable[[int, int, SweepPoint], None] | None = None) -> FleetSweep:
    """The sweep of checked ``args`` on every platform of ``executor``'s nodes; recorded in the store
    as a fleet run while it goes."""
    from rooftune.fleet import shared_store
    from rooftune.platform import Platform
    from rooftune.store import Store

    started = time.perf_counter()
    url = shared_store(executor, db)
    nodes = executor.nodes()
    fingerprints = {n.platform_id: n.fingerprint for n in nodes}
    plans: dict[str, Plan] = {pid: plan_for(args, Platform.from_dict(fp)) for pid, fp in sorted(fingerprints.items())}
    size = max((len(p.points) for p in plans.values()), default=0)
    total = sum(len(p.points) for p in plans.values())
    out = FleetSweep()
    found: dict[str, dict[int, dict[str, Any]]] = {pid: {} for pid in plans}
    name = f"{args.family.name} ({len(args.points)} shapes)"
    with Store(url) as store:
        run_id = str(uuid.uuid4())
        store.start_fleet_run(run_id, kind="sweep", name=name, cluster=getattr(executor, "address", "local"),
                              nodes={n.id: n.platform_id for n in nodes}, planned=total)
        status = "interrupted"
        try:
            most = tuple((pid, max((s.variant.threads for s in p.points), default=1)) for pid, p in plans.items())
            roofs = {pid: r[0]["roofs"] for pid, r in executor.map(run_ceilings, [CeilingsUnit(url, quick, most)],
                                                                      platforms=plans).items() if r}
            units = [PointUnit(url, quick, i, tuple((pid, p.points[i] if i < len(p.points) else None)
                                                    for pid, p in plans.items()), args.layouts[0], args.policy)
                     for i in range(size)]
            done = 0

            def stored(platform_id: str, unit: PointUnit, result: dict[str, Any]) -> None:
                nonlocal done
                out.units += 1
                if result["point"] is None:
                    return
                found[platform_id][result["index"]] = result
                done += 1
                store.update_fleet_run(run_id, done=done)
                if progress is not None:
                    progress(done, total, SweepPoint.from_dict(result["point"]))

            def spent() -> bool:
                out.stopped_by_budget = out.stopped_by_budget or time.perf_counter() - started > args.budget_s
                return out.stopped_by_budget

            executor.map(run_point_unit, units, platforms=plans, on_result=stored, stop=spent)
            points = {pid: [SweepPoint.from_dict(found[pid][i]["point"]) for i in sorted(found[pid])] for pid in plans}
            confirmed: dict[str, dict[tuple[str, str], tuple[float, float, float]]] = {pid: {} for pid in plans}
            why_not = _why_not_confirmed(confirm, out.stopped_by_budget)
            if why_not is None:
                from rooftune.sweep.findings import to_confirm

                wanted = [pid for pid, pts in points.items() if to_confirm(pts)]
                unit = ConfirmUnit(args.family.name, tuple((pid, tuple(points[pid])) for pid in wanted), args.policy)
                for pid, results in (executor.map(run_confirm, [unit], platforms=wanted) if wanted else {}).items():
                    for r in results:
                        confirmed[pid] = {(a, b): (ratio, lo, hi) for a, b, ratio, lo, hi in r["confirmed"]}
            status = "stopped" if out.stopped_by_budget else "done"
        finally:
            store.update_fleet_run(run_id, done=sum(len(f) for f in found.values()), status=status)
    out.rerun = int(getattr(executor, "rerun", 0))
    duration = time.perf_counter() - started
    from rooftune.sweep.findings import findings

    for pid, the_plan in plans.items():
        said = findings(args.family, points[pid], the_plan.skipped, confirmed[pid])
        if why_not is not None:
            said.append(f"the speedups stated are ratios of separately timed medians: {why_not}")
        added = sum(1 for r in found[pid].values() if not r["resumed"])
        out.results[pid] = SweepResult(
            family=args.family.name, device=args.device, platform_id=pid, platform=dict(fingerprints[pid]),
            points=tuple(points[pid]), skipped=the_plan.skipped, added=added, resumed=len(found[pid]) - added,
            stopped_by_budget=out.stopped_by_budget, duration_s=duration, roofs=roofs.get(pid, {}),
            findings=tuple(said))
    return out


def _why_not_confirmed(confirm: bool, stopped: bool) -> str | None:
    if not confirm:
        return "measuring them again interleaved was turned off (--no-confirm)"
    if stopped:
        return "the budget was spent before they were measured again interleaved (run the same sweep again to finish it)"
    return None

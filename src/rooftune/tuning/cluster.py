"""A tuning study on a fleet: the trials of one study spread over the nodes of one platform
(:mod:`rooftune.fleet`), the sampler shared through the store, the final comparisons on one node.

    platform     the platform most nodes have (ties: this machine's, if a node has it); the
                 nodes of other platforms are not used, and named
    workers      one unit per node of the platform, dispatched together; the first is the lead:
                 it runs the guideline, the baselines and the seeds (Study's phases) and marks its
                 part done in the store, while the others build their study (load the model, its
                 reference output) and wait for that mark, then read the lead's plan of the budget
                 from the stored trials. Then every worker searches, side by side, until the
                 search's share of the budget (or --trials, over all of them) is spent; before each ask:
                     told  += the trials other nodes stored since (the store is the shared sampler's memory)
                     config = TPE.ask()                          (seeded per node: nodes draw apart)
                     claim(config) in the store                  (one row per study and configuration)
                       taken by another node -> tell nothing here (its value comes with the store's rows); ask again
                       mine -> run the trial; its result replaces the claim
    final        one unit on one node: the study read back from the store, then the runners-up,
                 the guideline and the baselines compared with the best, interleaved, on that one
                 node (timings of two nodes are never compared), and the result

Each unit builds its own :class:`~rooftune.tuning.study.Study` (the model loaded, its reference
output, the study key, which names the platform and must be the lead's) against the shared store,
so a unit run again after its node was lost finds what was stored and measures nothing twice;
the claims of a lost worker are taken back by its rerun, and any claim older than a trial can run
is taken over (:mod:`rooftune.store.fleet_rows`).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from rooftune.errors import ClusterError, InvalidArgument
from rooftune.tuning.result import TrialResult
from rooftune.tuning.space import SEED, known_trial, neighbours, sampler_study, told_value
from rooftune.tuning.spec import TuneSpec
from rooftune.tuning.trial import MEASURE_SLACK_S, PREPARE_TIMEOUT_S

if TYPE_CHECKING:
    from rooftune.platform import Platform
    from rooftune.tuning.trial_store import TrialStore

#: A claim older than this may be taken over by another node: longer than a trial may take to
#: prepare and measure, so only a claim whose node died is that old.
CLAIM_STALE_S = 2 * (PREPARE_TIMEOUT_S + MEASURE_SLACK_S)


@dataclass(frozen=True)
class StudyUnit:
    """What a node needs to run its part of a study: the model by name, the shared store's URL,
    the study's spec, and its role (``lead``, ``search`` or ``final``)."""

    store: str
    model: str
    spec: TuneSpec
    run_id: str
    #: The study's start (seconds since the epoch): its budget runs from there on every node.
    started_at: float
    role: str = "lead"
    worker: int = 0
    workers: int = 1
    #: When the search stops (seconds since the epoch), from the lead's plan.
    search_until: float = 0.0
    key: str = ""
    #: What the lead and the search hand on to the final unit: notes, where the time went.
    handed: dict[str, Any] = field(default_factory=dict)


def check_cluster_arguments(model: object, *, example_inputs: object, example_kwargs: object, store: object) -> str:
    """The one-line error of what a study on a cluster cannot take: every node loads the model by
    name and opens the store by URL, so a Python object is refused (a model, a Store); the model's
    name otherwise."""
    if not isinstance(model, str):
        raise InvalidArgument("model", type(model).__name__, "allowed with --cluster a name every node can load (a "
                              "zoo name such as resnet18, module:callable, or a file path every node sees)")
    if example_inputs is not None or example_kwargs is not None:
        raise InvalidArgument("example_inputs", type(example_inputs if example_inputs is not None
                                                     else example_kwargs).__name__,
                              "allowed only with an nn.Module, which a cluster cannot take")
    if store is not None and not isinstance(store, (str, os.PathLike)):
        raise InvalidArgument("store", type(store).__name__, "allowed with --cluster: a database URL or file path "
                              "every node reaches (--db)")
    return model


def study_platform(nodes: Sequence[Any], own: str) -> tuple[str, list[Any]]:
    """The platform of a study on these nodes (the one most nodes have; on a tie this machine's
    ``own`` if a node has it, else the first id) and the nodes of other platforms, left out."""
    if not nodes:
        raise ClusterError("the cluster has no node that offers rooftune_node")
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n.platform_id] = counts.get(n.platform_id, 0) + 1
    pid = min(counts, key=lambda p: (-counts[p], p != own, p))
    return pid, [n for n in nodes if n.platform_id != pid]


class Claims:
    """A search worker's claims on a study's configurations in the shared store (see
    :mod:`rooftune.store.fleet_rows`)."""

    def __init__(self, store: TrialStore, platform: Platform, key: str, run_id: str, worker: int, node: str) -> None:
        self.store, self.platform, self.key = store, platform, key
        self.mark = {"node": node, "search": run_id, "worker": worker}

    def take_back(self) -> None:
        """Remove the claims this worker left in an earlier run of its unit (its node was lost)."""
        self.store.release_claims([c["id"] for c in self.store.claims(self.key)
                                   if c["claim"].get("search") == self.mark["search"]
                                   and c["claim"].get("worker") == self.mark["worker"]])

    def claim(self, config_key: str, config: dict[str, Any]) -> dict[str, Any]:
        """The row holding the configuration after this worker claimed it (``mine`` where it won)."""
        return self.store.claim_trial(self.platform, study_key=self.key, config_key=config_key, config=config,
                                      claim={**self.mark, "claimed_at": time.time()}, stale_s=CLAIM_STALE_S)

    def rank(self, row_id: int) -> int:
        """How many configurations this run's search claimed or stored before the row ``row_id``."""
        ids = [r["id"] for r in self.store.trials(self.key) if r["result"].get("search") == self.mark["search"]]
        ids += [c["id"] for c in self.store.claims(self.key) if c["claim"].get("search") == self.mark["search"]]
        return sum(1 for i in ids if i < row_id)

    def release(self, row_id: int) -> None:
        self.store.release_claims([row_id])


class SharedSampler:
    """A search worker's TPE sampler, told every trial of the study the store holds (its own and
    the other nodes'): seeded by the worker, so that nodes told the same trials draw apart."""

    def __init__(self, space: dict[str, Any], objective: str, worker: int, workers: int) -> None:
        self.space, self.objective = space, objective
        self.worker, self.workers = worker, workers
        self.study = sampler_study(seed=SEED + worker)
        self.told: list[Any] = []

    def tell_known(self, r: TrialResult, results: Sequence[TrialResult]) -> None:
        """Tell the sampler a trial it did not ask for (measured before, or by another node)."""
        t = known_trial(r.config, self.space, told_value(r, results, self.objective))
        if t is not None:
            self.study.add_trial(t)
            self.told.append(t)

    def start(self) -> None:
        """Enqueue the neighbours of the fastest configuration told, each worker from its own
        share of them first (the others after), so that nodes begin on different ones."""
        if not self.told:
            return
        around = neighbours(min(self.told, key=lambda t: t.value))
        cut = len(around) * self.worker // self.workers
        for params in around[cut:] + around[:cut]:
            self.study.enqueue_trial(params, skip_if_exists=True)

    def ask(self) -> Any:
        return self.study.ask()

    def tell(self, t: Any, r: TrialResult | None, results: Sequence[TrialResult]) -> None:
        """Tell the asked trial ``t`` what ``r`` measured; None: another node runs it (told failed
        here, so this worker's sampler leaves it; its value arrives with the store's rows)."""
        import optuna

        if r is None:
            self.study.tell(t, state=optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(t, told_value(r, results, self.objective))


def search_counts(rows: Sequence[dict[str, Any]], run_id: str) -> dict[str, int]:
    """Searched trials of the run ``run_id`` stored, by the node that ran them."""
    out: dict[str, int] = {}
    for row in rows:
        if row["result"].get("search") == run_id:
            node = str(row["result"].get("node", "?"))
            out[node] = out.get(node, 0) + 1
    return out


def run_study(executor: Any, unit: StudyUnit, *, search: Callable[[StudyUnit], dict[str, Any]],
              final: Callable[[StudyUnit], Any], own_platform: str, cluster: str,
              progress: Callable[[str, int, int], None] | None = None) -> Any:
    """Run a study's units on ``executor``'s nodes of one platform (see the module's doc): the
    workers, the first of them the lead, then the final unit; the study's
    :class:`~rooftune.tuning.result.TuneResult`, with ``fleet`` saying where the trials ran."""
    from rooftune.store import Store

    step = progress or (lambda *_: None)
    nodes = executor.nodes()
    pid, others = study_platform(nodes, own_platform)
    ours = [n for n in nodes if n.platform_id == pid]
    notes = [f"node {n.address} ({n.id[:12]}) is of platform {n.platform_id}, not the study's {pid}: not used"
             for n in others]
    # without a search the lead alone has work
    n = 1 if unit.spec.guidelines_only else len(ours)
    with Store(unit.store) as store:
        store.start_fleet_run(unit.run_id, kind="study", name=unit.model, cluster=cluster,
                              nodes={n.id: n.platform_id for n in ours}, planned=2 + n)
        status = "interrupted"
        try:
            step(f"guideline, baselines and seeds on the lead node, then the search on {n} node(s)", 0, 2)
            workers = [replace(unit, role="lead" if i == 0 else "search", worker=i, workers=n) for i in range(n)]
            ran: list[dict[str, Any]] = []

            def searched(_pid: str, _unit: Any, result: dict[str, Any]) -> None:
                ran.append(result)
                store.update_fleet_run(unit.run_id, done=1 + len(ran))

            executor.map(search, workers, platforms=[pid], spread=True, on_result=searched)
            (lead,) = [r for r in ran if r.get("lead") is not None]
            key = lead["key"]
            # claims left by a worker that was lost and not run again (the search's time ran out)
            store.release_claims([c["id"] for c in store.claims(key) if c["claim"].get("search") == unit.run_id])
            search_s = max(r["ended_at"] for r in ran) - lead["search_started"]
            said = [*lead["lead"]["notes"], *notes]
            said += [x for r in ran for x in r["notes"] if x not in said]
            handed = {"notes": said, "phase_s": lead["lead"]["phase_s"], "search_s": search_s}
            step("final comparisons on one node", 1, 2)
            result, final_node = _one(executor.map(final, [replace(unit, role="final", key=key, handed=handed)],
                                                   platforms=[pid], spread=True))
            rows = store.trials(key)
            status = "done"
        finally:
            store.update_fleet_run(unit.run_id, done=2 + n if status == "done" else None, status=status)
    by_node = search_counts(rows, unit.run_id)
    searched_n = sum(by_node.values())
    names = {x.id: x.address for x in nodes}
    fleet = {"cluster": cluster, "platform": pid,
             "nodes": {x.id: {"address": x.address, "searched": by_node.get(x.id, 0),
                              # proposals another node had claimed or stored first
                              "taken": sum(r["taken"] for r in ran if r["node"] == x.id)} for x in ours},
             "workers": [{k: r[k] for k in ("worker", "node", "ran", "taken", "started_at", "ended_at")}
                         for r in sorted(ran, key=lambda r: r["worker"])],
             "nodes_with_trials": len({str(r["result"].get("node")) for r in rows if r["result"].get("node")}),
             "not_used": [{"id": x.id, "address": x.address, "platform": x.platform_id} for x in others],
             "searched": searched_n, "search_s": search_s,
             "trials_per_min": searched_n / (search_s / 60) if search_s > 0 else 0.0,
             "lead_node": lead["lead"]["node"], "final_node": final_node,
             "trials": [{"name": r["config"].get("name"), "node": r["result"].get("node"),
                         "address": names.get(str(r["result"].get("node")), "")} for r in rows]}
    return replace(result, fleet=fleet)


def _one(results: dict[str, list[Any]]) -> Any:
    """The result of a single unit mapped with ``spread``."""
    found = [r for rs in results.values() for r in rs]
    if len(found) != 1:
        raise ClusterError(f"a study's unit came back {len(found)} times (the dispatch stopped early)")
    return found[0]


def new_run_id() -> str:
    return str(uuid.uuid4())

"""A tuning study on a local Ray cluster (the two nodes of tests/fleet/conftest.py, of this
machine's platform, and one of another added here) into a shared store: the trials spread over the
two nodes, none measured twice, the node of another platform left out and named, the final
comparisons on one node; the claims that share the sampler; and the refusals."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rooftune.bench import Policy
from rooftune.errors import ClusterError, InvalidArgument
from rooftune.fleet import NODE_RESOURCE
from rooftune.platform import current_platform
from rooftune.store import Store
from rooftune.tuning import TrialResult, tune
from rooftune.tuning.cluster import CLAIM_STALE_S, Claims, study_platform
from rooftune.tuning.space import run_key
from tests.fleet.conftest import node_environment
from tests.test_cli import assert_one_line_error, rooftune_in_process

ray = pytest.importorskip("ray")

CNN = "tests.analysis.tiny_models:small_cnn"
#: Trials timed briefly: what is checked is where they run, not their figures.
FAST = Policy(number=1, warmup_s=0.05, budget_s=0.3, min_samples=6, max_samples=60)
#: An OpenMP setting is part of the platform id: a node started with it is of another platform.
OTHER_PLATFORM_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


@pytest.fixture
def other_node(cluster: Any) -> Iterator[Any]:
    """A node of another platform beside the cluster's two, for one test."""
    with node_environment(OTHER_PLATFORM_ENV):
        node = cluster.add_node(num_cpus=1, resources={NODE_RESOURCE: 1})
    cluster.wait_for_nodes()
    try:
        yield node
    finally:
        cluster.remove_node(node)


# A whole study on a cluster, whose fixed configurations run whatever the budget: its time grows
# with the host's load, and the limit is there only to stop a hang.
@pytest.mark.timeout(2400)
def test_a_study_spreads_its_trials_over_the_nodes_of_its_platform(cluster: Any, other_node: Any, shared_db: str,
                                                                  tmp_path: Path) -> None:
    save = tmp_path / "best.json"
    # the budget only caps (--trials ends the search, one pair of processes a comparison): beside
    # busy processes the guideline and baselines alone took 600 s, leaving the search nothing
    r = tune(CNN, runtimes=["eager"], trials=4, budget_s=1800, store=shared_db, trial_policy=FAST, compare_policy=FAST,
             compare_pairs=1, save=save, cluster=cluster.address)
    f = r.fleet
    assert f is not None
    pid = current_platform().id
    assert f["platform"] == pid and len(f["nodes"]) == 2
    # the node of the other platform: not used, and named
    (other,) = f["not_used"]
    assert other["platform"] != pid
    assert any(other["id"][:12] in n and "not used" in n for n in r.notes)
    # the searched trials: --trials of them, spread over both nodes
    assert f["searched"] == 4 and sorted(n["searched"] for n in f["nodes"].values())[0] >= 1
    assert f["nodes_with_trials"] == 2 and f["trials_per_min"] > 0
    with Store(shared_db) as s:
        (key,) = s.recent_studies(0.0)
        rows = s.trials(key)
        assert s.claims(key) == []  # every claim became a trial or was released
    # no configuration measured twice: one row each, and each ran once
    assert len(rows) == len({row["config_key"] for row in rows}) == len(r.trials)
    assert max(Counter(run_key(TrialResult.from_stored(row).config) for row in rows).values()) == 1
    assert {row["result"]["node"] for row in rows} == set(f["nodes"])
    # the lead ran the guideline and the baselines; one node ran every final comparison
    fixed = {r.guideline.config.name, *r.baselines}
    assert {row["result"]["node"] for row in rows if row["config"]["name"] in fixed} == {f["lead_node"]}
    assert f["final_node"] in f["nodes"]
    assert r.speedup and all(c.get("pairs", 0) >= 1 or c.get("ratio") == 1.0 for c in r.speedup.values())
    assert r.best.figures_from == "interleaved" and save.exists()
    with Store(shared_db) as st:
        (run,) = [x for x in st.fleet_runs(in_flight=False) if x["kind"] == "study"]
        assert run["status"] == "done" and set(run["nodes"]) == set(f["nodes"])


@pytest.mark.parametrize("backend", ["sqlite", "shared"])
def test_claims_give_each_configuration_to_one_worker_and_a_dead_one_back(backend: str, tmp_path: Path,
                                                                         request: pytest.FixtureRequest) -> None:
    platform = current_platform()
    db = str(tmp_path / "c.db") if backend == "sqlite" else request.getfixturevalue("shared_db")
    with Store(db) as s:
        a = Claims(s, platform, "study", "run-1", 0, "node-a")
        b = Claims(s, platform, "study", "run-1", 1, "node-b")
        first = a.claim("c1", {"name": "trial 0.0"})
        assert first["mine"] and not b.claim("c1", {"name": "trial 1.0"})["mine"]
        assert s.trials("study") == []  # a claim is not a trial
        assert b.rank(b.claim("c2", {})["id"]) == 1  # one configuration of the run claimed before it
        s.save_trial(platform, study_key="study", config_key="c1", status="ok", config={"name": "trial 0.0"},
                     result={"latency_s": 0.001, "node": "node-a", "search": "run-1"})
        (row,) = s.trials("study")
        assert row["result"]["node"] == "node-a"  # the result replaced the claim
        taken = b.claim("c1", {})
        assert not taken["mine"] and taken["status"] == "ok"
        # worker 1 run again (its node was lost) takes its claim back; worker 0 may then have it
        b.take_back()
        assert a.claim("c2", {})["mine"]
        # a claim older than any trial runs is taken over
        s.claim_trial(platform, study_key="study", config_key="c3", config={}, claim={"node": "gone"}, stale_s=0)
        with s.transaction() as t:
            from sqlalchemy import update

            from rooftune.store.schema import TrialRow
            t.execute(update(TrialRow).where(TrialRow.config_key == "c3").values(created_at=0.0))
        assert CLAIM_STALE_S > 0 and a.claim("c3", {})["mine"]
        assert not b.claim("c3", {})["mine"]


def test_the_study_platform_is_the_one_most_nodes_have() -> None:
    from rooftune.fleet import Node

    nodes = [Node("n1", "h1", "A", 1.0), Node("n2", "h2", "B", 1.0), Node("n3", "h3", "B", 1.0)]
    assert study_platform(nodes, "A") == ("B", [nodes[0]])
    assert study_platform(nodes[:2], "A") == ("A", [nodes[1]])  # a tie: this machine's
    with pytest.raises(ClusterError, match="no node"):
        study_platform([], "A")


def test_bad_input_on_a_cluster_is_one_line_each(tmp_path: Path) -> None:
    from torch import nn

    with pytest.raises(InvalidArgument, match="allowed with --cluster a name every node can load"):
        tune(nn.Linear(2, 2), example_inputs=(), cluster="127.0.0.1:1")
    for memory in ("sqlite://", "sqlite:///:memory:"):
        with pytest.raises(InvalidArgument, match="in-memory database is not shared"):
            tune(CNN, store=memory, cluster="127.0.0.1:1")
    with pytest.raises(InvalidArgument, match="allowed HOST:PORT"):
        tune(CNN, cluster="head")
    proc = rooftune_in_process("tune", CNN, "--cluster", "127.0.0.1:1", "--db", str(tmp_path / "r.db"))
    assert_one_line_error(proc, "cannot reach the Ray cluster at 127.0.0.1:1")
    proc = rooftune_in_process("tune", CNN, "--budget", "-1", "--cluster", "127.0.0.1:1")
    assert_one_line_error(proc, "budget")  # refused before the cluster is asked
    assert not (tmp_path / "r.db").exists()


"""A kernel-family sweep on the local Ray cluster (a head and two worker nodes, the fixture of
tests/fleet/conftest.py) into a shared store: with a node of another platform beside them, the points one
machine of each platform stores, under each platform; a node killed mid-sweep losing no point and
storing none twice while ``fleet status`` shows the sweep in flight, and the sweep run again
taking every point from the store; and the refusals (an unreachable cluster, a store the nodes
would not share, a node of another rooftune version), and a relative SQLite path handed to the
nodes made absolute."""

from __future__ import annotations

import csv
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import rooftune
from rooftune.errors import ClusterError, InvalidArgument
from rooftune.fleet import NODE_RESOURCE, LocalExecutor, Node, RayExecutor, shared_store
from rooftune.fleet.shared import check_versions
from rooftune.platform import Platform, current_platform
from rooftune.platform.fingerprint import collect
from rooftune.store import Store
from rooftune.sweep.cluster import run_on_fleet
from rooftune.sweep.run import check_arguments
from tests.conftest import make_ceilings
from tests.fleet.conftest import drive
from tests.test_cli import assert_one_line_error, rooftune_in_process

ray = pytest.importorskip("ray")

#: Timing kept short: what is checked is where points go, not their figures.
FAST = 0.02
#: A point's budget where the findings' speedups are measured again: the interleaved comparison
#: gets twice it, enough for a finite interval on a busy host (the points stop early, at +-3 %).
CONFIRM_BUDGET = 1.0
CONV = {"batch": "1,2", "channels": "4", "size": "6"}


def with_ceilings(db: str | Path, platform: Platform | None = None) -> None:
    """Made-up ceilings of ``platform`` (default: this machine's, the nodes') in ``db``, so that no
    node measures them."""
    platform = platform or current_platform()
    c = make_ceilings(platform)
    with Store(db) as s:
        s.save_ceilings(platform, c.to_dict(), quick=False, threads=c.threads)


def stored(db: str | Path) -> list[tuple[str, str, str]]:
    with Store(db) as s:
        return [(d["platform_id"], d["key"], d["status"]) for d in s.sweep_points()]


def test_a_sweep_on_two_platforms_stores_the_points_one_machine_of_each_stores(cluster: Any, shared_db: str,
                                                                               tmp_path: Path) -> None:
    # a third node whose workers start with OMP_NUM_THREADS=1: another platform (OpenMP's settings
    # are part of the platform id), as a node of another machine type would be
    odd = cluster.add_node(num_cpus=1, resources={NODE_RESOURCE: 1}, env_vars={"OMP_NUM_THREADS": "1"})
    cluster.wait_for_nodes()
    here, other = current_platform(), collect(env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert here.id != other.id
    with_ceilings(shared_db)
    with_ceilings(shared_db, other)
    try:
        proc = rooftune_in_process("sweep", "conv2d", "--batch", "1,2", "--channels", "4", "-p", "size=6",
                                   "--precision", "fp32", "--threads", "1", "--point-budget", str(CONFIRM_BUDGET),
                                   "--cluster", cluster.address, "--export", str(tmp_path / "points.csv"), "--json",
                                   "--db", shared_db)
    finally:
        cluster.remove_node(odd)
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "points.csv") as f:
        assert Counter(row["platform_id"] for row in csv.DictReader(f)) == {here.id: 4, other.id: 4}
    fleet = json.loads(proc.stdout)
    assert sorted(fleet["sweeps"]) == sorted([here.id, other.id]) and fleet["units"] == 8
    for pid, result in fleet["sweeps"].items():  # each platform's own points, roofs and findings
        assert (result["added"], result["resumed"], len(result["points"])) == (4, 0, 4)
        assert {p["platform_id"] for p in result["points"]} == {pid} and result["platform_id"] == pid
        assert result["roofs"]["threads"] == 1
        # the NHWC-over-NCHW speedups the findings state were measured again interleaved on a node
        assert any("were measured again interleaved" in f for f in result["findings"]), result["findings"]

    local = tmp_path / "one.db"
    with_ceilings(local)
    one = rooftune.sweep.sweep("conv2d", CONV, precisions=["fp32"], threads=1, db=str(local), point_budget_s=FAST,
                         confirm=False)
    assert sorted(p for p in stored(shared_db) if p[0] == here.id) == sorted(stored(local)) and len(one.points) == 4
    assert sorted(p.key for p in one.points) != sorted(p["key"] for p in fleet["sweeps"][other.id]["points"])
    assert all(status == "ok" for _, _, status in stored(shared_db))
    with Store(shared_db) as s:
        (run,) = s.fleet_runs(in_flight=False)
        assert (run["kind"], run["status"], run["done"], run["planned"]) == ("sweep", "done", 8, 8)
    status = rooftune_in_process("fleet", "status", "--json", "--db", shared_db)
    platforms = {p["id"]: (p["sweep_points"], p["profiled_rows"]) for p in json.loads(status.stdout)["platforms"]}
    assert platforms == {here.id: (4, 0), other.id: (4, 0)}


@pytest.mark.timeout(1500)  # its waits bound a hang, not a speed
def test_a_node_killed_mid_sweep_loses_no_point_and_stores_none_twice(cluster: Any, shared_db: str) -> None:
    with_ceilings(shared_db)
    doomed = cluster.add_node(num_cpus=1, resources={NODE_RESOURCE: 1})
    cluster.wait_for_nodes()
    executor = RayExecutor(cluster.address)
    assert len(executor.nodes()) == 3
    args = check_arguments("conv2d", {"batch": "1:6:+1", "channels": "4", "size": "6"}, passes=None,
                           precisions=["fp32"], algorithms=None, layouts=None, threads=1, device=None,
                           autotune=(False,), launches=None, budget_s=600.0, point_budget_s=0.1, memory_cap=None)
    driver, outcome = drive(lambda: run_on_fleet(executor, args, db=shared_db, confirm=False))
    try:
        deadline = time.monotonic() + 600  # bounds a hang: beside busy processes the first points start late
        while len(stored(shared_db)) < 3:  # every node at work
            assert time.monotonic() < deadline and driver.is_alive(), outcome
            time.sleep(0.02)
        shown = rooftune_in_process("fleet", "status", "--db", shared_db)
        cluster.remove_node(doomed, allow_graceful=False)
        driver.join(timeout=600)
        assert not driver.is_alive()
        again = run_on_fleet(executor, args, db=shared_db, confirm=False)  # resumed: every point from the store
    finally:
        executor.close()
    assert shown.returncode == 0 and "sweep conv2d (6 shapes)" in shown.stdout, shown.stdout
    assert "error" not in outcome, outcome.get("error")
    keys = Counter(stored(shared_db))
    assert len(keys) == 12 and set(keys.values()) == {1}  # 6 batches x 2 layouts, each once
    assert all(status == "ok" for _, _, status in keys)
    (r,) = outcome["result"].results.values()
    assert len(r.points) == 12 and len({p.key for p in r.points}) == 12
    assert executor.rerun >= 1  # the node had a point in hand (units run back to back), run again elsewhere
    (resumed,) = again.results.values()
    assert (resumed.added, resumed.resumed) == (0, 12) and len(stored(shared_db)) == 12
    assert [p.median_s for p in resumed.points] == [p.median_s for p in r.points]
    assert any("turned off (--no-confirm)" in f for f in resumed.findings)


def test_an_unreachable_cluster_is_named_within_10_s(tmp_path: Path) -> None:
    t0 = time.monotonic()
    proc = rooftune_in_process("sweep", "lstm", "--cluster", "127.0.0.1:1", "--db", str(tmp_path / "r.db"))
    assert time.monotonic() - t0 < 10
    assert_one_line_error(proc, "cannot reach the Ray cluster at 127.0.0.1:1")
    assert not (tmp_path / "r.db").exists()


def test_a_store_the_nodes_do_not_share_is_refused(cluster: Any) -> None:
    # (profile --cluster follows the same rule: rooftune.fleet.shared_store)
    proc = rooftune_in_process("sweep", "conv2d", "--cluster", cluster.address, "--db", "sqlite://")
    assert_one_line_error(proc, "invalid --db 'sqlite://': an in-memory database is not shared with the nodes",
                          "postgresql+psycopg://")
    proc = rooftune_in_process("sweep", "conv2d", "--device", "cuda", "--cluster", cluster.address)
    assert_one_line_error(proc, "invalid device 'cuda': cpu only with a cluster")


def test_a_node_of_another_rooftune_version_is_named() -> None:
    fingerprint = current_platform().to_dict()
    same = Node("a" * 20, "10.0.0.1", "p", 4.0, fingerprint)
    older = Node("b" * 20, "10.0.0.2", "p", 4.0, fingerprint | {"library_versions": {"rooftune": "0.0.1"}})
    check_versions([same])
    with pytest.raises(ClusterError, match=r"node 10.0.0.2 \(0.0.1\) runs another rooftune than this one"):
        check_versions([same, older])


def test_the_nodes_get_a_relative_sqlite_path_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    url = shared_store(LocalExecutor(), "sqlite:///rel.db")  # (SQLAlchemy's relative form)
    assert url == f"sqlite:///{tmp_path / 'rel.db'}" and (tmp_path / "rel.db").is_file()
    assert shared_store(LocalExecutor(), url) == url
    for memory in ("sqlite://", "sqlite:///:memory:"):
        with pytest.raises(InvalidArgument, match="an in-memory database is not shared with the nodes"):
            shared_store(LocalExecutor(), memory)

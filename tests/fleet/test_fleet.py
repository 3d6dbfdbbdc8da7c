"""A campaign on a local Ray cluster (a head and two worker nodes, started here) into a shared
PostgreSQL store (tests/pg.py; a SQLite file where PostgreSQL is not installed): the rows of one
machine, a worker killed mid-campaign losing nothing and storing nothing twice, ``fleet status``,
and the refusals."""

from __future__ import annotations

import json
import socket
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rooftune.bench import Policy
from rooftune.errors import ClusterError, InvalidArgument
from rooftune.fleet import NODE_RESOURCE, RayExecutor, check_address
from rooftune.platform import current_platform
from rooftune.primitives import ConvSpec
from rooftune.profiling import run_campaign
from rooftune.profiling.cluster import run_on_fleet
from rooftune.store import Store
from tests.fleet.conftest import drive
from tests.test_cli import assert_one_line_error, rooftune_in_process

ray = pytest.importorskip("ray")

PRIMITIVES = ["pytorch-default", "im2col-gemm"]
#: Tiny kernels timed briefly: what is checked is where rows go, not their figures.
POLICY = Policy(min_sample_time_s=0.001, warmup_s=0.005, budget_s=0.03, min_samples=3, target_rel_ci=0.5)


def specs(n: int, first: int = 0) -> list[tuple[ConvSpec, list[str]]]:
    return [(ConvSpec(1, 4, 5 + i, 5 + i, 4, 3, 3, padding=1), ["t"]) for i in range(first, first + n)]


def rows(db: str) -> list[tuple[str, str, str, int, str, int]]:
    with Store(db) as s:
        return [(r["platform_id"], r["spec_key"], r["primitive"], r["threads"], r["status"], len(r["pass_medians"]))
                for r in s.profiles()]


def campaign(executor: RayExecutor, db: str, n: int, **kw: Any) -> Any:
    args = {"threads": [1], "primitives": PRIMITIVES, "budget_s": 600, "passes": 2, "extra_passes": 0,
            "transforms": False, "policy": POLICY} | kw
    return run_on_fleet(executor, specs(n), db=db, **args)


def test_two_nodes_store_the_rows_one_machine_stores(cluster: Any, shared_db: str, tmp_path: Path) -> None:
    executor = RayExecutor(cluster.address)
    try:
        assert len(executor.nodes()) == 2
        assert {n.platform_id for n in executor.nodes()} == {current_platform().id}
        result = campaign(executor, shared_db, 4)
    finally:
        executor.close()
    with Store(tmp_path / "one.db") as one:
        run_campaign(specs(4), store=one, primitives=PRIMITIVES, threads=[1], passes=2, extra_passes=0,
                     transforms=False, policy=POLICY)
    fleet, local = rows(shared_db), rows(str(tmp_path / "one.db"))
    assert sorted(fleet) == sorted(local) and len(fleet) == 8
    assert all(r[4] == "ok" and r[5] == 2 for r in fleet)
    (r,) = result.results.values()
    assert (r.planned, r.added, r.retimed, result.units) == (4, 8, 8, 8)
    with Store(shared_db) as s:
        (run,) = s.fleet_runs(in_flight=False)
        assert (run["status"], run["done"], run["planned"]) == ("done", 8, 8)
        assert s.fleet_runs(in_flight=True) == []


# the waits below bound a hang, not a speed: beside busy processes on 2 cores a node's first units
# start minutes late
@pytest.mark.timeout(1500)
def test_a_node_killed_mid_campaign_loses_no_row_and_stores_none_twice(cluster: Any, shared_db: str) -> None:
    doomed = cluster.add_node(num_cpus=1, resources={NODE_RESOURCE: 1})
    cluster.wait_for_nodes()
    executor = RayExecutor(cluster.address)
    assert len(executor.nodes()) == 3
    driver, outcome = drive(lambda: campaign(executor, shared_db, 9))
    try:
        deadline = time.monotonic() + 600
        while len(rows(shared_db)) < 6:  # three units stored: every node is at work
            assert time.monotonic() < deadline and driver.is_alive(), outcome
            time.sleep(0.05)
        cluster.remove_node(doomed, allow_graceful=False)
        driver.join(timeout=600)
        assert not driver.is_alive()
    finally:
        executor.close()
    assert "error" not in outcome, outcome.get("error")
    stored = rows(shared_db)
    keys = Counter(r[:4] for r in stored)
    assert len(keys) == 18 and set(keys.values()) == {1}  # 9 specs x 2 primitives, each once
    assert all(r[4] == "ok" and r[5] == 2 for r in stored)  # and every one with both its passes
    assert outcome["result"].units >= 18
    assert executor.rerun >= 1  # the node had a unit in hand (units run back to back), run again elsewhere


def test_a_unit_refused_on_its_node_is_the_one_line_error(cluster: Any, shared_db: str) -> None:
    executor = RayExecutor(cluster.address)
    try:
        with pytest.raises(InvalidArgument, match="invalid threads 999: allowed 1.."):
            campaign(executor, shared_db, 1, threads=[999])
    finally:
        executor.close()
    with Store(shared_db) as s:
        (run,) = s.fleet_runs(in_flight=False)
        assert run["status"] == "interrupted" and s.count("profiles") == 0


def test_fleet_status_lists_nodes_platforms_rows_and_runs(cluster: Any, shared_db: str) -> None:
    executor = RayExecutor(cluster.address)
    try:
        campaign(executor, shared_db, 1, passes=1)
    finally:
        executor.close()
    with Store(shared_db) as s:  # a run whose driver is still at work
        s.start_fleet_run("r-1", kind="campaign", name="resnet50", cluster="head:6379", nodes={}, planned=5)
        s.save_trial(current_platform(), study_key="study-1", config_key="c", status="ok", config={}, result={})
    proc = rooftune_in_process("fleet", "status", "--cluster", cluster.address, "--json", "--db", shared_db)
    assert proc.returncode == 0, proc.stderr
    st = json.loads(proc.stdout)
    pid = current_platform().id
    assert [n["platform_id"] for n in st["nodes"]] == [pid] * len(st["nodes"]) and len(st["nodes"]) >= 2
    (platform,) = st["platforms"]
    assert (platform["id"], platform["profiled_rows"], platform["nodes"]) == (pid, 2, len(st["nodes"]))
    assert [r["name"] for r in st["campaigns_in_flight"]] == ["resnet50"]
    assert st["studies_in_flight"]["study-1"]["trials"] == 1
    text = rooftune_in_process("fleet", "status", "--db", shared_db)
    assert text.returncode == 0 and "resnet50" in text.stdout and pid in text.stdout


@pytest.mark.parametrize("command", [["fleet", "status"], ["profile", "--sample", "1"]])
def test_an_unreachable_cluster_is_named_within_10_s(command: list[str], tmp_path: Path) -> None:
    t0 = time.monotonic()
    proc = rooftune_in_process(*command, "--cluster", "127.0.0.1:1", "--db", str(tmp_path / "r.db"))
    assert time.monotonic() - t0 < 10
    assert_one_line_error(proc, "cannot reach the Ray cluster at 127.0.0.1:1")


def test_a_port_that_is_not_a_ray_head_is_named_within_10_s() -> None:
    with socket.socket() as listener:  # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        t0 = time.monotonic()
        proc = rooftune_in_process("fleet", "status", "--cluster", address)
        assert time.monotonic() - t0 < 10
    assert_one_line_error(proc, f"cannot connect to the Ray cluster at {address}")


def test_a_malformed_cluster_address_is_refused() -> None:
    for bad in ("", "head", "head:port", "head:0", "ray://head:10001"):
        with pytest.raises(InvalidArgument, match="allowed HOST:PORT"):
            check_address(bad)
    assert check_address(" head:6379 ") == "head:6379"
    with pytest.raises(InvalidArgument, match=r"invalid cluster '\*\*\*@head:6379': allowed HOST:PORT") as refused:
        check_address("user:s3cret@head:6379")
    assert "s3cret" not in str(refused.value)
    with pytest.raises(ClusterError, match="cannot reach"):
        RayExecutor("127.0.0.1:1")


def test_profile_on_the_cluster_from_the_command_line(cluster: Any, shared_db: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # the sampled spec replaced by a tiny one: what is checked is the way from the command to the nodes
    monkeypatch.setattr("rooftune.profiling.run.collect_specs", lambda *a, **k: (specs(1), {}))
    proc = rooftune_in_process("profile", "--sample", "1", "--primitives", "pytorch-default", "--threads", "1",
                               "--passes", "1", "--extra-passes", "0", "--budget", "300", "--cluster", cluster.address,
                               "--json", "--db", shared_db)
    assert proc.returncode == 0, proc.stderr
    campaigns = json.loads(proc.stdout)["campaigns"]
    pid = current_platform().id
    assert list(campaigns) == [pid] and campaigns[pid]["ok"] >= 1 and campaigns[pid]["planned"] == 1
    with Store(shared_db) as s:
        assert s.profiled_platforms() == {pid: campaigns[pid]["added"]}
    refused = rooftune_in_process("profile", "--sample", "1", "--cluster", cluster.address, "--isa-variant", "avx2",
                                  "--db", shared_db)
    assert_one_line_error(refused, "--isa-variant", "not allowed with --cluster")

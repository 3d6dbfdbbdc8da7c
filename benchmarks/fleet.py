"""The fleet's targets (issue: PostgreSQL as a real backend, campaigns on a Ray cluster):

- ``writers``: 4 processes x 10,000 profiled rows into one PostgreSQL store at once, half of each
  writer's rows also written by another: 0 lost, 0 duplicate (and the rows per second).
- ``overhead``: Ray's overhead per profiled spec, <= 5 % of its measurement time: the same campaign
  (resnet18's convolutions, two primitives, one pass) run here and through a one-node local Ray
  cluster, interleaved by the harness (``rooftune.bench.compare``), each run into a fresh store.
- ``rows``: a 2-node local cluster stores the same rows as one machine; a third node killed
  mid-campaign: 0 lost, 0 duplicate rows.
- ``sweep``: the fleet's overhead per sweep point: the same conv2d sweep (16 points) run here and
  through a one-node local Ray cluster, interleaved by the harness, each run into a fresh store
  holding this machine's quick ceilings (measured once into the default store when missing).

    PYTHONPATH=src .venv/bin/python benchmarks/fleet.py [--part writers,overhead,rows,sweep] [--db URL] [--json OUT]

Without ``--db`` a throw-away PostgreSQL server is started in a temporary folder (tests/pg.py),
else a SQLite file where PostgreSQL is not installed (``writers`` needs PostgreSQL).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.pg

WRITER = r"""
import json, sys, time
from rooftune.platform import Platform
from rooftune.store import Store

url, platform_json, first, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
platform = Platform.from_dict(json.loads(platform_json))
added = 0
with Store(url) as store:
    for i in range(first, first + count, 100):
        rows = [{"spec_key": f"s{j:07d}", "spec": {"j": j}, "primitive": "p", "threads": 1, "status": "ok",
                 "median_s": 1e-3, "iqr_s": 0.0, "repetitions": 1, "sources": ["w"]} for j in range(i, i + 100)]
        added += store.save_profiles(platform, rows)
print(added)
"""

PRIMITIVES = ["pytorch-default", "im2col-gemm"]


def writers(new_db: Any, n: int = 4, rows: int = 10_000) -> dict[str, Any]:
    from rooftune.platform import current_platform
    from rooftune.store import Store

    url = new_db()
    Store(url).close()
    platform = json.dumps(current_platform().to_dict())
    firsts = [k * rows // 2 for k in range(n)]  # writer k: rows k*5000 .. k*5000+9999
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, url, platform, str(f), str(rows)],
                              stdout=subprocess.PIPE, text=True) for f in firsts]
    added = [int(p.communicate()[0]) for p in procs]
    wall = time.perf_counter() - t0
    assert all(p.returncode == 0 for p in procs)
    expected = {f"s{j:07d}" for f in firsts for j in range(f, f + rows)}
    with Store(url) as s:
        keys = Counter(r["spec_key"] for r in s.profiles())
    out = {"writers": n, "rows_each": rows, "distinct": len(expected), "stored": sum(keys.values()),
           "lost": len(expected - set(keys)), "duplicate": sum(v - 1 for v in keys.values()),
           "added_reported": sum(added), "wall_s": wall, "rows_per_s": n * rows / wall}
    print(f"writers: {n} x {rows} rows ({len(expected)} distinct) in {wall:.1f} s, {out['rows_per_s']:.0f} rows/s; "
          f"stored {out['stored']}, lost {out['lost']}, duplicate {out['duplicate']}", flush=True)
    return out


def overhead(new_db: Any, samples: int) -> dict[str, Any]:
    from ray.cluster_utils import Cluster

    from rooftune.bench import Policy, compare
    from rooftune.fleet import NODE_RESOURCE, RayExecutor
    from rooftune.platform import current_platform
    from rooftune.profiling import collect_specs, run_campaign
    from rooftune.profiling.cluster import run_on_fleet
    from rooftune.profiling.isolated import Isolated
    from rooftune.store import Store

    cores = current_platform().usable_cores
    specs, _ = collect_specs(["resnet18"], 0, [1])
    kw = {"threads": [cores], "primitives": PRIMITIVES, "passes": 1, "extra_passes": 0, "transforms": False}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    runner = Isolated()
    try:
        cluster.add_node(num_cpus=cores, resources={NODE_RESOURCE: 1})
        cluster.wait_for_nodes()
        executor = RayExecutor(cluster.address)
        dbs: list[str] = []

        def fresh() -> None:
            dbs.append(new_db())
            Store(dbs[-1]).close()

        def local() -> None:
            with Store(dbs[-1]) as s:
                run_campaign(specs, store=s, runner=runner, budget_s=3600, **kw)

        def fleet() -> None:
            run_on_fleet(executor, specs, db=dbs[-1], budget_s=3600, **kw)

        policy = Policy(number=1, warmup_s=0.0, min_samples=samples, max_samples=samples, budget_s=float("inf"),
                        min_sample_time_s=0.0)
        c = compare(local, fleet, label_a="local", label_b="ray", policy=policy, before=fresh)
        executor.close()
    finally:
        runner.close()
        cluster.shutdown()
    local_s, ray_s = c.a.median, c.b.median
    per_spec = (ray_s - local_s) / len(specs)
    out = {"specs": len(specs), "threads": cores, "samples": samples, "local_s": local_s, "ray_s": ray_s,
           "ratio_local_over_ray": c.ratio, "ratio_ci": list(c.ci),
           "overhead_per_spec_s": per_spec, "overhead_share": ray_s / local_s - 1}
    print(f"overhead: {len(specs)} specs of resnet18, {cores} threads: local {local_s:.2f} s, ray {ray_s:.2f} s "
          f"(medians of {samples}, interleaved); local/ray {c.ratio:.3f} [{c.ci[0]:.3f}, {c.ci[1]:.3f}]; "
          f"{per_spec * 1e3:.0f} ms per spec, {out['overhead_share'] * 100:+.1f} % of its measurement time",
          flush=True)
    return out


def rows_part(new_db: Any) -> dict[str, Any]:
    from ray.cluster_utils import Cluster

    from rooftune.bench import Policy
    from rooftune.fleet import NODE_RESOURCE, RayExecutor
    from rooftune.primitives import ConvSpec
    from rooftune.profiling import run_campaign
    from rooftune.profiling.cluster import run_on_fleet
    from rooftune.store import Store

    policy = Policy(min_sample_time_s=0.001, warmup_s=0.005, budget_s=0.05, min_samples=3, target_rel_ci=0.5)
    specs = [(ConvSpec(1, 8, 8 + i, 8 + i, 8, 3, 3, padding=1), ["b"]) for i in range(16)]
    kw = {"threads": [1], "primitives": PRIMITIVES, "passes": 2, "extra_passes": 0, "transforms": False,
          "policy": policy}

    def keys(url: str) -> Counter:
        with Store(url) as s:
            return Counter((r["platform_id"], r["spec_key"], r["primitive"], r["threads"], len(r["pass_medians"]))
                           for r in s.profiles())

    one = new_db()
    with Store(one) as s:
        run_campaign(specs, store=s, budget_s=3600, **kw)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1, resources={NODE_RESOURCE: 1})
        cluster.wait_for_nodes()
        two = new_db()
        executor = RayExecutor(cluster.address)
        run_on_fleet(executor, specs, db=two, budget_s=3600, **kw)
        same = keys(one) == keys(two)
        doomed = cluster.add_node(num_cpus=1, resources={NODE_RESOURCE: 1})
        cluster.wait_for_nodes()
        executor.close()
        executor = RayExecutor(cluster.address)
        killed = new_db()
        Store(killed).close()
        t = threading.Thread(target=run_on_fleet, args=(executor, specs), kwargs={"db": killed, "budget_s": 3600, **kw})
        t.start()
        while sum(keys(killed).values()) < 8:
            time.sleep(0.05)
        cluster.remove_node(doomed, allow_graceful=False)
        t.join()
        rerun = executor.rerun
        executor.close()
    finally:
        cluster.shutdown()
    got, want = keys(killed), keys(one)
    out = {"rows": sum(want.values()), "two_nodes_same_rows": same, "killed_rerun_units": rerun,
           "killed_lost": sum((want - got).values()), "killed_duplicate": sum(v - 1 for v in got.values() if v > 1),
           "killed_same_rows": got == want}
    print(f"rows: {out['rows']} rows; 2 nodes store the same rows as one machine: {same}; a node killed "
          f"mid-campaign: {rerun} unit(s) run again, {out['killed_lost']} lost, {out['killed_duplicate']} duplicate",
          flush=True)
    return out


def sweep_part(new_db: Any, samples: int) -> dict[str, Any]:
    from ray.cluster_utils import Cluster

    from rooftune.bench import Policy, compare
    from rooftune.fleet import NODE_RESOURCE, RayExecutor
    from rooftune.machine import get_ceilings
    from rooftune.platform import current_platform
    from rooftune.store import Store
    from rooftune.sweep.cluster import run_on_fleet
    from rooftune.sweep.run import check_arguments, sweep

    platform = current_platform()
    cores = platform.usable_cores
    with Store() as default:
        ceilings = get_ceilings(quick=True, store=default)
    grid = {"batch": "1,4", "channels": "16,32,64,128", "size": "14"}
    kw = {"precisions": ["fp32"], "threads": cores, "point_budget_s": 0.3}
    args = check_arguments("conv2d", grid, passes=None, algorithms=None, layouts=None, device=None, autotune=(False,),
                           launches=None, budget_s=float("inf"), memory_cap=None, **kw)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=cores, resources={NODE_RESOURCE: 1})
        cluster.wait_for_nodes()
        executor = RayExecutor(cluster.address)
        dbs: list[str] = []
        points: list[int] = []

        def fresh() -> None:
            dbs.append(new_db())
            with Store(dbs[-1]) as s:
                s.save_ceilings(platform, ceilings.to_dict(), quick=ceilings.quick, threads=ceilings.threads)

        def local() -> None:
            points.append(len(sweep("conv2d", grid, db=dbs[-1], quick=True, confirm=False, **kw).points))

        def fleet() -> None:
            (r,) = run_on_fleet(executor, args, db=dbs[-1], quick=True, confirm=False).results.values()
            points.append(len(r.points))

        policy = Policy(number=1, warmup_s=0.0, min_samples=samples, max_samples=samples, budget_s=float("inf"),
                        min_sample_time_s=0.0)
        c = compare(local, fleet, label_a="local", label_b="ray", policy=policy, before=fresh)
        executor.close()
    finally:
        cluster.shutdown()
    n = max(points)
    local_s, ray_s = c.a.median, c.b.median
    per_point = (ray_s - local_s) / n
    out = {"points": n, "threads": cores, "samples": samples, "local_s": local_s, "ray_s": ray_s,
           "ratio_local_over_ray": c.ratio, "ratio_ci": list(c.ci), "overhead_per_point_s": per_point,
           "overhead_share": ray_s / local_s - 1}
    print(f"sweep: {n} conv2d points, {cores} threads: local {local_s:.2f} s, ray {ray_s:.2f} s (medians of "
          f"{samples}, interleaved); local/ray {c.ratio:.3f} [{c.ci[0]:.3f}, {c.ci[1]:.3f}]; "
          f"{per_point * 1e3:.0f} ms per point, {out['overhead_share'] * 100:+.1f} % of the sweep's time", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", default="writers,overhead,rows")
    ap.add_argument("--db", default=None, help="a PostgreSQL server's URL (each run creates a database on it)")
    ap.add_argument("--samples", type=int, default=4, help="runs of each side in the overhead comparison")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from rooftune.platform import current_platform

    p = current_platform()
    print(f"# {p.cpu_model}, {p.usable_cores} usable cores, platform {p.id}", flush=True)
    parts = args.part.split(",")
    results: dict[str, Any] = {"platform_id": p.id}
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        if args.db is not None:
            base = args.db.rsplit("/", 1)[0]

            def new_db() -> str:
                import uuid

                import psycopg

                name = f"bench_{uuid.uuid4().hex[:12]}"
                with psycopg.connect(args.db.replace("+psycopg", ""), autocommit=True) as c:
                    c.execute(f"CREATE DATABASE {name}")
                return f"{base}/{name}"
        else:
            from tests import pg

            if pg.unavailable():
                counter = iter(range(10**6))

                def new_db() -> str:
                    return f"sqlite:///{tmp / f'b{next(counter)}.db'}"
                parts = [x for x in parts if x != "writers"]
            else:
                server = stack.enter_context(pg.server())
                new_db = server.new_database
        results["store"] = new_db().split("://")[0]
        if "writers" in parts:
            results["writers"] = writers(new_db)
        if "overhead" in parts:
            results["overhead"] = overhead(new_db, args.samples)
        if "rows" in parts:
            results["rows"] = rows_part(new_db)
        if "sweep" in parts:
            results["sweep"] = sweep_part(new_db, args.samples)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

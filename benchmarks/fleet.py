"""The fleet's targets (issue: PostgreSQL as a real backend, campaigns on a Ray cluster):

- ``writers``: 4 processes x 10,000 profiled rows into one PostgreSQL store at once, half of each
  writer's rows also written by another: 0 lost, 0 duplicate (and the rows per second).
- ``overhead``: Ray's overhead per profiled spec, <= 5 % of its measurement time: the same campaign
  (resnet18's convolutions, two primitives, one pass) run here and through a one-node local Ray
  cluster, interleaved by the harness (``rooftune.bench.compare``), each run into a fresh store.
- ``rows``: a 2-node local cluster stores the same rows as one machine; a third node killed
  mid-campaign: 0 lost, 0 duplicate rows.
- ``tune``: a study spread over 2 nodes runs >= 1.6x the searched trials per minute of one node:
  the same study (``--model``, eager, ``--trials`` searched trials, into a fresh store each time)
  on a local cluster of 1 node and of 2 nodes, in turn ``--rounds`` times; its trials per minute
  are the searched trials over the search phase's wall time (from the search units' dispatch to the
  last one's end). A local node stands for a machine of one core: it is pinned to a core of its
  own (``--pin``, the default where this machine has 2 cores or more: node k runs on core k, so
  both nodes, and the one node, are of the same 1-core platform), or with ``--no-pin`` shares
  every core with the other node (each then offers one CPU to Ray, but a trial's threads are not
  bound to it). The head, the driver and the store stay unpinned beside them.
- ``sweep``: the fleet's overhead per sweep point: the same conv2d sweep (16 points) run here and
  through a one-node local Ray cluster, interleaved by the harness, each run into a fresh store
  holding this machine's quick ceilings (measured once into the default store when missing).

    PYTHONPATH=src .venv/bin/python benchmarks/fleet.py [--part writers,overhead,rows,tune,sweep] [--db URL] [--json OUT]

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


def runs_policy(samples: int) -> Any:
    """The harness's policy for interleaving whole runs: ``samples`` of each side, one call each,
    no warm-up (each run starts from a fresh store)."""
    from rooftune.bench import Policy

    return Policy(number=1, warmup_s=0.0, min_samples=samples, max_samples=samples, budget_s=float("inf"),
                  min_sample_time_s=0.0)


def overhead(new_db: Any, samples: int) -> dict[str, Any]:
    from ray.cluster_utils import Cluster

    from rooftune.bench import compare
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

        c = compare(local, fleet, label_a="local", label_b="ray", policy=runs_policy(samples), before=fresh)
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


def tune_part(new_db: Any, model: str, trials: int, rounds: int, pin: bool) -> dict[str, Any]:
    import os
    import statistics

    from ray.cluster_utils import Cluster

    from rooftune.bench import Policy
    from rooftune.fleet import NODE_RESOURCE
    from rooftune.tuning import tune

    # the final comparisons are not what is measured here: brief ones keep the runs short
    brief = Policy(number=1, warmup_s=0.05, budget_s=0.3, min_samples=6, max_samples=60)
    root = str(Path(__file__).resolve().parent.parent)
    cores = sorted(os.sched_getaffinity(0))
    pin = pin and len(cores) >= 2
    runs: list[dict[str, Any]] = []
    for rnd in range(rounds):
        for nodes in (1, 2):
            saved = os.environ.get("PYTHONPATH")
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, saved]))  # (the tests' models)
            c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
            try:
                for k in range(nodes):
                    if pin:  # (the node's processes inherit the affinity of this one as it starts them)
                        os.sched_setaffinity(0, {cores[k % len(cores)]})
                    try:
                        c.add_node(num_cpus=1, resources={NODE_RESOURCE: 1})
                    finally:
                        os.sched_setaffinity(0, cores)
                c.wait_for_nodes()
                r = tune(model, runtimes=["eager"], trials=trials, budget_s=3600, store=new_db(), compare_policy=brief,
                         compare_pairs=1, cluster=c.address)
            finally:
                c.shutdown()
                if saved is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = saved
            f = r.fleet or {}
            run = {"round": rnd, "nodes": nodes, "pinned": pin, "platform": f["platform"], "searched": f["searched"], "search_s": f["search_s"],
                   "trials_per_min": f["trials_per_min"], "per_node": [n["searched"] for n in f["nodes"].values()],
                   "duration_s": r.duration_s}
            runs.append(run)
            print(f"tune: round {rnd + 1}, {nodes} node(s){' of 1 pinned core each' if pin else ''} (platform "
                  f"{f['platform']}): {run['searched']} searched trials in {run['search_s']:.1f} s, "
                  f"{run['trials_per_min']:.1f} trials/min (per node {run['per_node']}; study {r.duration_s:.0f} s)",
                  flush=True)
    one = [x["trials_per_min"] for x in runs if x["nodes"] == 1]
    two = [x["trials_per_min"] for x in runs if x["nodes"] == 2]
    ratios = [b / a for a, b in zip(one, two, strict=True)]
    out = {"model": model, "trials": trials, "pinned": pin, "runs": runs, "one_node_per_min": statistics.median(one),
           "two_nodes_per_min": statistics.median(two), "ratio": statistics.median(ratios),
           "ratio_min": min(ratios), "ratio_max": max(ratios)}
    print(f"tune: {model}, {trials} searched trials; 1 node {out['one_node_per_min']:.1f}/min, 2 nodes "
          f"{out['two_nodes_per_min']:.1f}/min (medians of {rounds}, in turn); 2 nodes / 1 node {out['ratio']:.2f}x "
          f"[{out['ratio_min']:.2f}, {out['ratio_max']:.2f}] (target >= 1.6)", flush=True)
    return out


def sweep_part(new_db: Any, samples: int) -> dict[str, Any]:
    from ray.cluster_utils import Cluster

    from rooftune.bench import compare
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

        c = compare(local, fleet, label_a="local", label_b="ray", policy=runs_policy(samples), before=fresh)
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
    ap.add_argument("--model", default="tests.analysis.tiny_models:small_cnn", help="the study's model (tune)")
    ap.add_argument("--trials", type=int, default=8, help="searched trials of each study (tune)")
    ap.add_argument("--rounds", type=int, default=2, help="1-node and 2-node studies run in turn this many times (tune)")
    ap.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                    help="each local node on a core of its own (tune)")
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
        if "tune" in parts:
            results["tune"] = tune_part(new_db, args.model, args.trials, args.rounds, args.pin)
        if "sweep" in parts:
            results["sweep"] = sweep_part(new_db, args.samples)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``rooftune fleet``: the nodes of a Ray cluster and the store they share."""

from __future__ import annotations

import sys
import time

from rooftune.cli.options import App, Cluster, Db, JsonOut
from rooftune.cli.printing import Table, out
from rooftune.fileio import json_text

fleet_app = App(no_args_is_help=True, help="A fleet of nodes (a Ray cluster) sharing one store.")


@fleet_app.command("status")
def fleet_status(cluster: Cluster = None, json_out: JsonOut = False, db: Db = None) -> None:
    """The cluster's nodes and their platforms, profiled rows and sweep points per platform, and the
    campaigns, sweeps and studies in flight."""
    from rooftune.fleet import fleet_status as status

    st = status(db, cluster)
    if json_out:
        sys.stdout.write(json_text(st.to_dict(), indent=2, default=str) + "\n")
        return
    out.print(f"store {st.store}" + (f", cluster {st.cluster}: {len(st.nodes)} node(s)" if st.cluster else ""),
              markup=False, highlight=False)
    t = Table(title="Platforms", title_justify="left")
    for col in ("platform", "cpu", "nodes", "profiled rows", "sweep points"):
        t.add_column(col, justify="right" if col in ("nodes", "profiled rows", "sweep points") else "left")
    for p in st.to_dict()["platforms"]:
        t.add_row(p["id"], p["cpu_model"], str(p["nodes"]) if st.cluster else "-", str(p["profiled_rows"]),
                  str(p["sweep_points"]))
    out.print(t)
    if st.nodes:
        t = Table(title="Nodes", title_justify="left")
        for col in ("node", "address", "platform", "cpus"):
            t.add_column(col)
        for n in st.nodes:
            t.add_row(n.id[:12], n.address, n.platform_id, f"{n.cpus:g}")
        out.print(t)
    now = time.time()
    if not st.runs and not st.studies:
        out.print("nothing in flight")
    for r in st.runs:
        out.print(f"{r['kind']} {r['name']} on {r['cluster']}: {r['done']}/{r['planned']} units, started "
                  f"{now - r['started_at']:.0f} s ago" + (" (stale: its driver stopped reporting)" if r["stale"] else ""),
                  markup=False, highlight=False)
    for key, s in st.studies.items():
        out.print(f"study {key}: {s['trials']} trials on {', '.join(s['platforms'])}, last "
                  f"{now - s['last_at']:.0f} s ago", markup=False, highlight=False)

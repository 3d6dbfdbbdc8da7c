"""``rooftune data``: profiled rows carried between machines (export, import), and what the store
keeps only for reuse pruned."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer

from rooftune.cli.options import App, Db, platform_option
from rooftune.cli.printing import Table, out
from rooftune.units import fmt_size

data_app = App(no_args_is_help=True, help="Carry profiled data between machines; prune what is unused.")


@data_app.command("export")
def data_export(
    file: Annotated[str, typer.Argument(help="FILE.csv or FILE.parquet")],
    platform: Annotated[str | None, platform_option("Only this platform id.")] = None,
    db: Db = None,
) -> None:
    """Write profiled rows, each with its platform fingerprint."""
    from rooftune.profiling import export_profiles
    from rooftune.profiling.dataset import check_export_path
    from rooftune.store import Store

    check_export_path(file)  # before the store is opened
    with Store(db, create=False) as s:
        n = export_profiles(s, file, platform)
    out.print(f"wrote {n} rows to {file}", markup=False)


@data_app.command("import")
def data_import(
    file: Annotated[str, typer.Argument(help="FILE.csv or FILE.parquet written by rooftune data export")],
    db: Db = None,
) -> None:
    """Check every row of a dataset file, then store them all (or none)."""
    from rooftune.profiling import import_profiles, read_profiles
    from rooftune.store import Store

    rows = read_profiles(file)  # every row checked before the store is opened (or created)
    with Store(db) as s:
        r = import_profiles(s, file, rows)
    out.print(f"read {r['rows']} rows of {r['platforms']} platform(s); {r['added']} added, "
              f"{r['rows'] - r['added']} already stored")


@data_app.command("prune")
def data_prune(
    older_than: Annotated[float | None, typer.Option("--older-than", help="Days unused before something is removed "
                                                     "(default 30).")] = None,
    apply: Annotated[bool, typer.Option("--apply", help="Remove them (without it: only list what would go).")] = False,
    db: Db = None,
) -> None:
    """List (or with --apply remove) what is kept only for reuse and unused for DAYS: module files
    exported for studies, the trials of studies left idle, stored analyses. Ceilings, profiled
    rows and performance models are never removed."""
    from rooftune.store import DEFAULT_OLDER_THAN_DAYS, Store, prune
    from rooftune.store.prune import check_days

    days = check_days(DEFAULT_OLDER_THAN_DAYS if older_than is None else older_than)  # before the store is opened
    with Store(db, create=False) as s:
        r = prune(s, days, apply=apply)
        where = s.display_url
    if r.items:
        t = Table(title=f"Unused for {days:g} days (store {where}; modules in {r.modules})", title_justify="left")
        for col in ("kind", "what", "rows", "size", "last used"):
            t.add_column(col, justify="right" if col in ("rows", "size") else "left")
        for i in r.items:
            t.add_row(i.kind, i.name, str(i.rows) if i.rows else "-", fmt_size(i.size_bytes),
                      datetime.fromtimestamp(i.last_used).strftime("%Y-%m-%d %H:%M"))
        out.print(t)
    done = "removed" if apply else "would remove"
    out.print(f"{done} {len(r.items)} item(s): {r.rows} store rows, {fmt_size(r.size_bytes)}"
              + ("" if apply or not r.items else "; dry run, --apply removes them"), markup=False, highlight=False)

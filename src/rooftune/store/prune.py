"""What ``rooftune data prune`` removes: what is only kept to be reused, once unused for long.

Three kinds, chosen because each is made again on demand, with no measurement lost that anything
reads later:

* module files exported for studies (``data_dir()/modules/*.pt2``, a model's weights each):
  ``tune`` exports a module again under the same name when it is given again;
* the trials of a study whose newest trial is older than the cutoff, the whole study at once (a
  study is resumed from its trials; without any it starts again, never from half of them);
* stored analyses (``rooftune analyze`` runs), which nothing reads back to decide anything.

Never removed: platforms, ceilings and the measurements behind them (``machine`` reuses the
newest and compares a new run with the earlier ones), profiled rows (the performance model's
training data, hours to measure again), the performance models in the data folder.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Text, cast, delete, func, select
from sqlalchemy.orm import Session

from rooftune.errors import InvalidArgument, is_real
from rooftune.store.schema import AnalysisRow, TrialRow
from rooftune.store.store import Store, modules_dir

#: Days unused before something is pruned when not told: a month, past which a study is not being
#: resumed and a module not being tuned again; both are made again in minutes if they are.
DEFAULT_OLDER_THAN_DAYS = 30.0
_DAY_S = 86400.0
#: The exported modules' suffix (torch.export.save); temporary files of an export cut short end in it too.
MODULE_SUFFIX = ".pt2"


@dataclass(frozen=True)
class Stale:
    """One thing prune removes: ``kind`` is ``module``, ``study`` or ``analyses``; ``name`` the
    file, the study key or the model; ``rows`` the store rows (0 for a file); ``size_bytes`` the
    file's size or the rows' JSON; ``last_used`` a Unix time."""

    kind: str
    name: str
    rows: int
    size_bytes: int
    last_used: float

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "rows": self.rows, "size_bytes": self.size_bytes,
                "last_used": self.last_used}


@dataclass(frozen=True)
class PruneResult:
    """What was found unused for ``older_than_days``, and whether it was removed (``applied``)."""

    items: tuple[Stale, ...]
    older_than_days: float
    applied: bool
    modules: Path

    @property
    def size_bytes(self) -> int:
        return sum(i.size_bytes for i in self.items)

    @property
    def rows(self) -> int:
        return sum(i.rows for i in self.items)

    def to_dict(self) -> dict[str, Any]:
        return {"older_than_days": self.older_than_days, "applied": self.applied, "modules": str(self.modules),
                "size_bytes": self.size_bytes, "rows": self.rows, "items": [i.to_dict() for i in self.items]}


def check_days(days: object, name: str = "--older-than") -> float:
    """A number of days, positive and finite."""
    if not is_real(days) or not math.isfinite(float(days)) or float(days) <= 0:  # type: ignore[arg-type]
        raise InvalidArgument(name, days, "allowed a positive number of days")
    return float(days)  # type: ignore[arg-type]


def prune(store: Store, older_than_days: float = DEFAULT_OLDER_THAN_DAYS, *, apply: bool = False,
          modules: Path | None = None, now: float | None = None) -> PruneResult:
    """What in ``store`` and in the exported modules' folder (``modules``, default
    :func:`~rooftune.store.store.modules_dir`) has been unused for ``older_than_days``; with
    ``apply``, removed: the rows in one transaction (chosen inside it, so a study that a trial
    joined meanwhile is kept), then the files."""
    days = check_days(older_than_days, "older_than_days")
    cutoff = (time.time() if now is None else now) - days * _DAY_S
    folder = modules_dir() if modules is None else Path(modules)
    with store.transaction() as s:
        studies = _stale_studies(s, cutoff)
        analyses = _stale_analyses(s, cutoff)
        if apply:
            if studies:
                s.execute(delete(TrialRow).where(TrialRow.study_key.in_([x.name for x in studies])))
            s.execute(delete(AnalysisRow).where(AnalysisRow.created_at < cutoff))
    files = _stale_modules(folder, cutoff)
    if apply:
        for f in files:
            Path(f.name).unlink(missing_ok=True)
    return PruneResult(tuple(files + studies + analyses), days, apply, folder)


def _stale_modules(folder: Path, cutoff: float) -> list[Stale]:
    if not folder.is_dir():
        return []
    found = []
    for p in sorted(folder.iterdir()):
        if p.suffix != MODULE_SUFFIX or not p.is_file():
            continue
        st = p.stat()
        used = max(st.st_mtime, st.st_atime)  # read by a study or exported again, whichever is later
        if used < cutoff:
            found.append(Stale("module", str(p), 0, st.st_size, used))
    return found


def _json_size(*columns: Any) -> Any:
    """The stored JSON's length summed over ``columns``: its bytes, as json.dumps writes ASCII."""
    total: Any = 0
    for c in columns:
        total = total + func.coalesce(func.length(cast(c, Text)), 0)
    return total


def _stale_studies(s: Session, cutoff: float) -> list[Stale]:
    last = func.max(TrialRow.created_at)
    q = (select(TrialRow.study_key, func.count(), last, func.sum(_json_size(TrialRow.config, TrialRow.result)))
         .group_by(TrialRow.study_key).having(last < cutoff).order_by(last))
    return [Stale("study", key, int(n), int(size or 0), float(t)) for key, n, t, size in s.execute(q).all()]


def _stale_analyses(s: Session, cutoff: float) -> list[Stale]:
    q = (select(AnalysisRow.model, func.count(), func.max(AnalysisRow.created_at), func.sum(_json_size(AnalysisRow.data)))
         .where(AnalysisRow.created_at < cutoff).group_by(AnalysisRow.model).order_by(AnalysisRow.model))
    return [Stale("analyses", model, int(n), int(size or 0), float(t)) for model, n, t, size in s.execute(q).all()]


__all__ = ["DEFAULT_OLDER_THAN_DAYS", "PruneResult", "Stale", "check_days", "prune"]

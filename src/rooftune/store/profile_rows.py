"""The profiled rows of campaigns: stored once per (platform, spec, primitive, threads), their
passes merged, the networks each layer belongs to kept as its sources. A part of
:class:`rooftune.store.Store`."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rooftune.errors import StoreError
from rooftune.platform import Platform
from rooftune.store.schema import PlatformRow, ProfileRow
from rooftune.store.values import finite, pass_canary, pass_medians


class ProfileRows:
    """The profile methods of :class:`rooftune.store.Store` (its transactions and inserts)."""

    _PROFILE_FIELDS = ("spec_key", "spec", "primitive", "threads", "status", "median_s", "iqr_s", "repetitions",
                       "reason", "warnings", "sources", "pass_medians", "pass_canary", "fastest_s")

    def save_profiles(self, platform: Platform | Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> int:
        """Store profiled rows of one platform in one transaction; a row whose (platform, spec,
        primitive, threads) is already stored keeps its figures and gains the networks the new
        row names as its sources. Returns how many were added."""
        return self.save_profile_groups([(platform, rows)])

    def save_profile_groups(self, groups: Sequence[tuple[Platform | Mapping[str, Any], Sequence[Mapping[str, Any]]]]) -> int:
        """Rows of several platforms (a platform may be a stored fingerprint, as a dataset file
        carries it) in one transaction: all are stored or none."""
        added = 0
        with self.transaction() as s:
            for platform, rows in groups:
                if isinstance(platform, Platform):
                    pid = platform.id
                    self._upsert_platform(s, platform)
                else:
                    pid = str(platform["id"])
                    self._insert_new(s, PlatformRow, {"id": pid, "cpu_model": str(platform.get("cpu_model", "")),
                                                      "created_at": time.time(), "fingerprint": dict(platform)}, ["id"])
                have = self._profile_keys(s, pid)
                seen_sources: dict[str, list[str]] = {}

                def seen(r: Mapping[str, Any], seen_sources: dict[str, list[str]] = seen_sources) -> None:
                    known = seen_sources.setdefault(r["spec_key"], [])
                    known.extend(x for x in r.get("sources") or [] if x not in known)

                new: list[tuple[Mapping[str, Any], dict[str, Any]]] = []
                for r in rows:
                    k = (r["spec_key"], r["primitive"], int(r["threads"]))
                    if k in have:
                        seen(r)
                        continue
                    have.add(k)
                    values = finite({f: r.get(f) for f in self._PROFILE_FIELDS})
                    values.update(warnings=list(r.get("warnings") or []), sources=list(r.get("sources") or []),
                                  repetitions=int(r.get("repetitions") or 0), reason=r.get("reason") or "",
                                  pass_medians=pass_medians(values))
                    values["pass_canary"] = pass_canary(values)
                    new.append((r, {"platform_id": pid, "created_at": float(r.get("created_at") or time.time()),
                                     **values}))
                # another writer (a node of a fleet) may have stored some since they were read: its rows stay
                inserted = self._insert_new_rows(s, [row for _, row in new])
                for r, row in new:
                    if (row["spec_key"], row["primitive"], int(row["threads"])) in inserted:
                        added += 1
                    else:
                        seen(r)
                self._merge_sources(s, pid, seen_sources)  # autoflush: rows added above are seen
        return added

    def add_profile_sources(self, platform_id: str, sources: Mapping[str, Sequence[str]]) -> int:
        """Record that the stored rows of these specs (spec_key -> networks) also come from these
        networks: a campaign that meets a layer already profiled for another network. Returns how
        many rows changed."""
        with self.transaction() as s:
            return self._merge_sources(s, platform_id, sources)

    @staticmethod
    def _merge_sources(s: Session, platform_id: str, sources: Mapping[str, Sequence[str]]) -> int:
        wanted = {k: list(v) for k, v in sources.items() if v}
        if not wanted:
            return 0
        changed = 0
        keys = list(wanted)
        for i in range(0, len(keys), 500):  # bounded IN lists
            q = select(ProfileRow).where(ProfileRow.platform_id == platform_id, ProfileRow.spec_key.in_(keys[i:i + 500]))
            for row in s.scalars(q):
                have = list(row.sources or [])
                new = [x for x in wanted[row.spec_key] if x not in have]
                if new:
                    row.sources = have + new  # a new list: the JSON column sees the change
                    changed += 1
        return changed

    def update_profiles(self, platform_id: str, rows: Sequence[Mapping[str, Any]]) -> int:
        """Replace the figures of stored rows (a later pass of a campaign: status, median, IQR,
        fastest sample, repetitions, reason, warnings, pass medians) in one transaction. A row not stored is an
        error and nothing is changed. Returns how many were updated."""
        with self.transaction() as s:
            for r in rows:
                q = select(ProfileRow).where(ProfileRow.platform_id == platform_id,
                                             ProfileRow.spec_key == r["spec_key"],
                                             ProfileRow.primitive == r["primitive"],
                                             ProfileRow.threads == int(r["threads"]))
                row = s.scalars(q).one_or_none()
                if row is None:
                    raise StoreError(f"no profiled row {r['spec_key']}/{r['primitive']}/{r['threads']} on platform "
                                     f"{platform_id} to update; nothing was changed")
                values = finite({f: r.get(f) for f in ("status", "median_s", "iqr_s", "fastest_s")})
                row.status, row.median_s, row.iqr_s = values["status"], values["median_s"], values["iqr_s"]
                row.fastest_s = values["fastest_s"]
                row.repetitions = int(r.get("repetitions") or 0)
                row.reason = r.get("reason") or ""
                row.warnings = list(r.get("warnings") or [])
                row.pass_medians = pass_medians(values | {"pass_medians": r.get("pass_medians")})
                row.pass_canary = pass_canary({"pass_medians": row.pass_medians, "pass_canary": r.get("pass_canary")})
        return len(rows)

    @staticmethod
    def _profile_keys(s: Session, platform_id: str) -> set[tuple[str, str, int]]:
        q = select(ProfileRow.spec_key, ProfileRow.primitive, ProfileRow.threads).where(ProfileRow.platform_id == platform_id)
        return {(a, b, int(c)) for a, b, c in s.execute(q).all()}

    def profile_keys(self, platform_id: str) -> set[tuple[str, str, int]]:
        """(spec_key, primitive, threads) already profiled on a platform: what a campaign skips."""
        with self.transaction() as s:
            return self._profile_keys(s, platform_id)

    def profiles(self, platform_id: str | None = None) -> list[dict[str, Any]]:
        """Profiled rows (of one platform, or all), oldest first, with ``platform_id``."""
        with self.transaction() as s:
            q = select(ProfileRow).order_by(ProfileRow.id)
            if platform_id:
                q = q.where(ProfileRow.platform_id == platform_id)
            out = []
            for r in s.scalars(q).all():
                row = {"platform_id": r.platform_id, "created_at": r.created_at,
                       **{f: getattr(r, f) for f in self._PROFILE_FIELDS}}
                row["pass_medians"] = pass_medians(row)
                row["pass_canary"] = pass_canary(row)
                out.append(row)
            return out

    def profiled_platforms(self) -> dict[str, int]:
        """Profiled rows per platform id, for the platforms that have any."""
        from sqlalchemy import func

        with self.transaction() as s:
            q = select(ProfileRow.platform_id, func.count()).group_by(ProfileRow.platform_id)
            return {pid: int(n) for pid, n in s.execute(q).all()}

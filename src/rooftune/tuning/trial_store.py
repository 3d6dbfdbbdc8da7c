"""What tuning uses of a store (:class:`rooftune.store.Store` has it all): a study's trials, read
and written, and on a cluster the claims of its search workers and the fleet run's progress."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rooftune.platform import Platform


class TrialStore(Protocol):
    """The store's methods a study calls (:mod:`rooftune.store.store`, :mod:`rooftune.store.fleet_rows`)."""

    def trials(self, study_key: str) -> list[dict[str, Any]]: ...

    def save_trial(self, platform: Platform, *, study_key: str, config_key: str, status: str,
                   config: Mapping[str, Any], result: Mapping[str, Any]) -> int: ...

    def claim_trial(self, platform: Platform, *, study_key: str, config_key: str, config: Mapping[str, Any],
                    claim: Mapping[str, Any], stale_s: float) -> dict[str, Any]: ...

    def claims(self, study_key: str) -> list[dict[str, Any]]: ...

    def release_claims(self, ids: list[int]) -> None: ...

    def start_fleet_run(self, run_id: str, *, kind: str, name: str, cluster: str, nodes: Mapping[str, str],
                        planned: int) -> None: ...

    def update_fleet_run(self, run_id: str, *, done: int | None = None, nodes: Mapping[str, str] | None = None,
                         status: str | None = None) -> None: ...

    def fleet_run(self, run_id: str) -> dict[str, Any] | None: ...

    def close(self) -> None: ...

"""A team of pinned worker threads that run GIL-free kernels together.

The main thread hands every worker the same task and waits on a barrier; each worker is pinned to
one usable CPU and allocates its own data, so pages are first touched on the core that uses them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any


class ThreadTeam:
    """``with ThreadTeam(cpus) as team: team.run(task)`` runs ``task(worker_index)`` on every worker."""

    def __init__(self, cpus: tuple[int, ...]) -> None:
        if not cpus:
            raise ValueError("a team needs at least one CPU")
        self.cpus = cpus
        self.size = len(cpus)
        self._start = threading.Barrier(self.size + 1)
        self._done = threading.Barrier(self.size + 1)
        self._task: Callable[[int], Any] | None = None
        self._stop = False
        self._errors: list[BaseException] = []
        self.results: list[Any] = [None] * self.size
        self._threads = [
            threading.Thread(target=self._worker, args=(i,), daemon=True, name=f"rooftune-team-{i}")
            for i in range(self.size)
        ]
        for t in self._threads:
            t.start()

    def _worker(self, index: int) -> None:
        try:
            os.sched_setaffinity(0, {self.cpus[index]})
        except (OSError, AttributeError):
            pass  # pinning is best effort (macOS has no sched_setaffinity)
        while True:
            self._start.wait()
            if self._stop:
                return
            try:
                assert self._task is not None
                self.results[index] = self._task(index)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
                self._errors.append(exc)
            self._done.wait()

    def run(self, task: Callable[[int], Any]) -> list[Any]:
        """Run ``task(i)`` on every worker at once; returns their results in worker order."""
        self._task = task
        self._start.wait()
        self._done.wait()
        if self._errors:
            err = self._errors[0]
            self._errors.clear()
            raise err
        return list(self.results)

    def close(self) -> None:
        if not self._stop:
            self._stop = True
            self._start.wait()
            for t in self._threads:
                t.join()

    def __enter__(self) -> ThreadTeam:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

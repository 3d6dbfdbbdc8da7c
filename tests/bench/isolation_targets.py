"""Factories for the measure_isolated tests; the child imports this module from PYTHONPATH.

A factory is called in the child outside the timed region and returns the callable to time.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def small_work(n: int = 100) -> Callable[[], int]:
    if n != 100:  # kwargs must arrive intact
        raise ValueError(f"expected n=100, got {n!r}")
    return lambda: sum(range(n))


def needs_env(expected: str) -> Callable[[], int]:
    """Fails unless ROOFTUNE_TEST_VALUE is set to ``expected`` in the child's environment."""
    value = os.environ.get("ROOFTUNE_TEST_VALUE")
    if value != expected:
        raise RuntimeError(f"ROOFTUNE_TEST_VALUE is {value!r}, expected {expected!r}")
    return lambda: sum(range(100))


def hard_exit() -> Callable[[], None]:
    os._exit(3)


def hang() -> Callable[[], None]:
    time.sleep(60)
    return lambda: None

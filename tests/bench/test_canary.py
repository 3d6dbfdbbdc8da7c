"""The machine-speed probe: a real reading, the quiet rule, and waiting for a quiet stretch on a fake clock."""

from __future__ import annotations

import math

from rooftune.bench import canary
from rooftune.bench.canary import QUIET, Canary, fastest_reading, is_quiet, wait_quiet


def test_a_reading_is_a_positive_time_per_product() -> None:
    c = Canary()
    r = c.read()
    assert math.isfinite(r) and 0 < r < 0.1  # a 256^3 product: ~34 MFLOP, far below 0.1 s anywhere
    assert c._out.shape == (256, 256)


def test_quiet_is_within_the_factor_of_the_fastest_reading() -> None:
    ref = fastest_reading([2.0, None, 1.0, 1.5])
    assert ref == 1.0 and fastest_reading([None]) is None and fastest_reading([]) is None
    assert is_quiet(QUIET * ref, ref) and not is_quiet(QUIET * ref * 1.01, ref)
    assert not is_quiet(None, ref) and not is_quiet(1.0, None)


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_waiting_stops_at_the_first_quiet_reading() -> None:
    t = FakeTime()
    readings = iter([1.5, 1.4, 1.05, 2.0])
    reading, waited = wait_quiet(lambda: next(readings), 1.0, 10.0, clock=t.clock, sleep=t.sleep)
    assert reading == 1.05 and waited == 2 * canary.POLL_S


def test_waiting_gives_up_after_the_limit_and_without_a_reference_reads_once() -> None:
    t = FakeTime()
    calls: list[int] = []

    def read() -> float:
        calls.append(1)
        return 1.5

    reading, waited = wait_quiet(read, 1.0, 1.0, clock=t.clock, sleep=t.sleep)
    assert reading == 1.5 and waited <= 1.0 and len(calls) == 1 + int(1.0 / canary.POLL_S) - 1
    calls.clear()
    assert wait_quiet(read, None, 10.0, clock=t.clock, sleep=t.sleep) == (1.5, 0.0) and len(calls) == 1

"""The machine-speed probe: a real reading, the quiet rule, and waiting for a quiet stretch on a fake clock."""

from __future__ import annotations

import math

from rooftune.bench import canary
from rooftune.bench.canary import (
    QUIET,
    STEAL_WARN,
    Canary,
    Steal,
    cpu_times,
    fastest_reading,
    is_quiet,
    steal_warning,
    wait_quiet,
)


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
    assert wait_quiet(lambda: 1.0, 1.0, 10.0, clock=t.clock, sleep=t.sleep) == (1.0, 0.0)  # quiet at once


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


def test_steal_time_is_read_from_proc_stat(tmp_path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 5 50 800 10 0 5 30 0 0\ncpu0 50 2 25 400 5 0 2 15 0 0\n")
    assert cpu_times(str(stat)) == (30, 1000)
    stat.write_text("cpu  100 5 50 800\n")  # a kernel without the steal column
    assert cpu_times(str(stat)) is None and cpu_times(str(tmp_path / "missing")) is None
    real = cpu_times()
    assert real is None or 0 <= real[0] <= real[1]


def test_the_steal_share_of_a_stretch_and_its_warning() -> None:
    ticks = iter([(10, 1000), (40, 1200), (41, 1050)])
    s = Steal(lambda: next(ticks))
    assert s.share() == 30 / 200
    assert s.share() is None  # 50 ticks: too few to tell 2 % from 0
    assert Steal(lambda: None).share() is None
    frozen = Steal(lambda: (5, 100))
    assert frozen.share() is None  # no tick has passed
    assert steal_warning(None, "x") is None and steal_warning(STEAL_WARN, "x") is None
    w = steal_warning(0.23, "the run")
    assert w is not None and "23%" in w and "the run" in w and "steal" in w


def test_a_probe_slow_on_the_median_reading_is_a_slow_host() -> None:
    from rooftune.bench.canary import QUIET, slow_host_warning

    assert slow_host_warning(None, None) is None and slow_host_warning(QUIET, 0.5) is None
    w = slow_host_warning(1.32, 0.12)
    assert w is not None and "1.32x" in w and "quiet on 12%" in w and "repeat poorly" in w

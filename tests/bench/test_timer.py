"""The timing harness on a fake clock: exact calibration, warm-up, stop rules and warnings.

Durations are multiples of U = 2**-10 s, so every clock reading and every per-call time is exact
in binary floating point and the assertions can use ``==``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import socket
from collections.abc import Callable, Iterable

import pytest

from rooftune.bench import Comparison, Measurement, Method, Policy, compare, measure
from rooftune.bench import timer as timer_module

U = 2.0**-10  # ~0.98 ms


class FakeClock:
    """A clock that only moves when a timed function says how long it took."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls: list[str] = []

    def __call__(self) -> float:
        return self.now

    def fn(self, durations: Iterable[float], name: str = "f") -> Callable[[], None]:
        """A callable that advances the clock by the next of ``durations`` (cycled) per call."""
        it = itertools.cycle(list(durations))

        def call() -> None:
            self.calls.append(name)
            self.now += next(it)

        return call

    def fn_then(self, first: list[float], rest: float, name: str = "f") -> Callable[[], None]:
        """Calls take ``first[0]``, ``first[1]`` ... and then ``rest`` forever."""
        it = itertools.chain(first, itertools.repeat(rest))

        def call() -> None:
            self.calls.append(name)
            self.now += next(it)

        return call


# --------------------------------------------------------------------------- calibration


def test_calibration_one_ms_calls_gives_12_per_sample() -> None:
    clock = FakeClock()
    m = measure(clock.fn([0.001]), label="x", policy=Policy(min_sample_time_s=0.01, warmup_s=0), clock=clock)
    # 1 call = 1 ms < 10 ms -> ceil(1 * 1.2 * 0.01 / 0.001) = 12 calls = 12 ms >= 10 ms.
    assert m.number == 12
    assert m.method.stop_reason == "stable"
    assert m.n == 6
    assert len(clock.calls) == 1 + 12 + 6 * 12
    assert m.median == pytest.approx(0.001, rel=1e-12)


def test_calibration_takes_several_rounds_when_the_first_call_is_slow() -> None:
    clock = FakeClock()
    fn = clock.fn_then([6 * U], U)  # a cold first call
    m = measure(fn, label="x", policy=Policy(min_sample_time_s=8 * U, warmup_s=0), clock=clock)
    # 1 call: 6U < 8U -> ceil(1.2 * 8 / 6) = 2; 2 calls: 2U -> ceil(2 * 1.2 * 8 / 2) = 10; 10U >= 8U.
    assert m.number == 10
    assert len(clock.calls) == 1 + 2 + 10 + 6 * 10
    assert m.samples == (U,) * 6


def test_calibration_stops_at_max_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timer_module, "MAX_NUMBER", 50)
    clock = FakeClock()
    m = measure(clock.fn([0.0]), label="free", policy=Policy(warmup_s=0, max_samples=10), clock=clock)
    assert m.number == 50
    assert m.samples == (0.0,) * 10
    assert m.method.stop_reason == "max_samples"
    # A zero median has no relative interval: the warning says so instead of printing inf.
    assert len(m.warnings) == 1
    assert m.warnings[0].startswith(
        "unstable: 95% CI of the median is undefined (target +-2%) after 10 samples"
    )


# --------------------------------------------------------------------------- stop rules


def test_constant_durations_are_stable_after_min_samples() -> None:
    clock = FakeClock()
    policy = Policy(min_sample_time_s=8 * U, warmup_s=0.05)
    m = measure(
        clock.fn([U]), label="gemm", params={"n": 64}, policy=policy, clock=clock, platform_id="abc123"
    )
    assert m.number == 10
    # Calibration used 1 + 10 calls = 11U; warm-up samples of 10U run while elapsed < 0.05 s = 51.2U:
    # at 11U, 21U, 31U, 41U and 51U -> 5 of them.
    assert m.method == Method(
        policy=policy, isolation="in-process", clock="FakeClock", stop_reason="stable", warmup_samples=5
    )
    assert m.n == policy.min_samples == 6
    assert m.samples == (U,) * 6
    assert len(clock.calls) == 1 + 10 + 5 * 10 + 6 * 10
    assert m.median == U
    assert m.min == m.max == m.mean == U
    assert m.ci == (U, U)
    assert m.rel_ci == 0.0
    assert m.iqr == 0.0
    assert m.cv == 0.0
    assert m.warnings == ()
    assert not m.noisy
    assert (m.label, m.params, m.platform_id) == ("gemm", {"n": 64}, "abc123")
    assert m.host == socket.gethostname()


def test_stable_wins_over_max_samples_on_the_same_sample() -> None:
    clock = FakeClock()
    m = measure(clock.fn([U]), label="x", policy=Policy(number=1, warmup_s=0, max_samples=6), clock=clock)
    assert (m.n, m.method.stop_reason, m.warnings) == (6, "stable", ())


def test_noisy_alternating_durations_stop_on_budget_with_warnings() -> None:
    clock = FakeClock()
    policy = Policy(number=1, warmup_s=0, budget_s=30 * U)
    m = measure(clock.fn([U, 2 * U]), label="noisy", policy=policy, clock=clock)
    # Elapsed after 2k samples is 3kU: the budget of 30U is reached after exactly 20 samples.
    assert m.method.stop_reason == "budget"
    assert m.samples == (U, 2 * U) * 10
    assert m.median == 1.5 * U
    assert m.ci == (U, 2 * U)  # ranks (5, 14) of 20
    assert m.noisy
    assert len(m.warnings) == 2
    unstable, noisy = m.warnings
    assert unstable.startswith("unstable: 95% CI of the median is +-33.3% (target +-2%) after 20 samples")
    assert "stopped by budget" in unstable
    assert noisy.startswith("noisy: IQR is 67% of the median (threshold 10%)")
    assert repr(m) == "Measurement('noisy': median 1.46 ms, IQR 977 us, n=20x1, noisy)"


def test_max_samples_stop() -> None:
    clock = FakeClock()
    policy = Policy(number=1, warmup_s=0, max_samples=9, budget_s=1e6)
    m = measure(clock.fn([U, 2 * U]), label="x", policy=policy, clock=clock)
    assert m.method.stop_reason == "max_samples"
    assert m.n == 9
    assert m.warnings[0].startswith("unstable:")
    assert "after 9 samples, stopped by max_samples" in m.warnings[0]


def test_zero_budget_still_takes_one_sample() -> None:
    clock = FakeClock()
    m = measure(clock.fn([U]), label="x", policy=Policy(number=1, warmup_s=0, budget_s=0), clock=clock)
    assert m.samples == (U,)
    assert m.method.stop_reason == "budget"
    assert m.ci == (-math.inf, math.inf)
    # Too few samples for an interval or a noise verdict: only the "unstable" warning.
    assert len(m.warnings) == 1
    assert m.warnings[0].startswith("unstable: 95% CI of the median is undefined")


def test_budget_includes_calibration_and_warmup() -> None:
    clock = FakeClock()
    policy = Policy(
        min_sample_time_s=8 * U, warmup_s=40 * U, budget_s=50 * U, target_rel_ci=0.0, min_samples=100
    )
    m = measure(clock.fn([U, 2 * U]), label="x", policy=policy, clock=clock)
    # Calibration: 1 call (U) < 8U -> 10 calls (15U) -> elapsed 16U. Warm-up samples of 15U while
    # elapsed < 40U: at 16U and 31U -> 46U. Samples of 15U: 61U >= 50U after the first one.
    assert m.number == 10
    assert m.method.warmup_samples == 2
    assert m.n == 1
    assert m.method.stop_reason == "budget"


# --------------------------------------------------------------------------- fixed number


def test_policy_number_fixes_calls_per_sample_without_calibration() -> None:
    clock = FakeClock()
    m = measure(clock.fn([U]), label="x", policy=Policy(number=5, warmup_s=0), clock=clock)
    assert m.number == 5
    assert m.samples == (U,) * 6
    assert len(clock.calls) == 5 * 6  # no calibration calls


def test_policy_number_with_warmup() -> None:
    clock = FakeClock()
    m = measure(clock.fn([U]), label="x", policy=Policy(number=5, warmup_s=12 * U), clock=clock)
    # Warm-up samples of 5U while elapsed < 12U: at 0, 5U and 10U.
    assert m.method.warmup_samples == 3
    assert len(clock.calls) == 5 * (3 + 6)


# --------------------------------------------------------------------------- compare


def test_compare_two_to_one() -> None:
    clock = FakeClock()
    a = clock.fn([2 * U], name="A")
    b = clock.fn([U], name="B")
    policy = Policy(min_sample_time_s=8 * U, warmup_s=0)
    c = compare(a, b, label_a="eager", label_b="compiled", params={"bs": 8}, policy=policy, clock=clock)
    assert isinstance(c, Comparison)
    assert c.ratio == 2.0
    assert c.ci == (2.0, 2.0)
    assert c.rel_ci == 0.0
    assert c.stop_reason == "stable"
    assert c.warnings == ()
    assert (c.a.label, c.b.label) == ("eager", "compiled")
    # A: 1 call = 2U -> ceil(1.2 * 8 / 2) = 5 calls; B: 1 call = U -> 10 calls.
    assert (c.a.number, c.b.number) == (5, 10)
    assert c.a.samples == (2 * U,) * 6
    assert c.b.samples == (U,) * 6
    # Calibration of A, then of B, then interleaved pairs in blocks A B B A, B A A B, A B B A.
    a5, b10 = ["A"] * 5, ["B"] * 10
    assert clock.calls == ["A"] * 6 + ["B"] * 11 + (a5 + b10 + b10 + a5 + b10 + a5 + a5 + b10 + a5 + b10 + b10 + a5)
    for side in (c.a, c.b):
        assert side.method.isolation == "interleaved"
        assert side.method.stop_reason == "stable"
        assert side.method.clock == "FakeClock"
        assert side.params == {"bs": 8}
    assert str(c) == "compiled vs eager: 2.000x (95% CI 2.000-2.000)"
    d = c.to_dict()
    assert (d["ratio"], d["ci"], d["stop_reason"]) == (2.0, [2.0, 2.0], "stable")
    assert d["a"] == c.a.to_dict()


def test_compare_runs_before_untimed_ahead_of_every_call() -> None:
    clock = FakeClock()
    a = clock.fn([2 * U], name="A")
    b = clock.fn([U], name="B")
    flush = clock.fn([100 * U], name="flush")  # takes far longer than either side: never counted
    policy = Policy(number=1, warmup_s=0)
    c = compare(a, b, policy=policy, clock=clock, before=flush)
    assert c.ratio == 2.0 and c.a.samples == (2 * U,) * 6 and c.b.samples == (U,) * 6
    timed = [x for x in clock.calls if x != "flush"]
    assert len(timed) == 12 and all(clock.calls[2 * i] == "flush" for i in range(12))
    with pytest.raises(ValueError, match="one call per sample"):
        compare(a, b, policy=Policy(number=2), clock=clock, before=flush)


def test_compare_order_is_counterbalanced() -> None:
    from rooftune.bench.timer import _a_first

    assert [_a_first(i) for i in range(8)] == [True, False, False, True] * 2
    # Over every block of four pairs each side runs first twice, and first after a check (every
    # two pairs) once.
    assert sum(_a_first(i) for i in range(0, 4)) == 2
    assert [_a_first(i) for i in range(0, 8, 2)] == [True, False, True, False]


def test_compare_matches_sample_lengths() -> None:
    from rooftune.bench.timer import _matched_numbers

    # Equal speeds that calibration settled at 4 and 5 calls: both sides take 5.
    assert _matched_numbers(4, 1e-3, 5, 1e-3) == (5, 5)
    # A twice as slow: both samples last 10 ms.
    assert _matched_numbers(5, 2e-3, 7, 1e-3) == (5, 10)
    # No usable per-call time (nan or zero): left as they are.
    assert _matched_numbers(3, float("nan"), 4, 1e-3) == (3, 4)
    assert _matched_numbers(3, 0.0, 4, 1e-3) == (3, 4)


def test_compare_calls_per_sample_from_the_warm_speed() -> None:
    clock = FakeClock()
    # Both run at U once warm; A's first call is cold (10U), so calibration gives A 1 call and B 10.
    a = clock.fn([10 * U] + [U] * 10_000, name="A")
    b = clock.fn([U], name="B")
    c = compare(a, b, policy=Policy(min_sample_time_s=8 * U, warmup_s=60 * U), clock=clock)
    assert (c.a.number, c.b.number) == (10, 10)
    assert c.ratio == 1.0


def test_compare_without_warmup_keeps_the_calibrated_numbers() -> None:
    clock = FakeClock()
    # A's first call is cold (50U, then 3U): matching on it would give B 50 calls a sample.
    a = clock.fn([50 * U] + [3 * U] * 10_000, name="A")
    c = compare(a, clock.fn([U], name="B"), policy=Policy(min_sample_time_s=8 * U, warmup_s=0), clock=clock)
    assert (c.a.number, c.b.number) == (1, 10)


def test_compare_warmup_runs_pairs() -> None:
    clock = FakeClock()
    policy = Policy(min_sample_time_s=8 * U, warmup_s=0.05)
    c = compare(clock.fn([2 * U], name="A"), clock.fn([U], name="B"), policy=policy, clock=clock)
    # Calibration takes 12U + 11U = 23U; warm-up pairs of 20U while elapsed < 51.2U: at 23U and 43U.
    assert c.a.method.warmup_samples == c.b.method.warmup_samples == 2
    assert (c.a.label, c.b.label) == ("A", "B")
    assert c.ratio == 2.0


def test_compare_noisy_side_stops_on_budget() -> None:
    clock = FakeClock()
    policy = Policy(number=1, warmup_s=0, budget_s=25 * U)
    c = compare(clock.fn([U, 2 * U], name="A"), clock.fn([U], name="B"), policy=policy, clock=clock)
    # Pairs take 2U and 3U in turn: 25U is reached after 10 pairs.
    assert c.stop_reason == "budget"
    assert c.a.n == c.b.n == 10
    assert c.ratio == 1.5
    lo, hi = c.ci
    assert lo < 1.5 < hi
    assert len(c.warnings) == 2
    assert c.warnings[0].startswith("unstable: 95% CI of the ratio is +-")
    assert "after 10 pairs, stopped by budget" in c.warnings[0]
    assert c.warnings[1].startswith("A: noisy: IQR is 67% of the median")
    assert c.a.warnings == (c.warnings[1].removeprefix("A: "),)
    assert c.b.warnings == ()


def test_compare_budget_metered_by_an_elapsed_clock() -> None:
    # samples per item of a batch of 8 on side A: the clock that times them advances by an
    # eighth of each call, the budget is spent in whole calls (the elapsed clock)
    clock = FakeClock()
    whole = FakeClock()

    def batch_of_8() -> None:
        whole.now += 8 * U
        clock.now += U  # 8U per call of 8 items

    def one() -> None:
        whole.now += 2 * U
        clock.now += 2 * U

    policy = Policy(number=1, warmup_s=4 * U, budget_s=40 * U, min_samples=1000, max_samples=2000)
    c = compare(batch_of_8, one, policy=policy, clock=clock, elapsed=whole)
    # a warm-up pair (10U of calls), then pairs of 10U: the budget of 40U is spent after 3 timed pairs
    assert c.stop_reason == "budget" and c.a.method.warmup_samples == 1
    assert c.a.samples == (U,) * 3 and c.b.samples == (2 * U,) * 3 and c.ratio == 0.5
    assert whole.now == 40 * U
    # metered by the per-item clock (3U a pair), the same budget runs two warm-up pairs and 12 timed
    clock, whole = FakeClock(), FakeClock()
    c = compare(batch_of_8, one, policy=policy, clock=clock)
    assert c.stop_reason == "budget" and c.a.n == 12 and whole.now == 140 * U


def test_compare_max_samples() -> None:
    clock = FakeClock()
    policy = Policy(number=1, warmup_s=0, max_samples=7, budget_s=1e6)
    c = compare(clock.fn([U, 3 * U], name="A"), clock.fn([U], name="B"), policy=policy, clock=clock)
    assert c.stop_reason == "max_samples"
    assert c.a.n == c.b.n == 7
    assert c.a.method.stop_reason == "max_samples"


# --------------------------------------------------------------------------- Measurement


def _measurement() -> Measurement:
    clock = FakeClock()
    return measure(
        clock.fn([U, 2 * U]),
        label="roundtrip",
        params={"dtype": "bf16", "shape": [64, 64]},
        policy=Policy(number=1, warmup_s=U, budget_s=40 * U),
        clock=clock,
        platform_id="0123456789abcdef",
    )


def test_measurement_dict_round_trip() -> None:
    m = _measurement()
    assert m.warnings  # an unstable run: warnings travel too
    d = m.to_dict()
    assert d["samples"] == list(m.samples)
    assert d["method"]["policy"]["number"] == 1
    back = Measurement.from_dict(json.loads(json.dumps(d)))
    assert back == m
    assert back.to_dict() == d
    assert back.median == m.median


def test_measurement_is_frozen() -> None:
    m = _measurement()
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.label = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.method.policy.number = 3  # type: ignore[misc]
    assert m.label == "roundtrip"


def _fixed(samples: tuple[float, ...], warnings: tuple[str, ...] = ()) -> Measurement:
    return Measurement(
        label="x", samples=samples, number=1, method=Method(policy=Policy()), warnings=warnings
    )


def test_measurement_rate() -> None:
    m = _fixed((0.5, 0.25, 1.0))
    assert m.rate(100.0) == 200.0
    assert m.rate(100.0, best=True) == 400.0


def test_measurement_summary_on_known_samples() -> None:
    m = _fixed((6.0, 1.0, 5.0, 2.0, 4.0, 3.0))
    assert m.summary() == {
        "median": 3.5,
        "min": 1.0,
        "iqr": 2.5,
        "cv": pytest.approx(math.sqrt(3.5) / 3.5),
        "ci_low": 1.0,
        "ci_high": 6.0,
        "n": 6,
    }
    assert m.mean == 3.5
    assert m.max == 6.0


@pytest.mark.parametrize(
    ("samples", "text"),
    [((3.5,), "3.5 s"), ((0.0015,), "1.5 ms"), ((2.5e-6,), "2.5 us"), ((5e-9,), "5 ns")],
)
def test_measurement_repr_units(samples: tuple[float, ...], text: str) -> None:
    assert repr(_fixed(samples)) == f"Measurement('x': median {text}, IQR 0 ns, n=1x1)"

"""measure_parts on a fake clock: interleaving, per-part samples, the stop rule on the sum."""

from __future__ import annotations

import itertools

import pytest

from rooftune.bench import Policy, measure_parts

U = 2.0**-10


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.log: list[str] = []

    def __call__(self) -> float:
        return self.now


def test_parts_whole_and_sum_are_exact() -> None:
    clock = Clock()
    part_times = itertools.cycle([(1 * U, 2 * U), (1 * U, 4 * U)])

    def reference() -> None:
        clock.log.append("whole")
        clock.now += 8 * U

    def run(c: Clock) -> list[float]:
        clock.log.append("parts")
        out = []
        for d in next(part_times):
            t0 = c()
            clock.now += d
            out.append(c() - t0)
        clock.now += U  # time between parts: counted in no part
        return out

    whole, total, parts = measure_parts(
        run, ["a", "b"], reference=reference, label="m",
        policy=Policy(warmup_s=0, min_samples=6, max_samples=6, budget_s=100), clock=clock,
    )
    assert clock.log[:4] == ["whole", "parts", "whole", "parts"]  # interleaved, warm-up included
    assert whole.samples == (8 * U,) * 6
    assert [p.label for p in parts] == ["a", "b"]
    assert parts[0].samples == (U,) * 6
    assert whole.method.warmup_samples == 1  # one warm-up run even with warmup_s=0
    assert parts[1].samples == (4 * U, 2 * U) * 3  # the warm-up took the first (1, 2) pair
    assert total.samples == (5 * U, 3 * U) * 3
    assert total.label == "m (sum of parts)"
    assert whole.method.isolation == "interleaved" and whole.number == 1
    assert total.method.stop_reason == "max_samples"  # +-25 % spread never gets within 2 %
    assert any(w.startswith("unstable") for w in total.warnings)


def test_stable_sum_stops_at_min_samples() -> None:
    clock = Clock()

    def reference() -> None:
        clock.now += 4 * U

    def run(c: Clock) -> list[float]:
        clock.now += 2 * U
        return [U, U]

    whole, total, parts = measure_parts(
        run, ["x", "y"], reference=reference, label="m", policy=Policy(warmup_s=0, min_samples=6), clock=clock
    )
    assert total.n == whole.n == 6 and total.method.stop_reason == "stable"
    assert total.median == 2 * U and whole.median == 4 * U


def test_wrong_number_of_durations_is_refused() -> None:
    clock = Clock()
    with pytest.raises(ValueError, match="2 durations for 3 parts"):
        measure_parts(lambda c: [0.0, 0.0], ["a", "b", "c"], reference=lambda: None, label="m",
                      policy=Policy(warmup_s=0), clock=clock)


def test_a_fast_noisy_model_may_collect_thousands_of_runs() -> None:
    # a model of a few microseconds on a busy machine never meets the stop rule and runs until
    # the budget: past 1023 runs the interval of the median must still be computed
    clock = Clock()
    whole_times = itertools.cycle([U, 3 * U])  # half of the runs slow: the median never settles
    part_times = itertools.cycle([U, 3 * U])

    def reference() -> None:
        clock.now += next(whole_times)

    def run(c: Clock) -> list[float]:
        d = next(part_times)
        clock.now += d
        return [d]

    whole, total, _ = measure_parts(
        run, ["x"], reference=reference, label="m",
        policy=Policy(warmup_s=0, max_samples=1100, budget_s=1e6), clock=clock,
    )
    assert whole.n == total.n == 1100 and total.method.stop_reason == "max_samples"
    assert whole.ci == (U, 3 * U) and any(w.startswith("unstable") for w in whole.warnings)


def test_work_run_just_before_needs_no_warm_up_run() -> None:
    clock = Clock()

    def reference() -> None:
        clock.log.append("whole")
        clock.now += 4 * U

    def run(c: Clock) -> list[float]:
        clock.log.append("parts")
        clock.now += 2 * U
        return [U, U]

    whole, total, _ = measure_parts(run, ["x", "y"], reference=reference, label="m", clock=clock, warm=True,
                                    policy=Policy(warmup_s=0, min_samples=3, max_samples=3))
    assert whole.method.warmup_samples == 0 and whole.n == total.n == 3
    assert clock.log == ["whole", "parts"] * 3  # every run a sample
    # a warm-up time asked for is still spent
    whole, _, _ = measure_parts(run, ["x", "y"], reference=reference, label="m", clock=clock, warm=True,
                                policy=Policy(warmup_s=10 * U, min_samples=3, max_samples=3))
    assert whole.method.warmup_samples == 2

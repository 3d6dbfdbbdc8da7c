"""The open-loop load generator (rooftune.bench.serving): its schedule, its percentiles'
intervals, the M/D/c queue it is checked against, and the rate search. The servers here sleep
for their service time, so the checks hold on a loaded host: a sleeping slot needs no core."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from rooftune.bench.serving import (
    LoadRun,
    poisson_arrivals,
    predicted_rate,
    quantile_interval,
    rate_under_slo,
    run_load,
    samples_for_quantile,
    simulate_queue,
)
from rooftune.errors import InvalidArgument

SERVICE_S = 0.004


def sleeping(n: int, service_s: float = SERVICE_S) -> list:
    return [lambda k: time.sleep(service_s) for _ in range(n)]


def test_the_samples_a_quantile_needs_for_an_interval() -> None:
    assert samples_for_quantile(0.5) == 6  # [min, max] of 6 covers the median at 95 %
    assert samples_for_quantile(0.9) == 36
    assert samples_for_quantile(0.99) == 368


def test_a_quantiles_interval_is_of_order_statistics_and_open_where_too_few() -> None:
    xs = list(range(1, 1001))
    v, lo, hi = quantile_interval(xs, 0.99)
    assert lo is not None and hi is not None and lo <= v <= hi and hi <= 1000 and lo >= 980
    v, lo, hi = quantile_interval(xs[:100], 0.99)
    assert hi is None and lo is not None  # 100 latencies cannot bound a p99 from above


def test_the_schedule_is_seeded_poisson() -> None:
    a = poisson_arrivals(200.0, 20_000, seed=3)
    assert np.array_equal(a, poisson_arrivals(200.0, 20_000, seed=3))
    gaps = np.diff(a)
    assert abs(gaps.mean() - 1 / 200) < 0.03 / 200 and abs(gaps.std() / gaps.mean() - 1) < 0.05  # exponential


@pytest.mark.parametrize("rate", [0, -1, math.nan, math.inf, "fast", True])
def test_a_rate_that_is_not_a_positive_number_is_refused_in_one_line(rate: object) -> None:
    with pytest.raises(InvalidArgument) as e:
        poisson_arrivals(rate, 10)  # type: ignore[arg-type]
    assert "rate" in str(e.value) and "\n" not in str(e.value)


def test_the_simulated_queue_follows_the_generators_policy() -> None:
    # spaced further apart than the service: nobody waits
    assert np.allclose(simulate_queue([0.0, 1.0, 2.0], 0.5, 1), 0.5)
    # three at once on one server: each waits for those before it
    assert np.allclose(simulate_queue([0.0, 0.0, 0.0], 0.5, 1), [0.5, 1.0, 1.5])
    # two servers take two at once
    assert np.allclose(simulate_queue([0.0, 0.0, 0.0], 0.5, 2), [0.5, 0.5, 1.0])
    # a dynamic batcher of 4 waits at most 0.1 s after the first for the batch to fill
    assert np.allclose(simulate_queue([0.0, 0.05, 0.5], 0.5, 1, batch=4, wait_s=0.1), [0.6, 0.55, 0.6])
    # ... and starts at once where it fills earlier
    assert np.allclose(simulate_queue([0.0, 0.01, 0.02, 0.03], 0.5, 1, batch=4, wait_s=0.1),
                       [0.53, 0.52, 0.51, 0.5])


def test_offline_serves_c_over_the_service_time() -> None:
    """Everything queued at once on c slots: c / service time within 5 % (the service time as the
    calls took it: a sleep of 10 ms takes a little longer on a busy host)."""
    run = run_load(sleeping(2), np.zeros(300))
    service = float(np.mean(run.call_s))
    assert run.served == pytest.approx(2 / service, rel=0.05)
    assert len(run.latencies) == 300 and run.generator_cpu_s > 0


def test_latency_counts_from_the_scheduled_arrival() -> None:
    """A server that falls behind shows as queueing: the last of 20 requests queued at once on one
    slot waited for the 19 before it."""
    run = run_load(sleeping(1), np.zeros(20), warmup=0)
    assert max(run.latencies) >= 20 * SERVICE_S and min(run.latencies) >= SERVICE_S


def test_dynamic_batching_answers_several_requests_per_call() -> None:
    run = run_load(sleeping(1), np.zeros(40), batch=4)
    assert set(run.batches) == {4} and len(run.call_s) == 10


def _probe(latency_at: callable) -> callable:
    """A probe whose every latency, its p99 too, is latency_at(rate)."""
    def probe(rate: float) -> LoadRun:
        return LoadRun(offered=rate, latencies=(latency_at(rate),) * 1000, batches=(1,) * 1000, seconds=1.0,
                       generator_cpu_s=0.0)
    return probe


def test_the_rate_search_bisects_to_the_largest_rate_within_the_target() -> None:
    s = rate_under_slo(_probe(lambda rate: rate / 1000), 0.050, 100.0, steps=12, rel_tol=0.001)
    assert s.rate == pytest.approx(50.0, rel=0.01) and s.rate <= 50.0
    assert s.lo <= s.rate <= s.hi
    nothing = rate_under_slo(_probe(lambda rate: 1.0), 0.050, 100.0, steps=4)
    assert nothing.rate == 0.0 and nothing.lo == 0.0


@pytest.mark.parametrize("batch,wait_s", [(1, 0.0), (4, 0.005)])
def test_the_rate_under_a_p99_bound_matches_the_mdc_queue(batch: int, wait_s: float) -> None:
    """Two slots of a fixed service time, p99 <= 3 service times: the generator's rate within
    10 % of the M/D/c queue's (with the same dynamic batching) at the service time the calls took
    (benchmarks/serving.py checks it with busy loops on their own cores, at the known time)."""
    slots = sleeping(2)
    offline = run_load(slots, np.zeros(200), batch=batch)
    service = float(np.mean(offline.call_s))
    slo = 3 * SERVICE_S
    # a p99 from 1,000 latencies moves by some percent from one schedule to the next; at the
    # batcher's high rates 4,000 cost no more time than 1,000 do at one per call
    requests = 1000 if batch == 1 else 4000
    search = rate_under_slo(lambda rate: run_load(slots, poisson_arrivals(rate, requests, seed=1), batch=batch,
                                                  wait_s=wait_s, offered=rate),
                            slo, offline.served, steps=6, rel_tol=0.03)
    expected = predicted_rate(service, 2, slo, batch=batch, wait_s=wait_s)
    assert search.rate == pytest.approx(expected, rel=0.10), (search.rate, expected, service)

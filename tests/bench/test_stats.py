"""Order statistics and intervals of the harness: exact values on known data."""

from __future__ import annotations

import fractions
import math

import numpy as np
import pytest

from rooftune.bench import stats

INF = math.inf


def coverage(lo: int, hi: int, n: int) -> float:
    """P(x_(lo) <= true median <= x_(hi)) for 0-based ranks: B ~ Binomial(n, 1/2) samples fall
    below the median, and the interval covers it when lo < B <= hi."""
    return float(fractions.Fraction(sum(math.comb(n, k) for k in range(lo + 1, hi + 1)), 2**n))


# --------------------------------------------------------------------------- median_ci_ranks


def test_median_ci_ranks_small_n() -> None:
    assert stats.median_ci_ranks(0) is None
    assert stats.median_ci_ranks(1) is None
    assert stats.median_ci_ranks(5) is None  # [min, max] covers with 1 - 2/32 = 93.75 %
    assert stats.median_ci_ranks(6) == (0, 5)  # 1 - 2/64 = 96.9 %


def test_median_ci_ranks_n10_follows_the_binomial_rule() -> None:
    assert stats.median_ci_ranks(10) == (1, 8)
    assert coverage(1, 8, 10) == 1 - 22 / 1024  # 97.9 %
    assert coverage(1, 8, 10) >= 0.95
    assert coverage(2, 7, 10) < 0.95  # the next narrower pair falls short (89.1 %)


@pytest.mark.parametrize("n", range(6, 101))
def test_median_ci_ranks_narrowest_symmetric_pair_reaching_95(n: int) -> None:
    lo, hi = stats.median_ci_ranks(n)  # type: ignore[misc]
    assert lo + hi == n - 1
    assert coverage(lo, hi, n) >= 0.95
    assert coverage(lo + 1, hi - 1, n) < 0.95


def test_median_ci_ranks_known_table_values() -> None:
    # Conover, Practical Nonparametric Statistics, table A3 (binomial p = 1/2), 1-based ranks
    # (lo + 1, hi + 1): n=20 -> (6, 15), n=50 -> (18, 33), n=100 -> (40, 61).
    assert stats.median_ci_ranks(20) == (5, 14)
    assert stats.median_ci_ranks(50) == (17, 32)
    assert stats.median_ci_ranks(100) == (39, 60)


@pytest.mark.parametrize("n", [1000, 1001, 1023, 1024, 1500, 4096])
def test_median_ci_ranks_any_sample_count(n: int) -> None:
    # a fast part timed for seconds collects thousands of samples; 2.0**1024 overflows a float,
    # so above 1000 the sum runs in floats, and it must pick the ranks the exact sum picks
    lo, hi = stats.median_ci_ranks(n)  # type: ignore[misc]
    assert lo + hi == n - 1
    assert coverage(lo, hi, n) >= 0.95 > coverage(lo + 1, hi - 1, n)


def test_median_ci_ranks_large_n_follows_the_normal_limit() -> None:
    lo, hi = stats.median_ci_ranks(1_000_000)  # type: ignore[misc]
    half = 1.959964 * math.sqrt(1_000_000) / 2  # 979.98 order statistics either side of the middle
    assert abs((hi - lo) / 2 - half) <= 1.5
    assert stats.median_ci(list(range(2000))) == stats.median_ci_ranks(2000)  # values = ranks


def test_median_ci_ranks_other_confidence() -> None:
    assert stats.median_ci_ranks(6, confidence=0.99) is None  # 96.9 % < 99 %
    assert stats.median_ci_ranks(8, confidence=0.99) == (0, 7)  # 1 - 2/256 = 99.2 %
    assert stats.median_ci_ranks(10, confidence=0.5) == (3, 6)


# --------------------------------------------------------------------------- median_ci


def test_median_ci_known_data() -> None:
    xs = [10.0, 1.0, 9.0, 2.0, 8.0, 3.0, 7.0, 4.0, 6.0, 5.0]
    assert stats.median(xs) == 5.5
    assert stats.median_ci(xs) == (2.0, 9.0)
    assert stats.median_ci([3.0, 1.0, 2.0, 6.0, 5.0, 4.0]) == (1.0, 6.0)


def test_median_ci_too_few_samples_is_unbounded() -> None:
    assert stats.median_ci([1.0, 2.0, 3.0, 4.0, 5.0]) == (-INF, INF)
    assert stats.median_ci([]) == (-INF, INF)


# --------------------------------------------------------------------------- relative_half_width


@pytest.mark.parametrize(
    ("lo", "hi", "center", "expected"),
    [
        (9.0, 11.0, 10.0, 0.1),
        (2.0, 2.0, 2.0, 0.0),
        (-11.0, -9.0, -10.0, 0.1),  # relative to |center|
        (1.0, 4.0, 2.0, 0.75),
        (-INF, INF, 1.0, INF),
        (-INF, 2.0, 1.0, INF),
        (0.0, INF, 1.0, INF),
        (math.nan, 1.0, 1.0, INF),
        (1.0, 2.0, 0.0, INF),
    ],
)
def test_relative_half_width(lo: float, hi: float, center: float, expected: float) -> None:
    assert stats.relative_half_width(lo, hi, center) == expected


# --------------------------------------------------------------------------- quantile, iqr, cv


def test_quantile_interpolates_linearly() -> None:
    assert stats.quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.25) == 2.0
    assert stats.quantile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert stats.quantile([0.0, 10.0], 0.3) == 3.0
    assert stats.quantile([7.0], 0.9) == 7.0
    assert stats.quantile([1.0, 2.0, 3.0], 0.0) == 1.0
    assert stats.quantile([1.0, 2.0, 3.0], 1.0) == 3.0


def test_iqr() -> None:
    assert stats.iqr([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]) == 4.0
    assert stats.iqr([1.0, 2.0, 3.0, 4.0]) == 1.5
    assert stats.iqr([5.0, 5.0, 5.0]) == 0.0


def test_coefficient_of_variation() -> None:
    assert stats.coefficient_of_variation([3.0]) == 0.0
    assert stats.coefficient_of_variation([2.0, 2.0, 2.0]) == 0.0
    assert stats.coefficient_of_variation([2.0, 4.0]) == math.sqrt(2.0) / 3.0
    assert stats.coefficient_of_variation([-1.0, 1.0]) == INF


# --------------------------------------------------------------------------- ratio of medians


def test_ratio_of_medians_ci_exact_2x_with_drift() -> None:
    # B drifts upward 50 % over the run and A is always exactly twice B: pairs are resampled
    # together, so every bootstrap ratio is exactly 2 and so is the interval.
    b = [1.0 + 0.05 * i for i in range(11)]
    a = [2.0 * x for x in b]
    assert stats.ratio_of_medians_ci(a, b) == (2.0, 2.0)


def test_ratio_of_medians_ci_covers_true_ratio_at_nominal_rate() -> None:
    # 100 noisy datasets whose population medians are exactly 2:1 (A ~ 2 U(1, 1.1), B ~ U(1, 1.1)):
    # a 95 % interval must contain 2 in about 95 of them.
    hits = 0
    widths = []
    for seed in range(100):
        rng = np.random.default_rng(seed)
        b = rng.uniform(1.0, 1.1, size=30)
        a = 2.0 * rng.uniform(1.0, 1.1, size=30)
        lo, hi = stats.ratio_of_medians_ci(a.tolist(), b.tolist(), seed=seed)
        hits += lo <= 2.0 <= hi
        widths.append(hi - lo)
    assert hits >= 90
    assert max(widths) < 0.5


def test_ratio_of_medians_ci_is_deterministic_per_seed() -> None:
    rng = np.random.default_rng(1)
    a = rng.uniform(1.0, 2.0, size=25).tolist()
    b = rng.uniform(1.0, 2.0, size=25).tolist()
    first = stats.ratio_of_medians_ci(a, b, seed=3)
    assert stats.ratio_of_medians_ci(a, b, seed=3) == first
    assert stats.ratio_of_medians_ci(a, b) == stats.ratio_of_medians_ci(a, b, seed=0)
    assert stats.ratio_of_medians_ci(a, b, seed=4) != first
    lo, hi = first
    assert lo < hi


def test_ratio_of_medians_ci_uses_common_length_and_needs_two_pairs() -> None:
    assert stats.ratio_of_medians_ci([1.0], [1.0]) == (-INF, INF)
    assert stats.ratio_of_medians_ci([1.0, 2.0], [1.0]) == (-INF, INF)
    # Extra trailing samples of one side are ignored (only complete pairs count).
    b = [1.0, 1.5, 2.0, 2.5]
    assert stats.ratio_of_medians_ci([3.0 * x for x in b] + [1000.0], b) == (3.0, 3.0)


def test_comparison_ci_is_never_narrower_than_the_order_statistic_interval() -> None:
    from rooftune.bench.stats import comparison_ci, paired_ratio_ci, ratio_of_medians_ci

    a = [1.00, 1.02, 0.99, 1.05, 1.01, 0.98]
    b = [1.0] * 6
    # 6 pairs: the median paired ratio's 95 % interval is the ratios' [min, max]
    assert paired_ratio_ci(a, b) == (0.98, 1.05)
    lo, hi = comparison_ci(a, b)
    blo, bhi = ratio_of_medians_ci(a, b)
    assert (lo, hi) == (min(blo, 0.98), max(bhi, 1.05))
    assert lo <= blo and hi >= bhi
    # below 6 pairs nothing is claimed
    assert paired_ratio_ci(a[:5], b[:5]) == (-math.inf, math.inf)
    assert comparison_ci(a[:5], b[:5]) == (-math.inf, math.inf)


def test_paired_ratio_ci_refuses_zero_or_missing_times() -> None:
    a = [1.0] * 6
    assert stats.paired_ratio_ci(a, [1.0] * 5 + [0.0]) == (-math.inf, math.inf)
    assert stats.paired_ratio_ci(a, [1.0] * 5 + [math.nan]) == (-math.inf, math.inf)
    assert stats.paired_ratio_ci(a, [2.0] * 6) == (0.5, 0.5)


def test_grouped_ratio_ci_widens_to_where_the_groups_disagree() -> None:
    rng = np.random.default_rng(1)
    b = [list(1.0 + 0.01 * rng.standard_normal(30)) for _ in range(2)]
    # the same samples in two pairs of processes, the second pair's A side 20 % slower throughout
    a = [[x * 1.0 for x in b[0]], [x * 1.2 for x in b[1]]]
    flat_a, flat_b = a[0] + a[1], b[0] + b[1]
    plo, phi = stats.comparison_ci(flat_a, flat_b)
    lo, hi = stats.grouped_ratio_ci(a, b)
    assert lo <= plo and hi >= phi  # never narrower than the pooled samples' interval
    # the bootstrap drew both groups twice: the interval spans both pairs' ratios
    assert lo <= 1.0 + 1e-9 and hi >= 1.2 - 1e-9
    assert (lo, hi) == stats.grouped_ratio_ci(a, b)  # seeded
    assert (lo, hi) == stats.grouped_ratio_ci(a, b, pooled=(plo, phi))  # the caller's pooled interval, the same
    # one group, or groups that agree: the pooled interval
    assert stats.grouped_ratio_ci([flat_a], [flat_b]) == (plo, phi)
    same_lo, same_hi = stats.grouped_ratio_ci([b[0], b[1]], [b[0], b[1]])
    assert (same_lo, same_hi) == (1.0, 1.0)
    # groups of unequal length are cut to their pairs; an empty group is left out
    assert stats.grouped_ratio_ci([a[0], a[1][:10], []], [b[0], b[1][:12], [1.0]])[1] >= 1.2 - 1e-9

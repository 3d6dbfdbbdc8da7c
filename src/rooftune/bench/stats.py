"""Order statistics and confidence intervals used by the harness.

Everything here is a pure function of the samples, so tests pin exact numbers.
"""

from __future__ import annotations

import fractions
import functools
import math
import statistics
from collections.abc import Sequence

import numpy as np

#: Confidence level of every interval the harness reports.
CONFIDENCE = 0.95

#: Bootstrap resamples for the ratio of medians; 2000 keeps the 2.5 % / 97.5 % percentiles within
#: about 0.5 % of their limit for the sample sizes the harness collects (Efron & Tibshirani, ch. 13).
BOOTSTRAP_RESAMPLES = 2000


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def quantile(xs: Sequence[float], q: float) -> float:
    """Quantile with linear interpolation between order statistics (numpy's default)."""
    return float(np.quantile(np.asarray(xs, dtype=float), q))


def iqr(xs: Sequence[float]) -> float:
    return quantile(xs, 0.75) - quantile(xs, 0.25)


def coefficient_of_variation(xs: Sequence[float]) -> float:
    if len(xs) < 2:
        return 0.0
    mean = statistics.fmean(xs)
    return float(statistics.stdev(xs) / mean) if mean else math.inf


#: Sample counts up to which :func:`median_ci_ranks` sums the binomial exactly in integers; above,
#: in floats from 6 standard deviations below the middle (the mass left out: about 1e-9 by the
#: normal tail, at most 1.5e-8 by Hoeffding's bound exp(-18), against the 0.025 it is compared with).
EXACT_RANKS_UP_TO = 1000


def _dropped_exact(n: int, alpha: float) -> int:
    """Largest j with P(B < j) <= alpha, B ~ Binomial(n, 1/2), in integers: with alpha = num / den,
    P(B <= i) <= alpha is ``sum(comb(n, k), k <= i) * den <= num * 2**n``."""
    exact = fractions.Fraction(alpha)
    bound = exact.numerator * 2**n
    cum, term = 0, 1  # term = comb(n, i)
    for i in range(n):
        cum += term
        if cum * exact.denominator > bound:
            return i
        term = term * (n - i) // (i + 1)
    return n


def _dropped_float(n: int, alpha: float) -> int:
    """:func:`_dropped_exact` in floats, summing from 6 standard deviations below n / 2."""
    start = max(0, math.floor(n / 2 - 3 * math.sqrt(n)))
    term = math.exp(math.lgamma(n + 1) - math.lgamma(start + 1) - math.lgamma(n - start + 1) - n * math.log(2.0))
    cdf = 0.0
    for i in range(start, n):
        cdf += term
        if cdf > alpha:
            return i
        term *= (n - i) / (i + 1)
    return n


@functools.lru_cache(maxsize=4096)
def median_ci_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """0-based ranks (lo, hi) of the order statistics bounding the median with ``confidence``.

    Distribution-free: the number of samples below the true median is Binomial(n, 1/2), so
    ``[x_(lo), x_(hi)]`` covers it with probability ``P(lo < B <= hi)`` (ranks 0-based). The
    narrowest symmetric pair whose coverage reaches ``confidence`` is returned, or None when even
    ``[min, max]`` does not reach it (n < 6 at 95 %). Any sample count works: a fast part timed for
    seconds collects thousands, and ``2.0**n`` alone overflows from n = 1024.
    """
    if n < 1:
        return None
    alpha = (1.0 - confidence) / 2.0
    j = (_dropped_exact if n <= EXACT_RANKS_UP_TO else _dropped_float)(n, alpha)
    if j == 0:
        return None
    return j - 1, n - j


def median_ci(xs: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Confidence interval of the median; ``(-inf, inf)`` when there are too few samples."""
    ranks = median_ci_ranks(len(xs), confidence)
    if ranks is None:
        return (-math.inf, math.inf)
    s = sorted(xs)
    return (s[ranks[0]], s[ranks[1]])


def relative_half_width(lo: float, hi: float, center: float) -> float:
    """Half the interval's width as a fraction of ``center`` (inf when undefined)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or center == 0:
        return math.inf
    return (hi - lo) / 2.0 / abs(center)


def ratio_of_medians_ci(
    a: Sequence[float],
    b: Sequence[float],
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of ``median(a) / median(b)`` for interleaved pairs.

    ``a[i]`` and ``b[i]`` were taken next to each other, so pairs are resampled together: slow
    drift of the machine moves both and cancels in the ratio. Seeded, hence reproducible.
    """
    n = min(len(a), len(b))
    if n < 2:
        return (-math.inf, math.inf)
    xa = np.asarray(a[:n], dtype=float)
    xb = np.asarray(b[:n], dtype=float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    ratios = np.median(xa[idx], axis=1) / np.median(xb[idx], axis=1)
    alpha = (1.0 - confidence) / 2.0
    return (float(np.quantile(ratios, alpha)), float(np.quantile(ratios, 1.0 - alpha)))


def paired_ratio_ci(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Distribution-free interval of the median of the paired ratios ``a[i] / b[i]``
    (:func:`median_ci` of the ratios); ``(-inf, inf)`` below 6 pairs at 95 %."""
    n = min(len(a), len(b))
    xa, xb = np.asarray(a[:n], dtype=float), np.asarray(b[:n], dtype=float)
    if not (np.all(np.isfinite(xa)) and np.all(np.isfinite(xb)) and np.all(xb > 0)):
        return (-math.inf, math.inf)  # a zero, negative or missing time: no ratio to speak of
    return median_ci((xa / xb).tolist(), confidence)


def comparison_ci(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The interval :func:`rooftune.bench.compare` reports for ``median(a) / median(b)``: the
    paired bootstrap's, widened to the distribution-free interval of the median paired ratio (a
    neighbouring quantity: for interleaved pairs the two medians' ratio and the pairs' median
    ratio differ by the pairs' scatter, so the union stays a conservative interval of the first).
    Infinite below 6 pairs at 95 %.

    With few pairs the percentile bootstrap of a median is too narrow (at 6 pairs it resamples
    from 6 values), and A/A comparisons miss 1.0 far more often than 5 % (``benchmarks/harness_aa.py``
    checks it; BENCHMARKS.md). The order-statistic interval holds its coverage at any n (at 6 pairs it is
    the pairs' [min, max]) and shrinks like the bootstrap's as pairs accumulate.
    """
    lo, hi = ratio_of_medians_ci(a, b, confidence)
    plo, phi = paired_ratio_ci(a, b, confidence)
    return (min(lo, plo), max(hi, phi))


def grouped_ratio_ci(
    a_groups: Sequence[Sequence[float]],
    b_groups: Sequence[Sequence[float]],
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    pooled: tuple[float, float] | None = None,
) -> tuple[float, float]:
    """Interval of ``median(a) / median(b)`` over pooled interleaved pairs that came in groups
    (one group per pair of processes), widened by how far the groups disagree.

    A process can run a few percent to a third slower than the next for its whole life, so pairs
    from one pair of processes are not independent of each other: the intervals of two single
    pairs of processes can exclude each other. The bootstrap here resamples the groups with
    replacement, then the pairs within each chosen group (two-stage resampling of hierarchical
    data, Davison & Hinkley 1997), and the interval is the union of its percentiles with
    :func:`comparison_ci` of the pooled pairs (``pooled``, where the caller has it already). With
    one group it is :func:`comparison_ci`.
    """
    groups = [(np.asarray(ga, dtype=float), np.asarray(gb, dtype=float)) for ga, gb in zip(a_groups, b_groups, strict=False)]
    groups = [(ga[: min(len(ga), len(gb))], gb[: min(len(ga), len(gb))]) for ga, gb in groups]
    groups = [g for g in groups if len(g[0])]
    if pooled is None:
        pooled = comparison_ci([float(x) for ga, _ in groups for x in ga], [float(x) for _, gb in groups for x in gb],
                               confidence)
    lo, hi = pooled
    if len(groups) < 2:
        return (lo, hi)
    rng = np.random.default_rng(seed)
    n = len(groups)
    lens = np.array([len(ga) for ga, _ in groups])
    width = int(lens.max())
    # the groups as rows padded with NaN; a resample draws n rows, then each row's own length of
    # positions within it (positions past a row's length are NaN and left out of the medians)
    pa, pb = np.full((n, width), np.nan), np.full((n, width), np.nan)
    for i, (ga, gb) in enumerate(groups):
        pa[i, :len(ga)], pb[i, :len(gb)] = ga, gb
    ratios = np.empty(resamples)
    chunk = max(1, 2_000_000 // (n * width))  # resamples at a time, ~16 MB per array
    for start in range(0, resamples, chunk):
        m = min(chunk, resamples - start)
        picked = rng.integers(0, n, size=(m, n))
        size = lens[picked][..., None]
        idx = (rng.random((m, n, width)) * size).astype(np.intp)
        keep = np.arange(width) < size
        rows = picked[..., None]
        # medians by sorting, the NaNs last: the middle of each resample's own count
        count = size[..., 0].sum(axis=1)
        r = np.arange(m)
        below, above = (count - 1) // 2, count // 2
        xa = np.sort(np.where(keep, pa[rows, idx], np.nan).reshape(m, -1), axis=1)
        xb = np.sort(np.where(keep, pb[rows, idx], np.nan).reshape(m, -1), axis=1)
        ratios[start:start + m] = (xa[r, below] + xa[r, above]) / (xb[r, below] + xb[r, above])
    alpha = (1.0 - confidence) / 2.0
    return (min(lo, float(np.quantile(ratios, alpha))), max(hi, float(np.quantile(ratios, 1.0 - alpha))))

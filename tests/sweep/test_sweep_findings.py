"""Findings in words from made-up points: the crossover is stated with the parameter value where
it occurs, overhead-bound points with the largest value still bound, skips with their reason."""

from __future__ import annotations

from rooftune.sweep import SweepPoint, Variant, get_family
from rooftune.sweep.findings import crossover, findings
from rooftune.sweep.plan import Skipped


def _p(channels: int, precision: str, t: float, layout: str = "NCHW", bound: str = "compute") -> SweepPoint:
    return SweepPoint(key=f"{channels}{precision}{layout}", family="conv2d",
                      params={"batch": 4, "in_channels": channels, "out_channels": channels, "kernel": 3},
                      pass_="fwd", precision=precision, variant=Variant("default", layout, 2), device="cpu",
                      platform_id="p", status="ok", flops=1e6, median_s=t, ci_low_s=t * 0.98, ci_high_s=t * 1.02,
                      rel_ci=0.02, bound=bound, lower_bound_s=1e-6, error=None if precision == "fp32" else 1e-3)


def test_crossover_is_the_value_from_which_every_larger_one_wins() -> None:
    assert crossover([(16, 0.8), (32, 1.2), (64, 0.9), (128, 1.5), (256, 1.9)]) == 128
    assert crossover([(16, 0.8), (32, 0.9)]) is None
    assert crossover([(16, 1.1), (32, 1.3)]) == 16


def test_findings_state_the_bf16_crossover_and_overhead_bound() -> None:
    fp32 = {16: 1e-5, 32: 2e-5, 64: 8e-5, 128: 3e-4, 256: 1.2e-3}
    bf16 = {16: 2e-5, 32: 3e-5, 64: 6e-5, 128: 1.6e-4, 256: 6e-4}
    points = [_p(c, "fp32", t, bound="overhead" if c <= 32 else "compute") for c, t in fp32.items()]
    points += [_p(c, "bf16", t) for c, t in bf16.items()]
    skipped = [Skipped("conv2d", {"batch": 4}, "fwd", "fp16", "default NCHW 2t", "no native fp16 arithmetic")]
    text = findings(get_family("conv2d"), points, skipped)
    assert "bf16 over fp32 along in_channels (fwd, NCHW): faster only from in_channels 64 (1.33x), " \
           "reaching 2.00x (1.92-2.08) at 256" in text
    assert any(f.startswith("up to in_channels 32 the points are overhead-bound (fwd, fp32)") for f in text)
    assert "skipped 1: no native fp16 arithmetic" in text
    assert not any("out_channels" in f for f in text)  # swept together with in_channels: said once


def test_stated_speedups_are_the_interleaved_ones_where_measured() -> None:
    from rooftune.sweep.findings import to_confirm

    fp32 = {16: 1e-5, 32: 2e-5, 64: 8e-5, 128: 3e-4, 256: 1.2e-3}
    bf16 = {16: 2e-5, 32: 3e-5, 64: 6e-5, 128: 1.6e-4, 256: 6e-4}
    points = [_p(c, "fp32", t) for c, t in fp32.items()] + [_p(c, "bf16", t) for c, t in bf16.items()]
    pairs = to_confirm(points)
    # the crossover's value, the one below it and the last, of the one comparison these points hold
    assert sorted(a.params["in_channels"] for a, _ in pairs) == [32, 64, 256]
    assert all(a.precision == "fp32" and b.precision == "bf16" for a, b in pairs)
    confirmed = {("256fp32NCHW", "256bf16NCHW"): (2.5, 2.4, 2.6)}
    text = findings(get_family("conv2d"), points, [], confirmed)
    assert any("reaching 2.50x (2.40-2.60) at 256" in f for f in text)
    assert any("1 of the speedups stated" in f and "interleaved" in f for f in text)

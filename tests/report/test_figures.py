"""Figures drawn from ceilings that carry no sweep (made by hand, or an old store's) still render."""

from __future__ import annotations

import warnings
from pathlib import Path

from rooftune.platform import current_platform
from rooftune.report.figures import plot_sweep
from tests.conftest import make_ceilings


def test_a_sweep_figure_without_a_sweep_renders_without_warnings(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warned of an empty legend and a failed tight layout
        out = plot_sweep(make_ceilings(current_platform()), tmp_path / "sweep.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_speedup_timed_too_briefly_for_an_interval_is_drawn_and_said(tmp_path: Path) -> None:
    """Too few pairs leave the interval unbounded (-inf, inf); a failed comparison leaves nan. The
    figure still renders (matplotlib refused infinite axis limits), and the text says which is which."""
    import math
    from types import SimpleNamespace

    from rooftune.report.tuning_figures import plot_speedups, speedup_rows
    from rooftune.units import ci_text, speedup_text

    speedup = {"vanilla": {"ratio": 1.8, "ci_low": 1.7, "ci_high": 1.9},
               "pytorch-launcher": {"ratio": 1.3, "ci_low": -math.inf, "ci_high": math.inf},
               "openvino-latency": {"ratio": math.nan, "ci_low": math.nan, "ci_high": math.nan, "error": "crashed"}}
    tune = SimpleNamespace(speedup=speedup)
    assert [r[0] for r in speedup_rows(tune, None)] == ["tuned vs vanilla", "tuned vs pytorch-launcher"]
    out = plot_speedups(tune, None, tmp_path / "speedups.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [speedup_text(speedup[n]) for n in speedup] == ["1.80x (1.70-1.90)", "1.30x (too few pairs for a CI)", "-"]
    assert speedup_text(None) == "-"
    assert ci_text(1.0, 1.2, 3, "95 % CI ") == "95 % CI 1.000-1.200"
    assert ci_text(-math.inf, math.inf, label="95 % CI ") == "too few pairs for a CI"


def test_rates_are_written_with_a_prefix_at_any_scale() -> None:
    from rooftune.units import fmt_rate

    assert fmt_rate(229.4e9, "FLOP/s") == "229 GFLOP/s"
    assert fmt_rate(229.4e9, "FLOP/s", decimals=1) == "229.4 GFLOP/s"  # the command line's tables
    assert fmt_rate(5_000, "B/s") == "5 kB/s"  # not "5e+03 B/s"
    assert fmt_rate(-3e12, "FLOP") == "-3 TFLOP"
    assert fmt_rate(12, "x") == "12 x"

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

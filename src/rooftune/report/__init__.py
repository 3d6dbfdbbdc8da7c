"""Figures and reports. Reads result objects; never measures."""

from __future__ import annotations

from rooftune.report.figures import FIGURE_FORMATS, check_figure_path, plot_roofline, plot_sweep

__all__ = ["FIGURE_FORMATS", "check_figure_path", "plot_roofline", "plot_sweep"]

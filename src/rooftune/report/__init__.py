"""Figures and reports. Reads result objects; never measures."""

from __future__ import annotations

from rooftune.report.analysis_figures import (
    plot_analysis,
    plot_ops_roofline,
    plot_time_roofline,
    plot_trajectory,
)
from rooftune.report.figures import FIGURE_FORMATS, check_figure_path, plot_roofline, plot_sweep
from rooftune.report.sweep_report import write_sweep_report

__all__ = [
    "FIGURE_FORMATS",
    "check_figure_path",
    "plot_analysis",
    "plot_ops_roofline",
    "plot_roofline",
    "plot_sweep",
    "plot_time_roofline",
    "plot_trajectory",
    "write_sweep_report",
]

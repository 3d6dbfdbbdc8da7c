"""report.html shows what a run was given as text: a model name, a step's message or a note that
looks like HTML is escaped, never markup the browser would run."""

from __future__ import annotations

from pathlib import Path

from rooftune.pipeline import STEPS, OptimizeResult, Step
from rooftune.report.html import write_report

SCRIPT = "<script>alert(1)</script>"
IMG = '<img src=x onerror="alert(2)">'


def test_html_looking_values_are_escaped(tmp_path: Path) -> None:
    steps = {s: Step(s, "skipped") for s in STEPS}
    steps["tune"] = Step("tune", "failed", 1.0, f"model {IMG} failed")
    r = OptimizeResult(model=SCRIPT, batch=1, objective="latency", budget_s=60.0, out=tmp_path, steps=steps,
                       notes=[f"a note {IMG}"], commands=[f"rooftune optimize '{SCRIPT}'"])
    text = write_report(r).read_text()
    assert "<script" not in text and "<img" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text  # in the title, the heading and the commands
    assert text.count("&lt;img src=x onerror=&quot;alert(2)&quot;&gt;") >= 3  # the steps, the failure, the note

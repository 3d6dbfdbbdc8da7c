"""What ``rooftune optimize`` found, step by step: the object :func:`rooftune.pipeline.optimize`
returns and ``report.html`` and ``summary.json`` are written from. It lives with the report, below
the pipeline that fills it, so the report reads it without importing the pipeline."""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rooftune.units import ci_text


@dataclass
class Step:
    """What one step of the pipeline did."""

    name: str
    status: str = "pending"  # pending | ok | failed | skipped | interrupted
    seconds: float = 0.0
    message: str = ""
    #: A failed step's trials' errors, each message once with how many trials gave it (the most
    #: frequent first): why a tuning that verified no configuration failed.
    errors: list[tuple[int, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "seconds": self.seconds, "message": self.message,
                "errors": [{"trials": n, "error": error} for n, error in self.errors]}


@dataclass
class OptimizeResult:
    """Everything :func:`optimize` found; ``report.html`` and ``summary.json`` are written from it."""

    model: str
    batch: int
    objective: str
    budget_s: float
    out: Path
    steps: dict[str, Step]
    platform: Any = None
    ceilings: Any = None
    analysis: Any = None
    tune: Any = None
    select: Any = None
    interrupted: bool = False
    duration_s: float = 0.0
    files: dict[str, str] = field(default_factory=dict)
    commands: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: How the model is called where not with its tensors in order (``model(tensor, mask=tensor)``).
    call: str | None = None
    #: What the caller gave, where ``model`` is the file made of it: ``Net (exported to out/model.pt2)``.
    given: str | None = None
    #: A training step's run: its spec (TrainSpec.as_dict); every figure is a step's. None: inference.
    train: dict[str, Any] | None = None

    @property
    def title(self) -> str:
        """The model as the report and the command's output name it."""
        return self.given or self.model

    @property
    def vanilla(self) -> tuple[str, str]:
        """The framework's vanilla baseline and how it reads: ``vanilla`` (PyTorch) or
        ``tensorflow-vanilla`` (a TensorFlow model's)."""
        if self.tune is not None and "tensorflow-vanilla" in self.tune.baselines:
            return "tensorflow-vanilla", "vanilla TensorFlow"
        return "vanilla", "vanilla PyTorch training" if self.train is not None else "vanilla PyTorch"

    @property
    def speedup(self) -> dict[str, Any] | None:
        """The tuned configuration against the framework's vanilla, measured interleaved: ratio and 95 % CI."""
        if self.tune is None:
            return None
        return self.tune.speedup.get(self.vanilla[0])

    def batch_text(self) -> str:
        """The batch as the tuning step saw it (see TuneResult.batch_text), else ``batch N``."""
        return self.tune.batch_text() if self.tune is not None else f"batch {self.batch}"

    def headline(self) -> str:
        sp = self.speedup
        if self.tune is None or sp is None or not sp.get("ratio") == sp.get("ratio"):
            return f"no tuned configuration was measured against {self.vanilla[1]}"
        what = "latency" if self.objective == "latency" else "throughput"
        if self.train is not None:
            what = "step time" if self.objective == "latency" else "samples/s"
        ci = ci_text(sp.get("ci_low", math.nan), sp.get("ci_high", math.nan), label="95 % CI ")
        line = f"{sp['ratio']:.2f}x faster than {self.vanilla[1]} ({what}, {ci}) with {self.tune.best.describe()}"
        pairs = self.tune.unsteady().get(self.vanilla[0])
        if pairs:  # the host's speed changed during the comparison: say so where the claim is made
            line += f"; unsteady: its pairs of processes read {', '.join(f'{x:.2f}x' for x in pairs)}"
        return line

    def usage(self) -> list[str]:
        """How to run what this run wrote in one's own program: the tuned configuration
        (``rooftune.load_tuned`` in a process ``rooftune exec`` starts) and the rewritten model."""
        lines: list[str] = []
        if "best configuration" in self.files and self.train is not None:
            best = str(self.out / "best.json")
            return [f"# the tuned training configuration ({self.tune.best.describe() if self.tune else 'best.json'}): "
                    "its environment (threads, allocator, OpenMP) for one's own training script:",
                    f"#   rooftune exec --config {shlex.quote(best)} -- python train.py",
                    "# and in the script: its layout, precision (bf16: torch.autocast) and optimizer implementation"]
        if "best configuration" in self.files:
            best = str(self.out / "best.json")
            lines += ["# the tuned configuration, in a program started with its environment (threads, allocator, OpenMP):",
                      f"#   rooftune exec --config {shlex.quote(best)} -- python my_program.py",
                      "import rooftune",
                      f"model = rooftune.load_tuned({best!r})  # its output checked against "
                      f"{'TensorFlow' if self.vanilla[0] == 'tensorflow-vanilla' else 'PyTorch eager'}'s fp32 output at load",
                      f"y = {self.call or 'model(x)'}  # inputs of the shapes it was tuned on; returns the output as the model does"]
        if "rewritten model" in self.files:
            # a module given to optimize is rewritten again from the module itself
            # as is one called with keywords or nested inputs (built by name, it takes its tensors in order)
            module = ", module" if self.model.endswith(".pt2") or self.call else ""
            lines += ["# the model with a primitive chosen per convolution (PyTorch eager):",
                      "from rooftune.selection import load_selected",
                      f"selected = load_selected({str(self.out / 'selection' / 'selection.json')!r}{module})"]
        return lines

    def to_dict(self) -> dict[str, Any]:
        a = self.analysis
        c = self.ceilings
        return {
            "model": self.model, "given": self.given, "batch": self.batch, "objective": self.objective, "budget_s": self.budget_s,
            "train": self.train,
            "out": str(self.out), "interrupted": self.interrupted, "duration_s": self.duration_s,
            "headline": self.headline(), "speedup_vs_vanilla": self.speedup,
            "steps": [s.to_dict() for s in self.steps.values()],
            "platform": self.platform.to_dict() if self.platform is not None else None,
            "ceilings": c.to_dict() if c is not None else None,
            "analysis": a.to_dict() if a is not None else None,
            "tune": self.tune.to_dict() if self.tune is not None else None,
            "select": self.select.to_dict() if self.select is not None else None,
            "files": self.files, "commands": self.commands, "usage": self.usage(), "notes": self.notes,
        }

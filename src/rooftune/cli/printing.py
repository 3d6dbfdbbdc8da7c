"""What the commands print: the Rich consoles, tables that fold instead of cutting, progress as a
spinner and bars on a terminal or as plain lines elsewhere, and the units every command shares."""

from __future__ import annotations

import math
import os
import shlex
import sys
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table as _RichTable
from rich.text import Text

from rooftune.units import fmt_rate


def visible(text: str) -> str:
    """``text`` with each character a terminal would act on or not show (ESC and the escape
    sequences it starts, a carriage return, a zero-width space) written as a Python string
    literal writes it (``\\x1b``), as an error message shows a value by its repr; line breaks
    kept. A layer, model or file name is the user's, and is shown, never obeyed."""
    if text.replace("\n", "").isprintable():
        return text
    return "".join(c if c.isprintable() or c == "\n" else repr(c)[1:-1] for c in text)


def _visible_text(text: Text) -> Text:
    """A Rich Text as :func:`visible` shows it, its styles kept on the same characters."""
    plain = text.plain
    if plain.replace("\n", "").isprintable():
        return text
    starts = [0]  # where each character of ``plain`` starts in the text shown
    for c in plain:
        starts.append(starts[-1] + len(visible(c)))
    shown = Text(visible(plain), style=text.style, justify=text.justify, overflow=text.overflow,
                 no_wrap=text.no_wrap, end=text.end, tab_size=text.tab_size)
    for span in text.spans:
        shown.stylize(span.style, starts[span.start], starts[span.end])
    return shown


def _visible(obj: Any) -> Any:
    """What is printed as :func:`visible` shows it: a string (read as markup after that: a markup
    tag holds no control character) or a Text; a Table's cells are shown so when added."""
    if isinstance(obj, str):
        return visible(obj)
    if isinstance(obj, Text):
        return _visible_text(obj)
    return obj


class _Console(Console):
    """The console every command prints through: what it prints is shown by :func:`visible`."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(*(_visible(o) for o in objects), **kwargs)


#: Columns of what is written to a file or a pipe, where there is no terminal to fit (Rich would
#: take 80 and cut table cells short); COLUMNS, when set, still decides.
PLAIN_WIDTH = 160
out = _Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PLAIN_WIDTH)
err = _Console(stderr=True)


class Table(_RichTable):
    """A Rich table whose cells fold onto more lines on a narrow terminal instead of being cut
    short ('onnxrun…', '911.7 …'), so nothing a table reports is lost at any width. Its title and
    cells are plain text, never Rich markup, and shown by :func:`visible`: they hold layer names,
    configurations, errors and model names, any of which may have brackets or an escape sequence
    in it (a styled cell is given as a Text)."""

    def __init__(self, *args: Any, title: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, title=_cell(title, "table.title") if title is not None else None, **kwargs)

    def add_column(self, *args: Any, overflow: Any = "fold", **kwargs: Any) -> None:
        super().add_column(*args, overflow=overflow, **kwargs)

    def add_row(self, *cells: Any, **kwargs: Any) -> None:
        super().add_row(*(_cell(c) for c in cells), **kwargs)


def _cell(value: Any, style: str = "") -> Any:
    """A table's title or cell: a string as plain text (no markup), shown by :func:`visible`."""
    if isinstance(value, str):
        return Text(visible(value), style=style)
    return _visible_text(value) if isinstance(value, Text) else value


def labelled(console: Console, label: str, style: str, message: object) -> None:
    """``label: message`` on one line, the label styled and the message printed as it is: a
    message carries what the user gave (a model name, a path, an option's value), which Rich must
    not read as markup (``net[/x]`` would end in a MarkupError, ``[bold]`` restyle the line)."""
    console.print(Text.assemble((f"{label}:", style), " ", str(message)), highlight=False, soft_wrap=True)


def rate_text(v: float, unit: str) -> str:
    return fmt_rate(v, unit, decimals=1)


#: How often a step that goes on (a search, a campaign) is reported again as a line of its own
#: when stderr is a file or a pipe.
PLAIN_EVERY_S = 30.0


class _Lines:
    """Progress as plain lines on stderr, where a bar or a spinner would be noise (a file, a pipe,
    a CI log): a line when a step starts, and one every ``every_s`` while it goes on, each led by
    the minutes and seconds since the command started. ``first`` (a spinner's message) comes
    before the first step's line: not before, so that input refused before any step began stays
    a one-line error; ``at_once``: on entering, for a step that reports nothing while it runs
    and follows every check of the input."""

    def __init__(self, first: str | None = None, every_s: float = PLAIN_EVERY_S,
                 clock: Callable[[], float] = time.monotonic, at_once: bool = False) -> None:
        self.first, self.every_s, self.clock, self.at_once = first, every_s, clock, at_once
        self.started = clock()
        self.step: str | None = None
        self.at = -math.inf

    def __enter__(self) -> _Lines:
        if self.at_once:
            self._say_first()
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _say_first(self) -> None:
        if self.first:
            first, self.first = self.first, None
            self.update(first)

    def update(self, step: str, done: int = 0, total: int = 0) -> None:
        self._say_first()
        now = self.clock()
        if step == self.step and now - self.at < self.every_s:
            return
        self.step, self.at = step, now
        s = int(now - self.started)
        count = f" ({done}/{total})" if total > 1 else ""
        err.print(f"{s // 60}:{s % 60:02d} {step}{count}", markup=False, highlight=False, soft_wrap=True)


class _Spinner:
    """Rich's spinner, its messages shown as plain text (they may name a model or a file)."""

    def __init__(self, first: str) -> None:
        self.status = err.status(Text(visible(first)))

    def __enter__(self) -> _Spinner:
        self.status.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.status.__exit__(*exc)

    def update(self, message: str) -> None:
        self.status.update(Text(visible(message)))


def status_display(first: str, at_once: bool = False) -> Any:
    """A spinner with a message on a terminal (``.update(message)``), else :class:`_Lines`."""
    return _Spinner(first) if err.is_terminal else _Lines(first, at_once=at_once)


def progress_reporter() -> tuple[Any, Any]:
    """A context and ``update(step, done, total)``: Rich's transient bars on a terminal, else
    :class:`_Lines`."""
    if not err.is_terminal:
        lines = _Lines()
        return lines, lines.update

    from rich.progress import (
        BarColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),  # a step may name a model or a file
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    )
    tasks: dict[str, Any] = {}

    def update(step: str, done: int, total: int) -> None:
        if step not in tasks:
            tasks[step] = progress.add_task(visible(step), total=total)
        progress.update(tasks[step], completed=done, total=total)

    return progress, update


def seconds_text(t: float) -> str:
    if abs(t) >= 1:
        return f"{t:.2f} s"
    if abs(t) >= 1e-3:
        return f"{t * 1e3:.2f} ms"
    return f"{t * 1e6:.1f} us"


def percent_text(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * 100:.1f} %"


def print_load_hint(path: Any) -> None:
    """How to run a saved configuration in one's own program, in one line."""
    out.print(f"in your program: rooftune.load_tuned({str(path)!r}), started by "
              f"rooftune exec --config {shlex.quote(str(path))} -- ...", markup=False, highlight=False, soft_wrap=True)


#: Layers a command's short sensitivity table lists besides those kept at higher precision.
SENSITIVITY_TOP = 10


def print_sensitivity(s: dict[str, Any], top: int | None = None, where: str = "--json") -> None:
    """A sensitivity pass (``Sensitivity.to_dict()``) as a table, its simulated drops and its
    notes: every layer, or with ``top`` the most sensitive ones and every layer kept at higher
    precision, saying ``where`` the whole ranking is."""
    from rooftune.analysis.sensitivity_table import (
        NUMERIC_COLUMNS,
        SENSITIVITY_COLUMNS,
        left_out_line,
        sensitivity_rows,
        sensitivity_summary,
        sensitivity_title,
    )

    t = Table(title=sensitivity_title(s), title_justify="left")
    for col in SENSITIVITY_COLUMNS:
        t.add_column(col, justify="right" if col in NUMERIC_COLUMNS else "left")
    rows, left_out = sensitivity_rows(s, top)
    for row in rows:
        t.add_row(*row)
    out.print(t)
    for line in (left_out_line(left_out, where), sensitivity_summary(s)):
        if line:
            out.print(line, markup=False, highlight=False)
    for n in s.get("notes", ()):
        labelled(err, "note", "yellow", n)


def print_serving(r: Any) -> None:
    """A study's serving phase (``--scenario``): a server's or offline's setups as a table with its
    headline, a single-stream study's percentiles; nothing without a scenario."""
    from rooftune.tuning.serving_table import SERVING_COLUMNS, serving_lines, serving_rows

    if r.serving is None:
        return
    if r.serving["scenario"] != "single-stream":
        t = Table(title="Serving (req/s with its 95% CI; latency percentiles at that rate, ms, 95% CI)",
                  title_justify="left")
        for col in SERVING_COLUMNS:
            t.add_column(col, justify="left" if col in ("setup", "configuration", "precision") else "right")
        for row in serving_rows(r.serving):
            t.add_row(*row)
        out.print(t)
    for line in serving_lines(r.serving):
        out.print(line, markup=False, highlight=False)

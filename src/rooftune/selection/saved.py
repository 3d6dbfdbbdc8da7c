"""A selection saved to a folder (``selection.json`` and a ``load.py`` beside it) and rebuilt from it."""

from __future__ import annotations

from pathlib import Path

import torch

from rooftune.errors import InvalidArgument, one_line
from rooftune.fileio import json_text, read_json_input
from rooftune.selection.network import SelectResult
from rooftune.selection.rewrite import SelectedConv, rewrite
from rooftune.selection.solve import Choice, Selection


def save_selection(result: SelectResult, directory: str | Path) -> Path:
    """``selection.json`` and ``load.py`` (``model = load()`` rebuilds the rewritten model)."""
    from rooftune.fileio import write_atomic

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    # each file whole; not the folder swapped for a new one, which may be the user's own (--save .)
    write_atomic(d / "selection.json", json_text(result.to_dict(), indent=2))
    write_atomic(d / "load.py",
        '"""The model rewritten by `rooftune select`: model = load() (same weights as the model it was selected on)."""\n'
        "from pathlib import Path\n\nfrom rooftune.selection import load_selected\n\n\n"
        "def load(module=None):\n"
        "    \"\"\"The rewritten model; ``module``: the model it was selected on, where select was given a module.\"\"\"\n"
        "    return load_selected(Path(__file__).with_name('selection.json'), module)\n")
    return d


def load_selected(path: str | Path, module: torch.nn.Module | None = None) -> torch.nn.Module:
    """Rebuild a saved selection on ``module`` (default: the named model, loaded as `select` did)."""
    from rooftune.primitives.spec import ConvSpec
    from rooftune.workload import load_workload

    allowed = "allowed a selection.json written by rooftune select --save or rooftune optimize"
    doc = read_json_input(path, "selection file", allowed)
    try:
        model, batch, fallbacks = doc["model"], doc["batch"], [fb["layer"] for fb in doc["verification"]["fallbacks"]]
        sel = Selection(doc["selection"]["strategy"],
                        [Choice(c["layer"], ConvSpec.from_dict(c["spec"]), c["primitive"], c["expected_s"])
                         for c in doc["selection"]["layers"]])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a file edited by hand, or another one
        raise InvalidArgument("selection file", str(path), f"not a selection ({type(exc).__name__}: "
                              f"{one_line(exc, 80)}); {allowed}") from None
    if module is None:
        module = load_workload(model, batch=batch, check=False).module
    new = rewrite(module, sel)
    for layer in fallbacks:
        m = new.get_submodule(layer)
        if isinstance(m, SelectedConv):
            m.fallback = True
    return new

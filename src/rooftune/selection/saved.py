"""A selection saved to a folder (``selection.json`` and a ``load.py`` beside it) and rebuilt from it."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from rooftune.selection.network import SelectResult
from rooftune.selection.rewrite import SelectedConv, rewrite
from rooftune.selection.solve import Choice, Selection


def save_selection(result: SelectResult, directory: str | Path) -> Path:
    """``selection.json`` and ``load.py`` (``model = load()`` rebuilds the rewritten model)."""
    from rooftune.fileio import write_atomic

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    # each file whole; not the folder swapped for a new one, which may be the user's own (--save .)
    write_atomic(d / "selection.json", json.dumps(result.to_dict(), indent=2))
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

    doc = json.loads(Path(path).read_text())
    if module is None:
        module = load_workload(doc["model"], batch=doc["batch"], check=False).module
    sel = Selection(doc["selection"]["strategy"],
                    [Choice(c["layer"], ConvSpec.from_dict(c["spec"]), c["primitive"], c["expected_s"])
                     for c in doc["selection"]["layers"]])
    new = rewrite(module, sel)
    for fb in doc["verification"]["fallbacks"]:
        m = new.get_submodule(fb["layer"])
        if isinstance(m, SelectedConv):
            m.fallback = True
    return new

"""Modules as torch.export programs: exporting an ``nn.Module`` given with its example inputs
(to a file named for what it computes, so that trial subprocesses load it and a study of the same
module resumes), and the modules another process imports before it loads a program.

Kept apart from :mod:`rooftune.workload.models`, which loads every kind of model (a ``.pt2`` file
among them, reading :func:`export_imports` for it): exporting needs only the module and its inputs.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rooftune.errors import InvalidArgument
from rooftune.workload.calls import CallStructure, positional_names


def export_module(module: Any, example_inputs: Sequence[Any] | None,
                  example_kwargs: dict[str, Any] | None = None) -> Any:
    """``module`` exported by torch.export, called with ``example_inputs`` and ``example_kwargs``
    (tensors, or tuples, lists and dicts of them), so that trial subprocesses can load it from a
    .pt2 file. A bad argument, or a module torch.export cannot capture, is an InvalidArgument."""
    if not isinstance(module, torch.nn.Module):
        raise InvalidArgument("model", type(module).__name__, "allowed a model name (as rooftune analyze takes it) or an nn.Module")
    if isinstance(example_inputs, torch.Tensor):  # one input given as itself, not in a tuple
        example_inputs = (example_inputs,)
    if not example_inputs and not example_kwargs:
        raise InvalidArgument("example_inputs", None, "an nn.Module needs its example inputs (a tuple of tensors)")
    if example_kwargs is not None and (not isinstance(example_kwargs, dict) or not all(isinstance(k, str) for k in example_kwargs)):
        raise InvalidArgument("example_kwargs", type(example_kwargs).__name__, "a dict of keyword arguments by name")
    args, kwargs = tuple(example_inputs or ()), dict(example_kwargs or {})
    try:
        fixed = [name for name, _ in CallStructure.of(args, kwargs, positional_names(module)).constants()]
    except ValueError as exc:  # an argument hiding tensors in an object
        raise InvalidArgument("example inputs", type(module).__name__, str(exc)) from None
    if fixed:  # torch.export would fix their values inside the program
        raise InvalidArgument("example inputs", ", ".join(fixed)[:120], "tensors only, in tuples, lists or dicts, to "
                              "export the module; for other values pass module:callable returning (module, args, kwargs)")
    try:
        return torch.export.export(module.eval(), args, kwargs)
    except Exception as exc:  # export refuses dynamic Python control flow and the like
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise InvalidArgument("model", type(module).__name__, f"torch.export cannot export it ({first}); "
                              "pass module:callable instead") from None


def export_module_file(module: Any, example_inputs: Sequence[Any] | None, example_kwargs: dict[str, Any] | None,
                       folder: Path) -> Path:
    """``module`` exported (:func:`export_module`) into ``folder`` under a name made from what it
    computes: its class, graph, weights and example inputs' shapes. The same module exported again
    lands on the same file, so a study of it resumes and a saved configuration keeps pointing at
    it (torch.export.save's bytes differ from one save to the next; its content does not)."""
    import hashlib

    ep = export_module(module, example_inputs, example_kwargs)
    h = hashlib.sha256(f"{type(module).__qualname__}\n{ep.graph}\n{ep.call_spec}".encode())
    for name, t in sorted({**ep.state_dict, **{f"const:{k}": v for k, v in ep.constants.items()
                                                 if isinstance(v, torch.Tensor)}}.items()):
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', type(module).__name__)}-{h.hexdigest()[:16]}.pt2"
    if path.exists():
        # used again: `rooftune data prune` counts a module's last use from its times, and a file
        # system mounted noatime would not record the reads (a file not ours to stamp is still read)
        with contextlib.suppress(OSError):
            os.utime(path)
    else:
        from rooftune.fileio import atomic_path

        with atomic_path(path) as part:  # whole or not at all: a study beside this one finds one or the other
            torch.export.save(ep, part)
    return path


def export_imports(ep: Any) -> tuple[str, ...]:
    """The modules another process imports before it loads ``ep`` from its file, as this process
    has them imported: those defining the pytree node types of its inputs and outputs and of its
    submodules' calls (a package such as transformers registers its output classes when it is
    imported, and torch.export.load refuses a program naming one that is not registered), and
    those of the classes of its modules, the model's own first; installed ones only
    (:func:`rooftune.workload.imports.installed_modules`)."""
    from torch.utils._pytree import TreeSpec

    from rooftune.workload.imports import installed_modules, module_of

    names: list[str] = []

    def walk(spec: Any) -> None:
        if isinstance(spec, TreeSpec) and not spec.is_leaf():
            names.append(getattr(spec.type, "__module__", None) or "")
            # children() where torch has it (its children_specs attribute is deprecated there)
            for child in spec.children() if hasattr(spec, "children") else spec.children_specs:
                walk(child)

    for node in ep.graph.nodes:
        for _path, cls in (node.meta.get("nn_module_stack") or {}).values():
            names.append(cls.__module__ if isinstance(cls, type) else module_of(str(cls)))
    walk(ep.call_spec.in_spec)
    walk(ep.call_spec.out_spec)
    for entry in ep.module_call_graph:
        if entry.signature is not None:
            walk(entry.signature.in_spec)
            walk(entry.signature.out_spec)
    return installed_modules(names)

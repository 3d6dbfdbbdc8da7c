"""The modules a process imports before it loads a model's file that another process wrote.

A model given as an object is written to a file (a torch.export program, a .keras file) that the
tuning trials' processes load by path. The file names types that a package registers when it is
imported (transformers' output classes as pytree nodes, a package's Keras layers), and a process
that never imported that package refuses the file. The process that wrote it names the modules it
had imported for those types (:func:`installed_modules`); the other imports them first
(:func:`import_modules`). Only installed modules are named and imported, never a file under the
working directory (the user's own files, which a process started elsewhere would take from another
file of the same name).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

#: Packages every process that loads a workload has imported itself: never named.
IMPORTED_ANYWAY = frozenset({"builtins", "collections", "typing", "torch", "rooftune", "keras", "tensorflow"})


def installed_modules(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` (modules of this process, in order, once each) less those another process need
    not or must not import: not imported here, the main script, rooftune's own and its frameworks',
    and any whose package is not installed (:func:`installed`)."""
    kept = []
    for name in dict.fromkeys(names):
        top = name.partition(".")[0]
        if not name or name == "__main__" or top in IMPORTED_ANYWAY or name not in sys.modules:
            continue
        spec = getattr(sys.modules[top], "__spec__", None)
        if spec is not None and installed(spec):
            kept.append(name)
    return tuple(kept)


def module_of(qualified: str) -> str:
    """The module of a class named ``package.module.Class`` (or ``...Outer.Inner``): the longest
    prefix that is an imported module ("" where none is)."""
    parts = qualified.split(".")
    for i in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:i]) in sys.modules:
            return ".".join(parts[:i])
    return ""


def _resolved(folder: str) -> str:
    return os.path.realpath(folder or ".")


def installed(spec: Any) -> bool:
    """Whether the top-level module or package of ``spec`` was found where packages are installed:
    in the standard library or a site-packages folder (a virtual environment's inside the project
    too), or in a folder outside the working directory that is not the main script's; a built-in
    one is. A folder under the working directory holds the user's own files (the tests beside a
    project, a script's modules)."""
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    sites = {_resolved(p) for p in (*(paths.get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")),
                                    *getattr(site, "getsitepackages", list)(),
                                    getattr(site, "getusersitepackages", str)()) if p}
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    cwd = _resolved(os.getcwd())
    if spec.submodule_search_locations:
        found = {_resolved(os.path.dirname(os.path.normpath(p))) for p in spec.submodule_search_locations}
    elif spec.origin and os.path.isabs(spec.origin):
        found = {_resolved(os.path.dirname(spec.origin))}
    else:
        return True

    def users(folder: str) -> bool:
        return (folder == cwd or (cwd != os.sep and folder.startswith(cwd + os.sep))
                or bool(main) and folder == _resolved(os.path.dirname(main)))

    return all(f in sites or not users(f) for f in found)


def import_modules(names: Iterable[Any] | None) -> None:
    """Import ``names`` (a workload's ``imports``, as the process that wrote its file named them)
    before the file is loaded. A name is imported only where its package is installed here
    (:func:`installed`); one that is not, or whose import fails, is left out, and the load that
    needs it then says which type it lacks."""
    import importlib
    import importlib.util

    for name in names or ():
        if not isinstance(name, str) or not all(p.isidentifier() for p in name.split(".")) or name in sys.modules:
            continue
        try:
            spec = importlib.util.find_spec(name.partition(".")[0])
        except (ImportError, ValueError):
            continue
        if spec is None or not installed(spec):
            continue
        try:
            importlib.import_module(name)
        except Exception:  # an import runs the package's code: any failure leaves it out
            continue

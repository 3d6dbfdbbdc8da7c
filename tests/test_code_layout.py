"""The shape of the code under src/rooftune: modules short enough to read whole, functions short
enough to follow, and no module reaching into another's private names (a name with one leading
underscore is its own module's to change; dunder names such as ``__version__`` are public)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "rooftune"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 100


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, tuple[Path, str, ast.Module]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        found[module_name(path)] = (path, text, ast.parse(text, filename=str(path)))
    return found


def imported_from(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module an ``from ... import`` reads, its dots resolved against ``name``."""
    if not node.level:
        return node.module or ""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(found: dict[str, tuple[Path, str, ast.Module]]) -> list[str]:
    """``module:line name from other``: each single-underscore name a rooftune module imports from
    another, and each one it reads as an attribute of another rooftune module it imported."""
    out = []
    for name, (path, _text, tree) in found.items():
        aliases: dict[str, str] = {}  # a local name bound to a rooftune module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = imported_from(name, path, node)
                if source != "rooftune" and not source.startswith("rooftune."):
                    continue
                for alias in node.names:
                    if f"{source}.{alias.name}" in found:
                        aliases[alias.asname or alias.name] = f"{source}.{alias.name}"
                    if is_private(alias.name) and source != name:
                        out.append(f"{name}:{node.lineno} {alias.name} from {source}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("rooftune") and alias.asname:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and is_private(node.attr):
                chain, value = [], node.value
                while isinstance(value, ast.Attribute):
                    chain.append(value.attr)
                    value = value.value
                if isinstance(value, ast.Name):
                    root = aliases.get(value.id, value.id if value.id == "rooftune" else None)
                    target = ".".join([root, *reversed(chain)]) if root else None
                    if target in found and target != name:
                        out.append(f"{name}:{node.lineno} {node.attr} from {target}")
    return out


@pytest.fixture(scope="module")
def found() -> dict[str, tuple[Path, str, ast.Module]]:
    return modules()


def test_the_scan_sees_the_package(found: dict[str, tuple[Path, str, ast.Module]]) -> None:
    """The checks below pass vacuously on an empty scan: the package and its known modules are in it."""
    assert {"rooftune", "rooftune.analysis.analyze", "rooftune.cli.printing"} <= set(found)


def test_no_module_is_over_600_lines(found: dict[str, tuple[Path, str, ast.Module]]) -> None:
    long = {name: len(text.splitlines()) for name, (_p, text, _t) in found.items()}
    over = sorted(f"{name} ({n} lines)" for name, n in long.items() if n > MAX_MODULE_LINES)
    assert not over, f"modules over {MAX_MODULE_LINES} lines, move a coherent part to a sibling: {', '.join(over)}"


def test_no_function_is_over_100_lines(found: dict[str, tuple[Path, str, ast.Module]]) -> None:
    over = []
    for name, (_path, _text, tree) in found.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    over.append(f"{name}:{node.lineno} {node.name} ({n} lines)")
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines, split into named parts: {', '.join(sorted(over))}"


def test_no_module_imports_another_modules_private_names(found: dict[str, tuple[Path, str, ast.Module]]) -> None:
    offenders = private_imports(found)
    assert not offenders, ("private names used outside their module, give them a public name where they are "
                           f"defined: {', '.join(offenders)}")


def test_the_private_import_check_finds_each_form(tmp_path: Path) -> None:
    """The check flags a private name imported from another module, absolutely or relatively, and
    one read off an imported module; it passes a module's own names and dunder names."""
    tree = ast.parse("from rooftune.a import _x, __version__\nfrom .a import _y\nfrom rooftune import a\n"
                     "import rooftune.a as m\nprint(a._z, m._w, m.public)\nfrom rooftune.b import _own\n")
    path = tmp_path / "b.py"
    found = {"rooftune.a": (tmp_path / "a.py", "", ast.parse("")), "rooftune.b": (path, "", tree)}
    assert private_imports(found) == ["rooftune.b:1 _x from rooftune.a", "rooftune.b:2 _y from rooftune.a",
                                      "rooftune.b:5 _z from rooftune.a", "rooftune.b:5 _w from rooftune.a"]

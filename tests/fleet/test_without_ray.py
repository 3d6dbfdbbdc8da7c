"""Ray comes with the ``fleet`` extra only: without it every module still imports, and each path to a
cluster says in one line what to install, before it tries the cluster's address."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rooftune.errors import ClusterError
from rooftune.fleet import connect
from tests.test_cli import assert_one_line_error, rooftune_in_process

INSTALL = "pip install 'rooftune[fleet]'"
#: Nothing listens on port 1: the address would be refused as unreachable, were Ray tried first.
NOWHERE = "127.0.0.1:1"


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as when not installed


def test_every_module_imports_without_ray() -> None:
    code = ("import importlib, pkgutil, sys\n"
            "sys.modules['ray'] = None\n"
            "import rooftune\n"
            "for m in pkgutil.walk_packages(rooftune.__path__, 'rooftune.'):\n"
            "    if not m.name.endswith('__main__'):  # (which runs the command line)\n"
            "        importlib.import_module(m.name)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_the_library_names_the_extra_without_ray(no_ray: None) -> None:
    with pytest.raises(ClusterError, match=r"ray is not installed.*pip install 'rooftune\[fleet\]'") as err:
        connect(NOWHERE)
    assert "\n" not in str(err.value)
    assert connect(None).__class__.__name__ == "LocalExecutor"  # this process needs no Ray


@pytest.mark.parametrize("args", [
    ["fleet", "status", "--cluster", NOWHERE],
    ["profile", "--models", "resnet18", "--cluster", NOWHERE],
    ["sweep", "conv2d", "--batch", "1", "--cluster", NOWHERE],
    ["tune", "resnet18", "--cluster", NOWHERE],
])
def test_each_command_with_a_cluster_names_the_extra_without_ray(no_ray: None, tmp_path: Path,
                                                                 args: list[str]) -> None:
    proc = rooftune_in_process(*args, db=tmp_path / "r.db")
    assert_one_line_error(proc, "ray is not installed", INSTALL)

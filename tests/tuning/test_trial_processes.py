"""A trial's process and what it starts: isolated from the folder a study runs from, killed whole
on its time limit, and ended with the study on SIGTERM as on Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rooftune.platform.processes import OWNER_FILE, owner
from rooftune.runtimes import get_runtime, output_tensors
from rooftune.tuning import RunConfig, TrialFailed, Worker
from rooftune.workload import load_workload
from tests.platform.test_processes import wait_file, wait_gone

REPO = Path(__file__).resolve().parents[2]
linux = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")

#: A model in the user's own folder, named module:callable.
USER_MODEL = """
import torch
from torch import nn


def build():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    return net.eval(), torch.ones(1, 3, 8, 8)
"""
#: A file of the user's folder that has the name of a module rooftune imports.
SHADOW = "open({marker!r}, 'a').write(__name__ + '\\n')\nraise ImportError('the working folder\\'s ' + __name__)\n"
#: A model whose trial starts a process of its own (as a converter or a compiler does) and hangs.
SPAWNS_AND_HANGS = """
import os
import subprocess
import sys
import time

import torch
from torch import nn


class SpawnsAndHangs(nn.Module):
    def forward(self, x):
        if sys.argv[0].endswith("_worker.py"):  # in a trial's process only
            child = subprocess.Popen(["sleep", "300"])
            open({pids!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
            time.sleep(300)
        return x * 2


def build():
    return SpawnsAndHangs(), torch.ones(1, 4)
"""


def reference(folder: Path, model: str) -> Path:
    path = folder / "ref.pt"
    with torch.no_grad():
        torch.save(output_tensors(load_workload(model)()), path)
    return path


def spec(model: str) -> dict:
    return {"model": model, "inputs": None, "options": {}}


def test_a_trial_imports_its_model_from_the_folder_it_runs_from_and_nothing_else(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A numpy.py or an onnx.py in the user's folder is not numpy or onnx in the trials."""
    marker = tmp_path / "shadowed"
    for name in ("numpy", "onnx"):
        (tmp_path / f"{name}.py").write_text(SHADOW.format(marker=str(marker)))
    (tmp_path / "user_model_in_cwd.py").write_text(USER_MODEL)
    monkeypatch.chdir(tmp_path)
    model = "user_model_in_cwd:build"
    ref = reference(tmp_path, model)
    runtimes = ["eager"] + ([] if get_runtime("onnxruntime").available() else ["onnxruntime"])  # which imports onnx
    for runtime in runtimes:
        work = tmp_path / runtime
        work.mkdir()
        with Worker(RunConfig(runtime=runtime, intra_threads=1), spec(model), ref, work) as w:
            assert w.info["verify"]["ok"], (runtime, w.info)
            assert w.sample(2) > 0
    assert not marker.exists(), marker.read_text()


#: Optional dependencies that torch, sympy (gmpy2) or a runtime try to import where installed.
OPTIONAL = ("gmpy2", "tensorrt", "intel_extension_for_pytorch")
#: In a fresh process without the folder on its path, as the ``rooftune`` command runs: the
#: user's model loaded, then what imports optional dependencies after it.
LOAD_THEN_IMPORT = """
import importlib, sys
from rooftune.workload import load_workload
load_workload(sys.argv[1])
import sympy
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
"""


def test_the_folder_of_a_module_callable_model_gives_no_optional_dependency(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gmpy2.py (which sympy, imported by torch, tries) or a tensorrt.py in the folder a
    module:callable model is loaded from is not imported, after the model, in rooftune's process
    or in a trial's."""
    import importlib.util

    missing = [name for name in OPTIONAL if importlib.util.find_spec(name) is None]
    marker = tmp_path / "shadowed"
    for name in missing:
        (tmp_path / f"{name}.py").write_text(SHADOW.format(marker=str(marker)))
    (tmp_path / "user_model_beside_optional.py").write_text(USER_MODEL)
    monkeypatch.chdir(tmp_path)
    model = "user_model_beside_optional:build"
    done = subprocess.run([sys.executable, "-P", "-c", LOAD_THEN_IMPORT, model, *missing], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not marker.exists(), marker.read_text()
    with Worker(RunConfig(runtime="eager", intra_threads=1), spec(model), reference(tmp_path, model), tmp_path) as w:
        assert w.info["verify"]["ok"], w.info
    assert not marker.exists(), marker.read_text()


@linux
def test_a_trial_past_its_time_limit_is_killed_with_the_processes_it_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pids = tmp_path / "pids"
    (tmp_path / "spawns_and_hangs.py").write_text(SPAWNS_AND_HANGS.format(pids=str(pids)))
    monkeypatch.chdir(tmp_path)
    model = "spawns_and_hangs:build"
    with pytest.raises(TrialFailed, match="timed out after 15 s"):
        Worker(RunConfig(runtime="eager", intra_threads=1), spec(model), reference(tmp_path, model), tmp_path,
               prepare_timeout_s=15.0)
    worker, grandchild = map(int, wait_file(pids, 1).split())
    assert wait_gone(worker) and wait_gone(grandchild)


def children_running(pid: int, module: str) -> list[int]:
    """The processes whose parent is ``pid`` and whose command line names ``module``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except OSError:
            continue
        if int(stat[1]) == pid and stat[0] not in ("Z", "X") and module in cmdline:
            found.append(int(entry))
    return found


def owned_folder(root: Path, name: str, marker: dict) -> Path:
    d = root / name
    d.mkdir()
    (d / OWNER_FILE).write_text(json.dumps(marker))
    return d


@linux
def test_sigterm_ends_a_study_as_ctrl_c_does_and_the_next_removes_what_a_dead_one_left(tmp_path: Path) -> None:
    """SIGTERM to rooftune alone (as a service manager or a batch system sends it) while a trial
    runs: the interrupted message and 143, its trial processes gone, its temporary folder
    removed, the store whole. A dead study's folder was removed at its start; a live one's kept."""
    from rooftune.store import Store
    from rooftune.tuning.study import TrialResult

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    ended = subprocess.Popen(["sleep", "300"])
    with open(f"/proc/{ended.pid}/stat") as f:
        started = int(f.read().rsplit(")", 1)[1].split()[19])
    ended.kill()
    ended.wait()
    dead = owned_folder(tmp, "rooftune-tune-dead", {**owner(), "pid": ended.pid, "start": started})
    live = owned_folder(tmp, "rooftune-tune-live", owner())  # this process's
    db = tmp_path / "r.db"
    proc = subprocess.Popen([sys.executable, "-m", "rooftune.cli", "tune", "tests.analysis.tiny_models:small_cnn",
                             "--budget", "600", "--runtime", "eager,torchscript", "--db", str(db)],
                            cwd=REPO, env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        workers: list[int] = []
        while time.monotonic() < deadline and proc.poll() is None and not workers:
            workers = children_running(proc.pid, "rooftune.tuning._worker")
            time.sleep(0.1)
        assert workers, proc.communicate(timeout=60)
        assert not dead.exists() and live.exists()
        (study,) = [p for p in tmp.glob("rooftune-tune-*") if p != live]
        assert json.loads((study / OWNER_FILE).read_text())["pid"] == proc.pid
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "interrupted (SIGTERM): nothing half-written was kept" in stderr and "Traceback" not in stderr
    assert all(wait_gone(w) for w in workers)
    assert not study.exists() and live.exists()
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        keys = [k for (k,) in c.execute("SELECT DISTINCT study_key FROM trials")]
    with Store(str(db)) as s:
        for key in keys:  # each stored trial whole: it reads back as a result
            assert all(TrialResult.from_stored(row).config.runtime in ("eager", "torchscript") for row in s.trials(key))


def test_the_ncnn_converter_gets_no_more_than_what_is_left_of_the_trials_preparation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rooftune.platform.processes import PREPARE_DEADLINE_ENV
    from rooftune.runtimes.ncnn_runtime import convert

    if get_runtime("ncnn").available():
        pytest.skip(get_runtime("ncnn").available())
    monkeypatch.setenv(PREPARE_DEADLINE_ENV, str(time.time() - 1))  # as a worker past its limit has it
    with pytest.raises(RuntimeError, match="pnnx did not convert the model within 0 s"):
        convert(torch.nn.Conv2d(3, 4, 3), (torch.ones(1, 3, 8, 8),), tmp_path / "model.ncnn.param")
    assert list(tmp_path.iterdir()) == []  # nothing half-written

"""Child processes in groups of their own, ended whole; temporary folders of dead runs removed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rooftune.platform import processes
from rooftune.platform.processes import (
    OWNER_FILE,
    PREPARE_DEADLINE_ENV,
    kill_group,
    owner,
    python_command,
    remove_leftovers,
    run,
    start,
    time_left,
)

linux = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")


def gone(pid: int) -> bool:
    """No such process, or one that ended and waits for its parent (or init) to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return False


def wait_file(path: Path, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} was not written")


#: A shell that starts a grandchild (in its group, as a converter's or a compiler's own children
#: are), writes both pids and waits.
SPAWNER = "sleep 300 & echo $$ $! > {pids}; wait"


@linux
def test_a_child_past_its_time_limit_is_killed_with_what_it_started(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    with pytest.raises(subprocess.TimeoutExpired):
        run(["sh", "-c", SPAWNER.format(pids=pids)], timeout_s=1.0)
    child, grandchild = map(int, wait_file(pids).split())
    assert wait_gone(child) and wait_gone(grandchild)


@linux
def test_ctrl_c_in_the_parent_stops_the_child_and_kills_its_group(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The child is not in the terminal's group, so Ctrl-C reaches the parent alone: the parent
    sends it SIGINT (with a grace period to stop on its own) and kills what is left."""
    pids, stopped = tmp_path / "pids", tmp_path / "stopped"
    wait = subprocess.Popen.communicate
    groups = []

    def interrupted(self: subprocess.Popen, *args: object, **kwargs: object) -> object:
        groups.extend(os.getpgid(int(pid)) for pid in wait_file(pids).split())
        raise KeyboardInterrupt

    monkeypatch.setattr(subprocess.Popen, "communicate", interrupted)
    script = f"trap 'echo stopped > {stopped}; exit 130' INT; " + SPAWNER.format(pids=pids)
    # a shell cannot trap a signal that was ignored when it started, as SIGINT is in a suite started
    # as a background job of a shell script: this process handles it, as a terminal's does, so the
    # child starts with SIGINT's default action
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            run(["sh", "-c", script], interrupt_grace_s=10.0)
    finally:
        signal.signal(signal.SIGINT, previous)
    monkeypatch.setattr(subprocess.Popen, "communicate", wait)
    child, grandchild = map(int, pids.read_text().split())
    assert groups == [child, child] != [os.getpgid(0)] * 2  # a group of its own, with its grandchild
    assert stopped.read_text().strip() == "stopped"  # SIGINT first, and time to act on it
    assert wait_gone(child) and wait_gone(grandchild)


@linux
def test_a_child_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """rooftune killed outright (SIGKILL, the OOM killer): the kernel ends its children."""
    pids = tmp_path / "pids"
    code = ("import sys, time; from rooftune.platform.processes import start; "
            f"p = start(['sleep', '300']); open({str(pids)!r}, 'w').write(str(p.pid)); time.sleep(300)")
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        child = int(wait_file(pids))
        assert not gone(child)
        parent.kill()
        parent.wait()
        assert wait_gone(child)
    finally:
        if parent.poll() is None:
            parent.kill()


def test_a_python_child_does_not_import_from_the_folder_it_starts_in(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "json.py").write_text(f"open({str(marker)!r}, 'w').write('x')\nraise SystemExit(9)\n")
    monkeypatch.chdir(tmp_path)
    done = run(python_command("json.tool"), input="[1]")
    assert done.returncode == 0 and done.stdout.split() == ["[", "1", "]"], done.stderr
    assert not marker.exists()


def test_a_converter_gets_what_is_left_of_the_preparation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PREPARE_DEADLINE_ENV, raising=False)
    assert time_left(600.0) == 600.0
    monkeypatch.setenv(PREPARE_DEADLINE_ENV, str(time.time() + 30))
    assert 25.0 < time_left(600.0) <= 30.0 and time_left(5.0) == 5.0
    monkeypatch.setenv(PREPARE_DEADLINE_ENV, str(time.time() - 1))
    assert time_left(600.0) == 0.0


def folder(root: Path, name: str, marker: dict | None) -> Path:
    d = root / name
    d.mkdir()
    (d / "reference-b1.pt").write_text("")
    if marker is not None:
        (d / OWNER_FILE).write_text(json.dumps(marker))
    return d


@linux
def test_leftovers_of_dead_runs_are_removed_and_a_live_runs_folder_is_kept(tmp_path: Path) -> None:
    me = owner()
    ended = subprocess.Popen(["sleep", "300"])
    dead = {**me, "pid": ended.pid, "start": processes._process_start(ended.pid)[1]}  # type: ignore[index]
    ended.kill()
    ended.wait()
    stale = folder(tmp_path, "rooftune-tune-dead", dead)
    reused = folder(tmp_path, "rooftune-tune-reused", {**me, "start": me["start"] - 1})  # this pid, another process
    rebooted = folder(tmp_path, "rooftune-tuned-rebooted", {**me, "boot": "another-boot"})
    live = folder(tmp_path, "rooftune-tune-live", me)
    unmarked = folder(tmp_path, "rooftune-tune-being-made", None)
    elsewhere = folder(tmp_path, "rooftune-tune-other-namespace", {**dead, "pid_namespace": "pid:[1]"})
    other = folder(tmp_path, "someone-else", dead)
    removed = remove_leftovers(tmp_path)
    assert sorted(removed) == sorted([stale, reused, rebooted])
    assert not stale.exists() and not reused.exists() and not rebooted.exists()
    assert live.exists() and unmarked.exists() and elsewhere.exists() and other.exists()


def test_a_new_temporary_folder_is_marked_with_its_owner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again
    made = processes.owned_tempdir("rooftune-tune-")
    assert made.parent == tmp_path and json.loads((made / OWNER_FILE).read_text())["pid"] == os.getpid()
    assert remove_leftovers(tmp_path) == [] and made.exists()


@linux
def test_signal_group_reaches_every_process_of_the_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    proc = start(["sh", "-c", SPAWNER.format(pids=pids)])
    try:
        child, grandchild = map(int, wait_file(pids).split())
        assert processes.signal_group(proc, signal.SIGSTOP)

        def state(pid: int) -> str:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]

        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (state(child), state(grandchild)) != ("T", "T"):
            time.sleep(0.02)
        assert (state(child), state(grandchild)) == ("T", "T")
    finally:
        kill_group(proc)  # a stopped group too
    assert wait_gone(child) and wait_gone(grandchild)


#: A user's module that imports siblings of its folder: one when it is imported, one when its
#: function runs, one through importlib, and a package of the folder importing a sibling too.
USER_MODULE = """
import importlib
import rt_sibling_now

def build():
    import rt_sibling_later
    sub = importlib.import_module("rt_sibling_pkg.sub")
    return rt_sibling_now.VALUE + rt_sibling_later.VALUE + sub.VALUE
"""


def test_a_users_module_imports_its_siblings_and_nothing_else_comes_from_its_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "rt_user_entry.py").write_text(USER_MODULE)
    (tmp_path / "rt_sibling_now.py").write_text("VALUE = 1\n")
    (tmp_path / "rt_sibling_later.py").write_text("VALUE = 10\n")
    (tmp_path / "rt_sibling_pkg").mkdir()
    (tmp_path / "rt_sibling_pkg" / "__init__.py").write_text("")
    (tmp_path / "rt_sibling_pkg" / "sub.py").write_text("from . import other\nimport rt_sibling_now\n"
                                                         "VALUE = other.VALUE + rt_sibling_now.VALUE\n")
    (tmp_path / "rt_sibling_pkg" / "other.py").write_text("VALUE = 100\n")
    (tmp_path / "rt_not_installed_dep.py").write_text("raise SystemExit('imported from the working folder')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in sys.path if p not in ("", str(tmp_path))])
    names = ("rt_user_entry", "rt_sibling_now", "rt_sibling_later", "rt_sibling_pkg", "rt_sibling_pkg.sub",
             "rt_sibling_pkg.other")
    try:
        assert processes.import_user_module("rt_user_entry").build() == 112
        assert str(tmp_path) not in sys.path
        with pytest.raises(ModuleNotFoundError):  # an import by anybody else: not the folder's file
            __import__("rt_not_installed_dep")
    finally:
        for name in names:
            sys.modules.pop(name, None)


def running_with(argument: str) -> list[int]:
    """The live processes (not zombies) with ``argument`` among their command line's arguments."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if argument.encode() in args and state not in ("Z", "X"):
            found.append(int(entry))
    return found


def wait_count(argument: str, want: int, timeout_s: float) -> list[int]:
    """The processes :func:`running_with` finds once there are ``want`` of them, or at the end of
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = running_with(argument)
        if len(found) == want or time.monotonic() >= deadline:
            return found
        time.sleep(0.05)


@linux
def test_nothing_that_rooftune_exec_started_outlives_it_however_it_ends(tmp_path: Path) -> None:
    """``rooftune exec --instances 2`` of a shell that starts background jobs: killed outright
    (SIGKILL), the kernel's parent-death signal ends each shell, and the watchdog the jobs; ended
    on its own, jobs its copies left behind end with it too."""
    from rooftune.runconfig import RunConfig

    cfg = tmp_path / "best.json"
    cfg.write_text(json.dumps({"config": RunConfig(intra_threads=1).to_dict()}))
    mark = f"600.{os.getpid()}{time.time_ns() % 10**9}"  # sleep's argument, unique to this test
    exec_ = [sys.executable, "-m", "rooftune.cli", "exec", "--config", str(cfg), "--instances", "2", "--", "sh", "-c"]
    proc = subprocess.Popen([*exec_, f"sleep {mark} & sleep {mark} & wait"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        assert len(wait_count(mark, 4, 120.0)) == 4
        proc.kill()
        proc.wait()
        assert wait_count(mark, 0, 20.0) == []
        left = subprocess.run([*exec_, f"sleep {mark} & exit 0"], capture_output=True, text=True, timeout=120)
        assert left.returncode == 0, left.stderr
        assert wait_count(mark, 0, 20.0) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in running_with(mark):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@linux
def test_the_watchdog_kills_a_group_that_ignores_its_signal_and_never_a_group_of_another_leader(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from rooftune.platform import _watchdog

    monkeypatch.setattr(_watchdog, "GRACE_S", 0.2)
    proc = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 300"], process_group=0)
    try:
        start = _watchdog._start_time(proc.pid)
        assert start is not None
        _watchdog.end({proc.pid: (start + 1, signal.SIGKILL)})  # its number now names another process
        assert proc.poll() is None and not wait_gone(proc.pid, 0.5)
        _watchdog.end({proc.pid: (start, signal.SIGTERM)})  # ignored: SIGKILL after the grace
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

"""The processes rooftune starts, and the folders a run leaves behind.

Every child (a trial's worker, an isolated measurement, the ncnn converter, a profile run under
an emulated ISA, the copies ``rooftune exec`` starts) is started by :func:`start`:

- it leads a process group of its own, so that what it starts in turn (torch.compile's compile
  workers, a converter) is paused, resumed and killed with it (:func:`signal_group`,
  :func:`kill_group`), and a terminal's Ctrl-C reaches rooftune alone, which ends its children;
- it is sent a signal when the thread that started it ends (Linux's PR_SET_PDEATHSIG: the
  kernel sends it however rooftune dies, SIGKILL and the OOM killer included);
- its group is ended by this process's watchdog (:mod:`rooftune.platform._watchdog`, started
  with the first child) once this process ends, however it ends: the parent-death signal reaches
  the child alone, and what the child started (a shell's background jobs) would go on under init;
  a process that leaves the group (``setsid``, a daemon) is not followed;
- the groups still running when the interpreter exits are killed (atexit).

A Python child runs with ``-P`` (:func:`python_command`): the folder it starts in is not on its
``sys.path``, so a ``numpy.py`` or ``onnx.py`` there cannot take the real module's place. User
code named ``module:callable`` is imported by :func:`import_user_module`, which makes that
folder importable for the user's modules alone.

A run's temporary folder (:func:`owned_tempdir`) holds its owner's pid, the pid's start time and
the boot it ran in; the next run removes those whose owner is gone (:func:`remove_leftovers`),
never one whose owner may still run.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import importlib
import importlib.abc
import importlib.machinery
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import IO, Any

from rooftune.fileio import json_text, parse_json, pipe_json

#: prctl's option that asks for a signal when the parent (the thread that forked) ends.
_PR_SET_PDEATHSIG = 1
#: Set in a trial's worker: the time (``time.time()``) by which its preparation must end. A
#: converter it runs gets no more than what is left (:func:`time_left`), so that its own limit
#: cannot outlast the trial's.
PREPARE_DEADLINE_ENV = "ROOFTUNE_PREPARE_DEADLINE"
#: Prefixes of rooftune's temporary folders (a study's, ``load_tuned``'s); each holds OWNER_FILE.
TEMP_PREFIXES = ("rooftune-tune-", "rooftune-tuned-")
OWNER_FILE = ".rooftune-owner"
#: Seconds between two looks at whether a child exited (:func:`wait_exit`).
_EXIT_POLL_S = 0.01

#: Children started and not yet killed by :func:`kill_group` (weakly: a finished one is dropped
#: with its Popen).
_started: weakref.WeakSet[subprocess.Popen[Any]] = weakref.WeakSet()


@functools.cache
def _prctl() -> Any:
    """libc's prctl, or None off Linux; looked up in the parent, never between fork and exec."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def python_command(module: str, *args: str) -> list[str]:
    """``python -P -m module args``: this interpreter, without the working directory on sys.path."""
    return [sys.executable, "-P", "-m", module, *args]


def start(cmd: Sequence[str], *, parent_death: int = signal.SIGKILL, affinity: Sequence[int] | None = None,
          **popen: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(cmd, **popen)`` leading a process group of its own, sent ``parent_death``
    when the thread calling this ends (SIGKILL: a paused child dies too, where SIGTERM would wait
    for a SIGCONT; ``rooftune exec`` gives the user's programs SIGTERM); the group, what the
    child started included, is sent it by the watchdog (:class:`_Watchdog`) when this process
    ends, and SIGKILL a while later where that was another signal. ``affinity``: the CPUs the
    child is bound to from its start."""
    prctl = _prctl()
    parent = os.getpid()

    def in_child() -> None:
        if affinity is not None:  # before the program starts any thread, which inherits it
            os.sched_setaffinity(0, affinity)
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(parent_death))
        if os.getppid() != parent:  # the parent ended between the fork and the prctl
            os.kill(os.getpid(), parent_death)

    proc = subprocess.Popen(list(cmd), process_group=0, preexec_fn=in_child, **popen)
    _started.add(proc)
    _Watchdog.tell(f"+ {proc.pid} {_start_ticks(proc.pid)} {int(parent_death)}")
    return proc


#: The script of this process's watchdog, run by its path (it imports nothing of rooftune).
_WATCHDOG = Path(__file__).with_name("_watchdog.py")


class _Watchdog:
    """This process's watchdog (:mod:`rooftune.platform._watchdog`): started with the first child,
    told of each child's group, and ending those still registered when this process ends. A
    process forked from this one (``os.fork``) starts its own."""

    lock = threading.Lock()
    #: The process that started the watchdog, and the pipe to it (None where it could not start).
    owner: int | None = None
    pipe: IO[bytes] | None = None
    proc: subprocess.Popen[bytes] | None = None  # kept: never waited for, it outlives this process

    @classmethod
    def tell(cls, line: str) -> None:
        with cls.lock:
            if cls.owner != os.getpid():
                cls.owner, cls.pipe, cls.proc = os.getpid(), None, None
                if os.path.exists("/proc/self/stat"):  # it tells its groups apart by /proc
                    try:
                        cls.proc = subprocess.Popen(
                            [sys.executable, "-I", "-S", str(_WATCHDOG), str(os.getpid())], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/", process_group=0)
                        cls.pipe = cls.proc.stdin
                    except OSError:
                        pass
            if cls.pipe is None:
                return
            try:
                cls.pipe.write(line.encode() + b"\n")
                cls.pipe.flush()
            except OSError:  # it was killed: the parent-death signal alone is left
                cls.pipe = None


def _reset_watchdog_lock() -> None:
    # a fork while another thread held the lock would leave it held in the child for ever
    _Watchdog.lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_watchdog_lock)


def _start_ticks(pid: int) -> int:
    started = _process_start(pid)
    return started[1] if started else 0


def signal_group(proc: subprocess.Popen[Any], sig: int) -> bool:
    """Send ``sig`` to every process of ``proc``'s group; False where none is left."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """Kill ``proc`` and every process of its group (SIGKILL ends a stopped process too), and reap
    ``proc``. The group is reached while ``proc`` is not yet reaped: until then its pid names the
    group (an exited ``proc`` waited for by :func:`wait_exit` still does), after that it may name
    another process."""
    if proc.returncode is None:
        signal_group(proc, signal.SIGKILL)
        _Watchdog.tell(f"- {proc.pid}")
    proc.wait()
    _started.discard(proc)


def wait_exit(proc: subprocess.Popen[Any], timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``proc`` to exit, without reaping it (so that :func:`kill_group`
    can still reach what it left in its group); whether it exited."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:  # reaped already
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_EXIT_POLL_S)


def run(cmd: Sequence[str], *, timeout_s: float | None = None, input: str | None = None,
        interrupt_grace_s: float = 0.0, **popen: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(cmd, input=input, timeout=timeout_s, capture_output=True, text=True)`` in
    a process group of its own, killed whole on the timeout (raising ``subprocess.TimeoutExpired``
    as ``subprocess.run`` does) or on any exception in this process (Ctrl-C).
    ``interrupt_grace_s``: on Ctrl-C the group is sent SIGINT first and given that long to stop
    on its own (a rooftune command that writes what it measured before it exits)."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    popen.setdefault("text", True)
    proc = start(cmd, stdin=subprocess.PIPE if input is not None else None, **popen)
    try:
        out, err = proc.communicate(input, timeout=timeout_s)
    except KeyboardInterrupt:
        try:
            if interrupt_grace_s > 0 and signal_group(proc, signal.SIGINT):
                wait_exit(proc, interrupt_grace_s)
        finally:
            _end(proc)
        raise
    except subprocess.TimeoutExpired:
        _end(proc)
        raise subprocess.TimeoutExpired(list(cmd), timeout_s or 0.0) from None
    except BaseException:
        _end(proc)
        raise
    _started.discard(proc)
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)


def run_copies(cmd: Sequence[str], env: dict[str, str], n: int, cpus: Sequence[Sequence[int]] | None = None) -> int:
    """``n`` copies of ``cmd`` side by side, copy ``i`` with ``ROOFTUNE_INSTANCE=i`` and
    ``ROOFTUNE_INSTANCES=n`` added to ``env`` (and bound to ``cpus[i]`` where given); the first non-zero status among them (128 + N for
    a copy a signal ended), else 0. Each copy leads a process group of its own: SIGINT (Ctrl-C),
    SIGTERM and SIGHUP sent to this process reach every process of every copy once (a wrapper
    script's children too), copies not yet started are not started, and this process waits for
    them all; a copy whose parent dies is sent SIGTERM (Linux). The copies are not in the
    terminal's foreground group: they must not read the terminal, and Ctrl-Z stops the parent
    alone."""
    procs: list[subprocess.Popen[bytes]] = []
    stopping: list[int] = []

    def forward(signum: int, _frame: Any) -> None:
        stopping.append(signum)
        for p in procs:
            if p.poll() is None:
                signal_group(p, signum)

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, forward) for sig in handled}
    try:
        for i in range(n):
            if stopping:
                break
            # the user's programs are sent SIGTERM, not SIGKILL, when their parent dies: they may clean up
            procs.append(start(cmd, parent_death=signal.SIGTERM, affinity=cpus[i] if cpus else None,
                               env={**env, "ROOFTUNE_INSTANCE": str(i), "ROOFTUNE_INSTANCES": str(n)}))
        codes = [p.wait() for p in procs]
        if stopping and len(procs) < n:
            codes.append(-stopping[0])
    finally:
        for p in procs:
            if p.poll() is None:
                signal_group(p, signal.SIGTERM)
                p.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    bad = [c for c in codes if c != 0]
    if not bad:
        return 0
    return bad[0] if bad[0] > 0 else 128 - bad[0]


def _end(proc: subprocess.Popen[Any]) -> None:
    kill_group(proc)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


@atexit.register
def _kill_started() -> None:
    """The groups of children still running when this interpreter exits (an exception that no
    ``close`` saw, a library caller that forgot one)."""
    for proc in list(_started):
        if proc.returncode is None:
            kill_group(proc)


def time_left(limit_s: float) -> float:
    """``limit_s``, or what is left of this process's preparation where that is less (a trial's
    worker, see PREPARE_DEADLINE_ENV); never below 0."""
    try:
        left = float(os.environ[PREPARE_DEADLINE_ENV]) - time.time()
    except (KeyError, ValueError):
        return limit_s
    return max(0.0, min(limit_s, left))


def import_user_module(name: str) -> ModuleType:
    """Import the user's module ``name`` (of a ``module:callable`` spec, a ``--validate``, a
    ``--loss``) from the working directory, as ``uvicorn module:app`` does, without putting that
    folder on ``sys.path`` (:class:`_UserFolders`): the folder gives the user's module, and the
    modules found there their siblings, whenever they import one (at import time or later, in a
    function), as ``python model.py`` would; it is never searched for anybody else's import, so
    an optional dependency that is not installed (``gmpy2``, which sympy tries) is never a file
    of that folder, in this process or in a trial's. A process started with the folder on its
    path (``python -m rooftune``) imports as it is."""
    cwd = os.getcwd()
    if cwd in sys.path or "" in sys.path:
        return importlib.import_module(name)
    top = name.partition(".")[0]
    if not top or top in sys.modules:
        return importlib.import_module(name)
    finder = _user_folders()
    finder.requested[top] = cwd
    try:
        return importlib.import_module(name)
    finally:
        finder.requested.pop(top, None)


class _UserFolders(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: finds a top-level module in a user's folder for the import that
    :func:`import_user_module` asked for, and for an import made by a module found there (its
    caller's frame tells who imports: the first outside importlib). A module that rooftune or a
    library imports never comes from that folder, whatever its name."""

    def __init__(self) -> None:
        #: Top-level names asked for by import_user_module, and the folder to look in.
        self.requested: dict[str, str] = {}
        #: Top-level names found in a user's folder, and that folder.
        self.found: dict[str, str] = {}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if path is not None:  # a submodule: its package's __path__ leads to it
            return None
        folder = self.requested.pop(name, None) or self.found.get(self._importer())
        if folder is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, [folder])
        if spec is not None:
            self.found[name] = folder
        return spec

    @staticmethod
    def _importer() -> str:
        """The top-level package of the module whose code runs the import under way."""
        frame = sys._getframe(2)
        while frame is not None:
            top = str(frame.f_globals.get("__name__") or "").partition(".")[0]
            if top not in _IMPORT_MACHINERY:
                return top
            frame = frame.f_back
        return ""


#: The modules whose frames lie between an import statement (or ``importlib.import_module``) and
#: a finder: the frozen bootstrap goes by its own names.
_IMPORT_MACHINERY = frozenset({"importlib", "_frozen_importlib", "_frozen_importlib_external"})


@functools.cache
def _user_folders() -> _UserFolders:
    finder = _UserFolders()
    sys.meta_path.insert(0, finder)
    return finder


# -- temporary folders --------------------------------------------------------------------------

def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _process_start(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of process ``pid`` from /proc/PID/stat; None
    when there is no such process (or no /proc)."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    try:
        fields = stat.rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def _namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def owner() -> dict[str, Any]:
    """What identifies this process in its folders' OWNER_FILE: its pid, when it started (a pid
    is used again by later processes), the boot it runs in and its pid namespace."""
    here = _process_start(os.getpid())
    return {"pid": os.getpid(), "start": here[1] if here else None,
            "boot": _read("/proc/sys/kernel/random/boot_id"), "pid_namespace": _namespace()}


def owner_alive(marker: dict[str, Any]) -> bool:
    """Whether the process an OWNER_FILE names may still run: True where it cannot be told (the
    folder of a run in another pid namespace sharing this temp dir is never removed)."""
    pid = marker.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return True
    boot = _read("/proc/sys/kernel/random/boot_id")
    if marker.get("boot") and boot and marker["boot"] != boot:
        return False  # written before this machine last started
    if marker.get("pid_namespace") != _namespace():
        return True
    if not os.path.exists("/proc/self/stat"):  # no /proc: whether the pid exists at all
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    now = _process_start(pid)
    if now is None or now[0] in ("Z", "X"):  # gone, or ended and not yet reaped
        return False
    return marker.get("start") is None or now[1] == marker["start"]


def mark_owned(folder: Path) -> None:
    """Write this process's OWNER_FILE into ``folder`` (one of TEMP_PREFIXES in the temp dir)."""
    (folder / OWNER_FILE).write_text(json_text(owner()))


def remove_leftovers(tempdir: str | Path | None = None) -> list[Path]:
    """Remove the folders of TEMP_PREFIXES in ``tempdir`` (default: the temp dir) that this user
    owns and whose OWNER_FILE names a process that is gone; the folders removed. A folder without
    the file is kept: it may be one being made, or one an earlier version made."""
    root = Path(tempdir if tempdir is not None else tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(TEMP_PREFIXES):
            continue
        try:
            mine = entry.stat(follow_symlinks=False).st_uid == os.getuid()
            if not mine or not entry.is_dir(follow_symlinks=False):
                continue
            marker = parse_json((Path(entry.path) / OWNER_FILE).read_bytes())
        except (OSError, ValueError):  # (parse_json's one error, for a file nested deep too)
            continue
        if isinstance(marker, dict) and not owner_alive(marker):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed


def owned_tempdir(prefix: str) -> Path:
    """A new temporary folder marked with this process (:func:`mark_owned`), after removing those
    that dead runs left (:func:`remove_leftovers`)."""
    remove_leftovers()
    path = Path(tempfile.mkdtemp(prefix=prefix))
    mark_owned(path)
    return path


def protocol_pipe() -> IO[str]:
    """In a worker that answers on its stdout, one JSON object per line: the pipe to answer on (the
    original stdout), with fd 1 and ``sys.stdout`` pointed at stderr, so that a library that
    prints cannot corrupt the protocol."""
    pipe = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return pipe


def answer(pipe: IO[str], obj: dict[str, Any]) -> None:
    """One answer of a worker's line protocol (see :func:`protocol_pipe`)."""

    pipe.write(pipe_json(obj) + "\n")
    pipe.flush()

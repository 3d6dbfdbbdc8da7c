"""Profiling in a worker subprocess: a primitive that crashes or hangs is stored failed with its
reason and never run again, the campaign goes on, and a campaign killed with SIGKILL resumes
without losing or repeating a row and leaves no worker behind."""

from __future__ import annotations

import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rooftune.errors import MeasurementError
from rooftune.primitives import PRIMITIVES, ConvSpec
from rooftune.profiling import collect_specs, run_campaign
from rooftune.profiling.isolated import WORKER_MODULE, Isolated
from rooftune.profiling.work import TEST_PRIMITIVES_ENV, InProcess
from rooftune.store import Store

HERE = Path(__file__).resolve().parent
SPECS = [(ConvSpec(1, 8, 12, 12, 16, 3, 3, padding=1), ["t"]), (ConvSpec(1, 16, 8, 8, 8, 1, 1), ["t"])]
#: Seconds the killed campaign and its resumption may take together at most (they take ~30 s on
#: a loaded two-core VM: a fresh worker per crash).
CLI_TIMEOUT_S = 240


def _faults_env(monkeypatch: pytest.MonkeyPatch, log: Path) -> dict[str, str]:
    """The environment that has the worker (and ``rooftune profile``) import profiling_faults."""
    path = os.pathsep.join(filter(None, (str(HERE), os.environ.get("PYTHONPATH"))))
    env = {"PYTHONPATH": path, TEST_PRIMITIVES_ENV: "profiling_faults", "ROOFTUNE_TEST_FAULT_LOG": str(log)}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


@pytest.fixture
def faults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The faulty primitives known here and in the worker; yields the fault log. The registry is
    restored afterwards (they must never reach another test's campaign or selftest)."""
    saved = dict(PRIMITIVES)
    _faults_env(monkeypatch, tmp_path / "faults.log")
    import profiling_faults

    PRIMITIVES.update(profiling_faults.FAULTS)
    try:
        yield tmp_path / "faults.log"
    finally:
        PRIMITIVES.clear()
        PRIMITIVES.update(saved)


def _faults(log: Path) -> list[tuple[str, str, int]]:
    if not log.exists():
        return []
    return [(n, k, int(p)) for n, k, p in (line.split() for line in log.read_text().splitlines())]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_a_crashing_primitive_is_stored_failed_and_the_campaign_goes_on(tmp_path: Path, faults: Path) -> None:
    from rooftune.perfmodel import load_profile_data

    names = ["pytorch-default", "test-segfault", "im2col-gemm"]
    with Store(tmp_path / "p.db") as store:
        r = run_campaign(SPECS, store=store, primitives=names, threads=[1], transforms=False, passes=2,
                         extra_passes=0)
        rows = store.profiles()
        assert len(rows) == len(SPECS) * len(names) and r.added == len(rows)
        by = {(x["spec_key"], x["primitive"]): x for x in rows}
        for spec, _ in SPECS:
            crashed = by[spec.key(), "test-segfault"]
            assert crashed["status"] == "failed" and crashed["median_s"] is None
            assert crashed["reason"] == "crashed (signal 11, SIGSEGV)"
            for name in ("pytorch-default", "im2col-gemm"):  # timed in both passes, around the crashes
                assert by[spec.key(), name]["status"] == "ok" and len(by[spec.key(), name]["pass_medians"]) == 2
        # one crash per spec, each in a worker of its own; the second pass did not run it again
        log = _faults(faults)
        assert sorted(k for _, k, _ in log) == sorted(s.key() for s, _ in SPECS) and len({p for *_, p in log}) == 2
        assert not any(_alive(p) for *_, p in log)
        again = run_campaign(SPECS, store=store, primitives=names, threads=[1], transforms=False, passes=2,
                             extra_passes=0)
        assert again.added == 0 and again.skipped == len(rows) and again.retimed == 0 and len(_faults(faults)) == 2
        data = load_profile_data(store, rows[0]["platform_id"], 1)
    # what a model learns from: no time for the crashed primitive, the others' times
    column = data.times[:, data.primitives.index("test-segfault")]
    assert all(math.isnan(v) for v in column)
    assert all(v > 0 for v in data.times[:, data.primitives.index("pytorch-default")])


def test_a_primitive_that_exits_or_crashes_while_verified_is_failed_with_its_reason(tmp_path: Path,
                                                                                    faults: Path) -> None:
    with Store(tmp_path / "p.db") as store:
        names = ["test-exit", "test-segfault-verifying", "pytorch-default"]
        run_campaign(SPECS[:1], store=store, primitives=names, threads=[1], passes=1)
        by = {x["primitive"]: x for x in store.profiles()}
    assert by["test-exit"]["status"] == "failed" and by["test-exit"]["reason"] == "crashed (exit status 3)"
    assert by["test-segfault-verifying"]["reason"] == "crashed (signal 11, SIGSEGV)"
    assert by["pytorch-default"]["status"] == "ok" and by["transform:nchw-to-nhwc"]["status"] == "ok"
    assert [n for n, *_ in _faults(faults)] == ["test-segfault-verifying", "test-exit"]  # verified first, then timed


def test_a_hanging_primitive_is_killed_at_its_time_limit(tmp_path: Path, faults: Path) -> None:
    limit = 5.0
    with Store(tmp_path / "p.db") as store:
        started = time.monotonic()
        run_campaign(SPECS[:1], store=store, primitives=["test-hang", "pytorch-default"], threads=[1],
                     transforms=False, passes=1, time_limit_s=limit)
        took = time.monotonic() - started
        by = {x["primitive"]: x for x in store.profiles()}
    assert by["test-hang"]["status"] == "failed" and by["test-hang"]["reason"] == "timed out after 5.0 s"
    assert by["pytorch-default"]["status"] == "ok" and by["pytorch-default"]["median_s"] > 0
    [(_, _, pid)] = _faults(faults)
    assert not _alive(pid) and took >= limit


def test_one_warm_worker_serves_every_spec_and_measures_as_in_process() -> None:
    from rooftune.profiling.campaign import PROFILE_POLICY

    here = InProcess()
    with Isolated() as worker:
        worker.set_threads(1)
        for spec, _ in SPECS:
            for runner in (worker, here):
                runner.begin(spec, 1)
                assert runner.prepare("pytorch-default").status == "ok"
                assert runner.prepare("winograd-f2x2").status == ("ok" if spec.R == 3 else "unsupported")
            a = worker.measure("pytorch-default", PROFILE_POLICY)
            b = here.measure("pytorch-default", PROFILE_POLICY)
            assert a.measurement is not None and b.measurement is not None
            assert (a.measurement.label, a.measurement.params) == (b.measurement.label, b.measurement.params) == \
                ("conv.pytorch-default", {"spec": spec.key(), "threads": 1})
            assert a.measurement.method.policy == PROFILE_POLICY and a.measurement.n >= PROFILE_POLICY.min_samples
            # a transform, timed without a preparation in this worker's life
            t = worker.measure("transform:nchw-to-nhwc", PROFILE_POLICY)
            assert t.measurement is not None and t.measurement.params == {"shape": list(spec.input_shape)}
        assert worker.probe.read() > 0
        assert worker.started == 1


def test_a_worker_that_cannot_start_ends_the_campaign_and_stores_nothing(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEST_PRIMITIVES_ENV, "no_such_module_here")
    with Store(tmp_path / "p.db") as store:
        with pytest.raises(MeasurementError, match="worker did not start: crashed .*no_such_module_here"):
            run_campaign(SPECS[:1], store=store, primitives=["pytorch-default"], threads=[1], transforms=False)
        assert store.count("profiles") == 0


def _rows(db: Path) -> list[tuple[str, str, int]]:
    try:
        with sqlite3.connect(db, timeout=5) as c:
            return [tuple(r) for r in c.execute("SELECT spec_key, primitive, threads FROM profiles")]
    except sqlite3.OperationalError:  # (not created yet)
        return []


def _workers_of(marker: str) -> list[int]:
    """Live processes running the profiling worker whose environment names ``marker``."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if WORKER_MODULE in (d / "cmdline").read_bytes().decode(errors="replace") and \
                    marker in (d / "environ").read_bytes().decode(errors="replace") and _alive(int(d.name)):
                found.append(int(d.name))
        except OSError:
            continue
    return found


def test_a_campaign_killed_mid_way_resumes_without_losing_or_repeating_a_row(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``rooftune profile`` is killed with SIGKILL once it has stored a row (the crash of the first
    spec's test-segfault) and while its worker is busy (test-stall-once stalls it for an hour: a
    worker left behind would still be there); run again, it completes the campaign."""
    log, db, stall = tmp_path / "faults.log", tmp_path / "c.db", tmp_path / "stalled.pid"
    env = {**os.environ, **_faults_env(monkeypatch, log), "ROOFTUNE_TEST_STALL_FILE": str(stall)}
    names = ["pytorch-default", "test-segfault", "im2col-gemm", "test-stall-once"]
    cmd = [sys.executable, "-m", "rooftune", "profile", "--sample", "3", "--primitives", ",".join(names),
           "--threads", "1", "--passes", "1", "--extra-passes", "0", "--budget", "600", "--db", str(db), "--json"]
    specs, _ = collect_specs(sample=3)
    keys = {s.key() for s, _ in specs}
    expected = {(k, n, 1) for k in keys for n in [*names, "transform:nchw-to-nhwc", "transform:nhwc-to-nchw"]}
    deadline = time.monotonic() + CLI_TIMEOUT_S
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stalled = 0
    try:
        while not (_rows(db) and stall.exists()):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "no row stored, or no stall"
            time.sleep(0.05)
        stalled = int(stall.read_text())
        assert _alive(stalled)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        first = _rows(db)
        assert 0 < len(first) < len(expected)  # killed mid-campaign
        # the kernel ended the worker with its parent, stalled as it was
        until = time.monotonic() + 10
        while (_alive(stalled) or _workers_of(str(tmp_path))) and time.monotonic() < until:
            time.sleep(0.05)
        assert not _alive(stalled) and _workers_of(str(tmp_path)) == []
    finally:
        proc.kill()
        proc.wait()
        if stalled and _alive(stalled):  # (only when the test has failed)
            os.kill(stalled, signal.SIGKILL)
    left = max(1.0, deadline - time.monotonic())
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=left)
    assert done.returncode == 0, done.stderr
    rows = _rows(db)
    assert len(rows) == len(set(rows)) and set(rows) == expected  # every row once: none lost, none twice
    with sqlite3.connect(db) as c:
        status = dict(((k, n), (st, why)) for k, n, st, why in
                      c.execute("SELECT spec_key, primitive, status, reason FROM profiles").fetchall())
    crash = ("failed", "crashed (signal 11, SIGSEGV)")
    assert {k: status[k, "test-segfault"] for k in keys} == dict.fromkeys(keys, crash)
    assert all(status[k, n][0] == "ok" for k in keys for n in ("pytorch-default", "test-stall-once"))
    # each spec crashed a worker once: the crash stored before the kill was not run again
    assert sorted(k for n, k, _ in _faults(log) if n == "test-segfault") == sorted(keys)
    assert _workers_of(str(tmp_path)) == []

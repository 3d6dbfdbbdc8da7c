"""`rooftune tune` and `rooftune exec` as a user meets them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rooftune.tuning import RunConfig
from tests.test_cli import assert_one_line_error, rooftune_in_process


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["resnet18", "--objective", "speed"], ["objective 'speed'", "latency, throughput"]),
        (["resnet18", "--budget", "0"], ["budget 0"]),
        (["resnet18", "--trials", "-1"], ["trials -1"]),
        (["resnet18", "--runtime", "tensorrt"], ["runtime 'tensorrt'", "onnxruntime"]),
        (["resnet18", "--save", "/no/such/dir/best.json"], ["--save", "directory does not exist"]),
        (["resnet5O"], ["model 'resnet5O'", "did you mean resnet50"]),
    ],
)
def test_tune_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    db = tmp_path / "r.db"
    proc = rooftune_in_process("tune", *args, db=db)
    assert_one_line_error(proc, *fragments)
    assert not db.exists()


def exec_(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rooftune.cli", "exec", *args], capture_output=True, text=True, timeout=120)


def test_exec_applies_the_saved_environment(tmp_path: Path) -> None:
    cfg = tmp_path / "best.json"
    cfg.write_text(json.dumps({"config": RunConfig(intra_threads=1, omp={"OMP_PROC_BIND": "close"}).to_dict()}))
    code = "import os; print(os.environ['OMP_NUM_THREADS'], os.environ['OMP_PROC_BIND'])"
    proc = exec_("--config", str(cfg), "--", sys.executable, "-c", code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "close"]


two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two instances of one thread need two cores")


@two_cores
def test_exec_starts_a_copy_per_instance_of_a_throughput_configuration(tmp_path: Path) -> None:
    cfg = tmp_path / "best.json"
    cfg.write_text(json.dumps({"config": RunConfig(intra_threads=1, instances=2, batch=4).to_dict()}))
    code = ("import os, sys; print(os.environ['ROOFTUNE_INSTANCE'], os.environ['ROOFTUNE_INSTANCES'], "
            "os.environ['OMP_NUM_THREADS'], flush=True); sys.exit(int(sys.argv[1]) if os.environ['ROOFTUNE_INSTANCE'] == '1' else 0)")
    proc = exec_("--config", str(cfg), "--", sys.executable, "-c", code, "0")
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == ["0 2 1", "1 2 1"]
    # one failing copy is the command's status
    proc = exec_("--config", str(cfg), "--", sys.executable, "-c", code, "3")
    assert proc.returncode == 3 and len(proc.stdout.splitlines()) == 2
    # --instances 1: the command alone, in place of exec's process
    proc = exec_("--config", str(cfg), "--instances", "1", "--", sys.executable, "-c", "import os; print('ROOFTUNE_INSTANCE' in os.environ)")
    assert proc.returncode == 0 and proc.stdout.split() == ["False"]
    assert_one_line_error(exec_("--config", str(cfg), "--instances", "0", "--", "true"), "--instances 0", "1..1024")


@two_cores
def test_exec_pins_each_copy_of_a_pinned_configuration_to_cores_of_its_own(tmp_path: Path) -> None:
    """As PyTorch's launcher binds each of its --ninstances (the serving peer and a served setup
    of one pinned instance per core): two copies, two distinct cores, and a third refused."""
    from rooftune.platform.sysfs import one_cpu_per_core

    cores = one_cpu_per_core(sorted(os.sched_getaffinity(0)))
    cfg = tmp_path / "best.json"
    cfg.write_text(json.dumps({"config": RunConfig(intra_threads=1, instances=2, pin=True).to_dict()}))
    code = "import os; print(os.environ['ROOFTUNE_INSTANCE'], *sorted(os.sched_getaffinity(0)), flush=True)"
    proc = exec_("--config", str(cfg), "--", sys.executable, "-c", code)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == [f"0 {cores[0]}", f"1 {cores[1]}"]
    if len(cores) == 2:
        assert_one_line_error(exec_("--config", str(cfg), "--instances", "3", "--", "true"), "--instances 3",
                              "cores of its own")


@two_cores
def test_exec_forwards_a_signal_to_every_copy_and_reports_a_signalled_one(tmp_path: Path) -> None:
    import signal
    import time

    cfg = tmp_path / "best.json"
    cfg.write_text(json.dumps({"config": RunConfig(intra_threads=1, instances=2, batch=4).to_dict()}))
    killed = "import os, signal; os.kill(os.getpid(), signal.SIGTERM) if os.environ['ROOFTUNE_INSTANCE'] == '1' else None"
    assert exec_("--config", str(cfg), "--", sys.executable, "-c", killed).returncode == 128 + signal.SIGTERM
    # SIGTERM to exec (a service manager stopping it) stops both copies, and exec waits for them
    marks = tmp_path / "marks"
    marks.mkdir()
    code = ("import os, pathlib, time; d = pathlib.Path(os.sys.argv[1]); (d / os.environ['ROOFTUNE_INSTANCE']).touch(); "
            "time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-m", "rooftune.cli", "exec", "--config", str(cfg), "--", sys.executable,
                             "-c", code, str(marks)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(list(marks.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)  # the pipes close only when both copies are gone
    assert proc.returncode == 128 + signal.SIGTERM and time.monotonic() - t0 < 30, err


def test_exec_refuses_bad_configs_and_missing_commands(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"config": {"runtime": "eager", "intra_threads": 999}}))
    assert_one_line_error(exec_("--config", str(bad), "--", "true"), "intra_threads 999")
    good = tmp_path / "good.json"
    good.write_text(json.dumps(RunConfig().to_dict()))
    assert_one_line_error(exec_("--config", str(good), "--", "no-such-command-xyz"), "no-such-command-xyz", "not found")
    assert_one_line_error(exec_("--config", str(good)), "give the command after --")
    assert_one_line_error(exec_("--config", str(tmp_path / "none.json"), "--", "true"), "no such file")

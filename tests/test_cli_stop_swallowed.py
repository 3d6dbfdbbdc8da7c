"""A stop signal that lands where Python ignores exceptions is not lost."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

SCRIPT = r'''
import os, signal, subprocess, sys, time
from rooftune import cli

fired = []

def after_fork() -> None:
    # what a terminal's Ctrl-C does when it lands in the callbacks Python runs after a fork
    # (every trial's process start runs them): the KeyboardInterrupt raised there is ignored
    if not fired:
        fired.append(1)
        signal.raise_signal(signal.SIGINT)
        total = 0
        for i in range(10000):
            total += i

os.register_at_fork(after_in_parent=after_fork)

@cli.app.command("sleepy")
def sleepy() -> None:
    subprocess.run(["true"], preexec_fn=lambda: None, check=True)
    time.sleep(20)

sys.exit(cli.main(["sleepy"]))
'''


def test_a_stop_swallowed_after_a_fork_still_ends_the_command() -> None:
    started = time.monotonic()
    # a terminal's process gets SIGINT's default action; a suite started as a background job of a
    # shell script inherits SIGINT ignored, and so would the command
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == 130, proc.stderr
    assert "interrupted (SIGINT)" in proc.stderr
    assert time.monotonic() - started < 15  # not the command's 20 s sleep

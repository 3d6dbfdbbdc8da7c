"""The watchdog of one rooftune process: ends the process groups of its children once it ends,
however it ends (see :mod:`rooftune.platform.processes`). The kernel's parent-death signal
reaches a direct child only; what that child started (a shell's background jobs, a compiler's
workers) would go on under init.

Run as a script with the standard library alone (``python -I -S _watchdog.py PID``) in a process
group of its own, by the first child that process PID starts. It reads lines on stdin:

    + PGID START SIGNAL   end the group PGID when PID ends: SIGNAL first (its number), SIGKILL
                          GRACE_S later for what is left; START: the leader's start time, in
                          clock ticks since boot (/proc/PGID/stat)
    - PGID                PID ended that group itself

PID has ended when stdin reaches its end (the kernel closes a dead process's files) or the
watchdog's parent is no longer PID. A group that has emptied is dropped as soon as it is seen
to be (every POLL_S). A group number is not given to a new process while a process of the
group lives; once the group is empty it may be, so a group is signalled only while the process
of its number, where there is one, is the leader registered (its start time).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

#: Seconds between two looks at the parent and at the groups, while nothing is read.
POLL_S = 1.0
#: Seconds a group sent another signal than SIGKILL (the user's programs that ``rooftune exec``
#: ran get SIGTERM, to clean up) has before SIGKILL ends what is left of it.
GRACE_S = 5.0
#: Seconds between two looks at whether such groups have emptied.
GRACE_POLL_S = 0.05


def _start_time(pid: int) -> int | None:
    """Process ``pid``'s start time in clock ticks since boot; None where there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])  # the name, in parentheses, may hold spaces
    except (OSError, IndexError, ValueError):
        return None


def _ours(pgid: int, start: int) -> bool:
    """Whether group ``pgid`` is still the one registered: its number names no process, or the
    leader registered."""
    now = _start_time(pgid)
    return now is None or now == start


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal(pgid: int, start: int, sig: int) -> None:
    if _ours(pgid, start):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end(groups: dict[int, tuple[int, int]]) -> None:
    """Each group its signal, then SIGKILL for what is left of those given another after GRACE_S."""
    for pgid, (start, sig) in groups.items():
        _signal(pgid, start, sig)
    waiting = {g: v for g, v in groups.items() if v[1] != signal.SIGKILL}
    deadline = time.monotonic() + GRACE_S
    while waiting and time.monotonic() < deadline:
        time.sleep(GRACE_POLL_S)
        waiting = {g: v for g, v in waiting.items() if _alive(g)}
    for pgid, (start, _) in waiting.items():
        _signal(pgid, start, signal.SIGKILL)


def read(line: bytes, groups: dict[int, tuple[int, int]]) -> None:
    fields = line.split()
    try:
        if fields[0] == b"+" and len(fields) == 4:
            groups[int(fields[1])] = (int(fields[2]), int(fields[3]))
        elif fields[0] == b"-" and len(fields) == 2:
            groups.pop(int(fields[1]), None)
    except (IndexError, ValueError):
        pass


def main(argv: list[str]) -> int:
    parent = int(argv[1])
    # signals meant for rooftune (a terminal's, a group's) leave the watchdog to act after it
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    groups: dict[int, tuple[int, int]] = {}
    pending = b""
    stdin = sys.stdin.fileno()
    wait_s = POLL_S
    while True:
        ready, _, _ = select.select([stdin], [], [], wait_s)
        chunk = os.read(stdin, 65536) if ready else b""
        if ready and not chunk:  # every copy of the pipe's other end is closed
            break
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            read(line, groups)
        if chunk:
            continue
        if os.getppid() != parent:
            if wait_s:  # what PID wrote before it ended is read first, without waiting
                wait_s = 0
                continue
            break
        groups = {g: v for g, v in groups.items() if _alive(g)}
    end(groups)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))

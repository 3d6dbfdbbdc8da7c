"""The profiling worker: a long-lived subprocess that prepares and times a campaign's primitives,
so that one that crashes or hangs takes only this process down (the campaign stores it failed and
starts a fresh worker). Driven by :class:`rooftune.profiling.isolated.Isolated`.

Protocol: one JSON object per line on stdin, one answer per line on the protocol pipe (the
original stdout; fd 1 is pointed at stderr so that libraries printing cannot corrupt it).

    (once its imports are done, unasked)                -> {"ready": true}
    {"cmd": "spec", "spec": {...}, "threads": t}        -> {"ok": true}
        starts a spec at t threads (torch's intra-op threads); the last spec's kernels are dropped
    {"cmd": "prepare", "name": NAME}
        -> {"ok": true, "status": "ok"|"unsupported"|"failed", "reason": "...", "measurement": null}
        NAME: a primitive's registry name or "transform:NAME"; an ok one is kept for "measure"
    {"cmd": "measure", "name": NAME, "policy": {...}}
        -> {"ok": true, "status": ..., "reason": ..., "measurement": {...} (null unless ok)}
        timed by the harness (prepared first when it is not, as in a fresh worker)
    {"cmd": "probe", "threads": t|null}                 -> {"ok": true, "seconds": s}
        one reading of the machine-speed probe (at t threads when given)
    {"cmd": "exit"}
    any command that raises                             -> {"ok": false, "error": "Type: message"}

Modules named in ``ROOFTUNE_TEST_PRIMITIVES`` are imported before the first answer (for tests:
primitives made to crash or hang).
"""

from __future__ import annotations

import json
import os
import sys

from rooftune.platform.processes import answer, protocol_pipe


def main() -> int:
    pipe = protocol_pipe()
    import torch

    from rooftune.bench import Policy
    from rooftune.bench.canary import Canary
    from rooftune.errors import one_line
    from rooftune.primitives import ConvSpec, Primitive, get_primitive
    from rooftune.profiling.work import SpecWork, load_test_primitives

    load_test_primitives()
    primitives: dict[str, Primitive] = {}

    def lookup(name: str) -> Primitive:  # one instance per name for the worker's life, as in a campaign
        if name not in primitives:
            primitives[name] = get_primitive(name)
        return primitives[name]

    def threads(t: int) -> None:
        if torch.get_num_threads() != t:
            torch.set_num_threads(t)

    work: SpecWork | None = None
    probe: Canary | None = None
    answer(pipe, {"ready": True})
    for line in sys.stdin:
        msg = json.loads(line)
        cmd = msg.get("cmd")
        try:
            if cmd == "spec":
                work = None  # the last spec's kernels go before this one's are made
                threads(int(msg["threads"]))
                work = SpecWork(ConvSpec.from_dict(msg["spec"]), int(msg["threads"]), lookup)
                answer(pipe, {"ok": True})
            elif cmd in ("prepare", "measure"):
                if work is None:
                    raise ValueError(f"{cmd} before a spec")
                name = msg["name"]
                out = work.prepare(name) if cmd == "prepare" else work.measure(name, Policy(**msg["policy"]))
                m = out.measurement
                answer(pipe, {"ok": True, "status": out.status, "reason": out.reason,
                               "measurement": m.to_dict() if m is not None else None})
            elif cmd == "probe":
                if msg.get("threads"):
                    threads(int(msg["threads"]))
                probe = probe or Canary()
                answer(pipe, {"ok": True, "seconds": probe.read()})
            elif cmd == "exit":
                return 0
            else:
                answer(pipe, {"ok": False, "error": f"unknown command {cmd!r}"})
        except Exception as exc:  # the parent records the item failed and goes on
            answer(pipe, {"ok": False, "error": f"{type(exc).__name__}: {one_line(exc)}"})
    return 0


if __name__ == "__main__":
    code = main()
    # Nothing is left to write; torch's teardown only costs time.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

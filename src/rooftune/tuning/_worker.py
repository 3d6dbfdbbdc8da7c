"""A trial's subprocess: prepares one configuration, checks its output, and times it on request.

Protocol: one JSON object per line on stdin, one answer per line on the protocol pipe (the
original stdout; fd 1 is pointed at stderr so that libraries printing cannot corrupt it).

    {"cmd": "init", "workload": {...}, "config": {...}, "reference": path, "inputs": path, "workdir": path,
     "verified": bool}
        -> {"ok": true, "prepare_s": ..., "repeat_s": ..., "verify": {...}} | {"ok": false, "error": "..."}
    {"cmd": "measure", "policy": {...}}   -> {"ok": true, "measurement": {...}}
    {"cmd": "sample", "number": n, "warmup": w} -> {"ok": true, "seconds": per-call time of n calls after w untimed}
    {"cmd": "slots", "count": k | null} -> {"ok": true, "slots": k}: k threads serving calls side by side (null:
        as many as the runtime recommends, one where it has no streams); then, any number outstanding,
    {"cmd": "call", "slot": s}          -> {"ok": true, "slot": s, "seconds": the call's time}, answered by the slot
    {"cmd": "exit"}
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from rooftune.errors import one_line
from rooftune.platform.processes import answer, protocol_pipe


def main() -> int:
    pipe = protocol_pipe()
    prepared = None
    slots: list[queue.SimpleQueue[int]] = []
    for line in sys.stdin:
        msg = json.loads(line)
        cmd = msg.get("cmd")
        try:
            if cmd == "init":
                prepared, info = _init(msg)
                answer(pipe, {"ok": True, **info})
            elif cmd == "measure":
                from rooftune.bench import Policy, measure

                assert prepared is not None
                m = measure(prepared.run, label=msg.get("label", "trial"), policy=Policy(**msg["policy"]),
                            params=msg.get("params", {}))
                answer(pipe, {"ok": True, "measurement": m.to_dict()})
            elif cmd == "sample":
                assert prepared is not None
                n = int(msg.get("number", 1))
                for _ in range(int(msg.get("warmup", 0))):
                    prepared.run()
                t0 = time.perf_counter()
                for _ in range(n):
                    prepared.run()
                answer(pipe, {"ok": True, "seconds": (time.perf_counter() - t0) / n})
            elif cmd == "slots":
                assert prepared is not None
                slots = _start_slots(prepared, msg.get("count"), pipe)
                answer(pipe, {"ok": True, "slots": max(1, len(slots))})
            elif cmd == "call":
                slot = msg.get("slot")
                if not isinstance(slot, int) or not 0 <= slot < max(1, len(slots)):
                    raise ValueError(f"no slot {slot!r}")
                if slots:
                    slots[slot].put(1)
                else:  # one slot: called on this thread, as `sample` calls it (see _start_slots)
                    _call(prepared.run, 0, pipe)
            elif cmd == "exit":
                return 0
            else:
                answer(pipe, {"ok": False, "error": f"unknown command {cmd!r}"})
        except Exception as exc:  # the trial failed; the parent records it and goes on
            with _ANSWERING:  # (whole lines: slots may be answering beside this thread)
                answer(pipe, {"ok": False, "error": f"{type(exc).__name__}: {one_line(exc)}",
                               "traceback": traceback.format_exc(limit=5)})
    return 0


#: Answers of slots serving side by side are written one whole line at a time.
_ANSWERING = threading.Lock()


def _start_slots(prepared: Any, count: int | None, pipe: Any) -> list[queue.SimpleQueue[int]]:
    """Threads that each run the prepared model when told (``{"cmd": "call"}``), each on its own
    infer request where the runtime needs one per concurrent call (OpenVINO's streams); ``count``
    None: the runtime's recommended number of concurrent calls, else one."""
    n = max(1, int(count) if count is not None else int(prepared.slots or 1))
    queues: list[queue.SimpleQueue[int]] = []
    if n == 1:
        # One slot runs on the main thread, where the model was prepared and `sample` times it:
        # PyTorch called from another thread starts another OpenMP team, which runs slower
        # (BENCHMARKS.md's history, serving scenarios)
        return queues
    for s in range(n):
        run = prepared.fork() if prepared.fork is not None else prepared.run
        q: queue.SimpleQueue[int] = queue.SimpleQueue()
        queues.append(q)

        def serve(s: int = s, q: queue.SimpleQueue[int] = q, run: Any = run) -> None:
            while q.get():
                _call(run, s, pipe)

        threading.Thread(target=serve, daemon=True).start()
    return queues


def _call(run: Any, slot: int, pipe: Any) -> None:
    """One call of a slot, answered with its time (or its error: the load generator ends the run)."""
    t0 = time.perf_counter()
    try:
        run()
        msg = {"ok": True, "slot": slot, "seconds": time.perf_counter() - t0}
    except Exception as exc:
        msg = {"ok": False, "slot": slot, "error": f"{type(exc).__name__}: {one_line(exc)}"}
    with _ANSWERING:
        answer(pipe, msg)


def load_for(config: Any, w: dict[str, Any], inputs: str | None = None, workdir: str | None = None,
             interop: bool = True) -> tuple[Any, Any]:
    """What a process running ``config`` does first: torch's thread pools as configured (before any
    parallel work), then the workload and the runtime; ValueError when the runtime cannot run it.

    With the study's saved ``inputs`` and a runtime that will load its artifact from ``workdir``
    (ONNX Runtime, OpenVINO after their first trial), the model is not built: only its inputs are
    loaded. Importing torchvision's models and building one took ~2 of a process's ~4-5 s start.
    ``interop=False`` leaves torch's inter-op pool to the caller (a process where it may already run)."""
    import torch

    from rooftune.runtimes import get_runtime
    from rooftune.workload import load_workload
    from rooftune.workload.imports import import_modules

    if config.set_threads:
        torch.set_num_threads(config.intra_threads)
        if interop and torch.get_num_interop_threads() != config.inter_threads:  # settable once per process
            torch.set_num_interop_threads(config.inter_threads)
    runtime = get_runtime(config.runtime)
    why = runtime.unsupported(config)
    if why:
        raise ValueError(why)
    if inputs and workdir and runtime.artifact_ready(config, Path(workdir)):
        from rooftune.workload import Workload

        xs = tuple(torch.load(inputs))
        return Workload(w["model"], "prepared artifact", _not_built(), xs, dict(w.get("options") or {})), runtime
    train = None
    if w.get("train"):
        from rooftune.workload.training import TrainSpec

        train = TrainSpec(**w["train"])
        why = runtime.unsupported_train(config)
        if why:
            raise ValueError(why)
    # a model's file naming types its package registers when imported (transformers' outputs)
    import_modules(w.get("imports"))
    wl = load_workload(w["model"], batch=config.batch, inputs=w.get("inputs"), options=w.get("options"), check=False,
                       train=train)
    return wl, runtime


def _not_built() -> Any:
    import torch

    class NotBuilt(torch.nn.Module):
        """Stands for the model in a process that runs a prepared artifact: calling it is a bug."""

        def forward(self, *args: Any) -> Any:
            raise RuntimeError("the model was not built in this process: it runs the prepared artifact")

    return NotBuilt()


def _init(msg: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    from rooftune.runconfig import RunConfig, pinned_cpus

    if msg["config"].get("pin"):
        # bound before torch starts its OpenMP pool, whose threads inherit the mask
        os.sched_setaffinity(0, pinned_cpus(int(msg["config"].get("intra_threads", 1)), int(msg.get("instance", 0))))
    import torch

    from rooftune.tuning.verify import check_on_data, check_prepared

    config = RunConfig(**msg["config"])
    wl, runtime = load_for(config, msg["workload"], msg.get("inputs"), msg["workdir"])
    if wl.train is not None:
        return _init_train(wl, runtime, config, msg)
    # int8 is calibrated and guarded on the calibration set (inputs and their fp32 eager outputs).
    calib = torch.load(msg["calibration"]) if msg.get("calibration") and config.precision == "int8" else None
    evaluation_file = Path(msg["workdir"]) / f"evaluation-b{config.batch}.pt"
    evaluation = torch.load(evaluation_file) if evaluation_file.exists() else None
    t0 = time.perf_counter()
    prepared = runtime.prepare(wl, config, Path(msg["workdir"]), calibration=calib["inputs"] if calib else (),
                               evaluation=evaluation)
    out = prepared.output()
    prepare_s = time.perf_counter() - t0
    # a runtime left to choose its precision is checked by the rule of the one it chose
    precision = prepared.precision or config.precision
    verify = check_prepared(prepared, precision, tuple(wl.inputs), torch.load(msg["reference"]),
                            calib, msg.get("validate"), out=out)
    if evaluation is not None:  # the user's data: a reduced precision is judged by its metric there
        verify = check_on_data(prepared, precision, verify, evaluation)
    return prepared, {
        "prepare_s": prepare_s, "verify": verify, "precision": precision,
        "artifact": str(prepared.artifact) if prepared.artifact else None,
        "threads": torch.get_num_threads(),
    }


def _init_train(wl: Any, runtime: Any, config: Any, msg: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """A training configuration: its step built, its first steps checked against vanilla fp32
    training (tuning/verify.py), then timed step by step like an inference. A configuration whose
    trial passed the check in this study (``verified``: a final comparison's process) runs one
    untimed step instead, which builds what the first step builds (torch.compile's graphs, the
    optimizer's state) as the checked steps do.

    ``repeat_s``: what a later process of this configuration spends again before it is timed
    (building the step and its first step), which the study counts in a comparison's start."""
    import torch

    from rooftune.tuning.verify import check_training

    t0 = time.perf_counter()
    prepared = runtime.prepare_train(wl, config, Path(msg["workdir"]))
    built_s = time.perf_counter() - t0
    if msg.get("verified"):
        t1 = time.perf_counter()
        prepared.run()
        first_s = time.perf_counter() - t1
        verify = {"ok": True, "rule": "checked by this configuration's trial in this study", "why": ""}
    else:
        verify = check_training(prepared.step, config.precision, torch.load(msg["reference"]))
        verify.pop("losses", None)
        first_s = verify.pop("first_step_s")
    return prepared, {"prepare_s": time.perf_counter() - t0, "verify": verify, "precision": config.precision,
                      "artifact": None, "threads": torch.get_num_threads(), "repeat_s": built_s + first_s}


if __name__ == "__main__":
    code = main()
    # Everything the trial writes (artifacts, answers) is written and closed by now; the
    # interpreter's teardown of torch, ONNX Runtime and OpenVINO only costs 0.5-1.5 s per process,
    # and a study starts dozens of them.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

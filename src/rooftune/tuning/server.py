"""A configuration set up to serve requests: its instances (worker processes, prepared and their
outputs checked like any trial's), each serving one or more *slots* side by side (a runtime's
streams: OpenVINO's infer requests), every slot a blocking call the load generator
(:func:`rooftune.bench.serving.run_load`) drives from a thread of its own."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable
from typing import Any

from rooftune.runconfig import RunConfig
from rooftune.tuning.trial import PREPARE_TIMEOUT_S, Group, TrialFailed, Worker

#: Time one call of a slot may take before the run is abandoned (a hung runtime).
CALL_TIMEOUT_S = 120.0


class _Slots:
    """One worker's slots: calls sent on its stdin, answers read by one thread of this process
    and handed to the slot's caller (several calls are outstanding at once, so no caller may read
    the pipe itself)."""

    def __init__(self, worker: Worker, count: int | None) -> None:
        self.worker = worker
        self.count = int(worker.call({"cmd": "slots", "count": count}, PREPARE_TIMEOUT_S)["slots"])
        self.answers: list[queue.SimpleQueue[dict[str, Any]]] = [queue.SimpleQueue() for _ in range(self.count)]
        self.sending = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        why = "the serving process ended"
        try:
            out = self.worker.proc.stdout
            assert out is not None
            for line in out:
                msg = json.loads(line)
                slot = msg.get("slot")
                if not isinstance(slot, int) or not 0 <= slot < self.count:  # no slot's: the process failed
                    why = f"the serving process answered out of turn: {msg.get('error', msg)}"
                    break
                self.answers[slot].put(msg)
            why += f" ({self.worker._last_stderr()})"
        except Exception:  # (the pipes closed under us: the server is being closed)
            pass
        for q in self.answers:  # whoever waits is told
            q.put({"ok": False, "error": why})

    def call(self, slot: int) -> Callable[[int], None]:
        def run(k: int) -> None:  # k requests padded into the configuration's batch
            with self.sending:
                self.worker.send({"cmd": "call", "slot": slot})
            try:
                msg = self.answers[slot].get(timeout=CALL_TIMEOUT_S)
            except queue.Empty:
                raise TrialFailed(f"a serving call timed out after {CALL_TIMEOUT_S:.0f} s") from None
            if not msg.get("ok"):
                raise TrialFailed(str(msg.get("error", "the call failed")))

        return run


class Server:
    """``config``'s instances started and prepared (a :class:`Group`), their outputs checked, and
    ``streams`` slots in each (None: as many as the runtime recommends, one where it has no
    streams of its own). :attr:`slots` are the load generator's; :attr:`info` the first
    instance's answer to its preparation (precision, verification). A failed check raises
    :class:`TrialFailed`: a configuration that computes wrong is never served."""

    def __init__(self, group: Group, streams: int | None = None) -> None:
        self.group = group
        self.config: RunConfig = group.config
        try:
            group.ready()
            for w in group.workers:  # every instance checked its own output
                verify = w.ready()["verify"]
                if not verify["ok"]:
                    raise TrialFailed(f"wrong output: {verify['why']}")
            self._slots = [_Slots(w, streams) for w in group.workers]
        except BaseException:
            group.close(kill=True)
            raise
        self.slots = [s.call(i) for s in self._slots for i in range(s.count)]

    @property
    def info(self) -> dict[str, Any]:
        return self.group.info

    @property
    def streams(self) -> int:
        return self._slots[0].count

    def pause(self) -> None:
        self.group.pause()

    def resume(self) -> None:
        self.group.resume()

    def close(self) -> None:
        self.group.close(kill=True)  # its slots may be mid-call: nothing to wait for

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

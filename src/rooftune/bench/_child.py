"""Child side of :func:`rooftune.bench.measure_isolated`: read a request line on stdin, answer
with a Measurement line (what the timed code prints goes to stderr: :func:`protocol_pipe`)."""

from __future__ import annotations

import json
import sys

from rooftune.bench.measurement import Policy
from rooftune.bench.timer import measure
from rooftune.platform.processes import answer, import_user_module, protocol_pipe


def _child_main() -> int:
    pipe = protocol_pipe()
    request = json.loads(sys.stdin.readline())
    module_name, _, attr = request["target"].partition(":")
    factory = getattr(import_user_module(module_name), attr)
    fn = factory(**request["kwargs"])
    m = measure(
        fn,
        label=request["label"],
        params=request["params"],
        policy=Policy(**request["policy"]),
        platform_id=request["platform_id"],
    )
    answer(pipe, m.to_dict())
    return 0


if __name__ == "__main__":
    raise SystemExit(_child_main())

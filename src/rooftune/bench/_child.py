"""Child side of :func:`rooftune.bench.measure_isolated`: read a request on stdin, print a Measurement."""

from __future__ import annotations

import json
import sys

from rooftune.bench.measurement import Policy
from rooftune.bench.timer import measure
from rooftune.fileio import pipe_json
from rooftune.platform.processes import import_user_module


def _child_main() -> int:
    request = json.loads(sys.stdin.read())
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
    sys.stdout.write("\n" + pipe_json(m.to_dict()) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(_child_main())

"""Fuzz every parser of outside input with 10,000 examples per property (target: >= 10,000 per
parser, none failing).

The properties are the suite's own (tests/fuzz/, hypothesis): run configurations and best.json,
store URLs and their redaction, ``data import`` rows and fingerprints, ``.rtmodel`` headers and
bodies, the command line's shapes, options and ranges. The suite runs each with a few dozen
examples; this runs each with the ``thorough`` profile and prints, per property, the examples
hypothesis ran and whether it passed.

    python benchmarks/fuzz_parsers.py [--examples N] [-k EXPR]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=10_000, help="examples per property (default 10,000)")
    ap.add_argument("-k", default=None, help="pytest -k expression: a subset of the properties")
    a = ap.parse_args()
    env = {**os.environ, "ROOFTUNE_FUZZ_PROFILE": "thorough", "ROOFTUNE_FUZZ_EXAMPLES": str(a.examples)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "--timeout", "0",
           "--hypothesis-show-statistics", "tests/fuzz", *(["-k", a.k] if a.k else [])]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    # hypothesis's statistics: "tests/fuzz/test_x.py::test_y:", then under "- during generate phase"
    # a line "- N passing, N failing, and N invalid test cases"
    rows, current = [], None
    for line in proc.stdout.splitlines():
        m = re.match(r"^(tests/fuzz/\S+::\S+):$", line.strip())
        if m:
            current = m.group(1)
            continue
        m = re.search(r"(\d+) passing, (\d+) failing, and (\d+) invalid", line)
        if m and current:
            rows.append((current, int(m.group(1)), int(m.group(2)), int(m.group(3))))
            current = None
    width = max((len(r[0]) for r in rows), default=20)
    print(f"{'property':<{width}}  passing  failing  invalid")
    for name, ok, bad, invalid in rows:
        print(f"{name:<{width}}  {ok:>7}  {bad:>7}  {invalid:>7}")
    total = sum(r[1] for r in rows)
    tail = [ln for ln in proc.stdout.splitlines() if ln.strip()][-1:] or ["(no pytest summary)"]
    print(f"{len(rows)} properties, {total} passing examples in {elapsed:.0f} s; pytest: {tail[0]}")
    if proc.returncode != 0:
        print(proc.stdout[-6000:], proc.stderr[-2000:], sep="\n")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())

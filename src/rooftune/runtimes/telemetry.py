"""OpenVINO's and NNCF's usage telemetry, kept off in the processes rooftune runs them in.

``openvino.convert_model`` (its model converter) and ``nncf.quantize`` each send usage events to
Google Analytics through the ``openvino_telemetry`` package, on by default: with no consent file
(``~/intel/openvino_telemetry``, which ``opt_in_out --opt_out`` or ``--opt_in`` writes) they send.
The package reads no environment variable to opt out (checked in openvino_telemetry 2025.2:
only a CI's variables, which would mean more than that to other tools). So, where the user has
made no choice (no consent file):

* ``openvino_telemetry`` is made unimportable in this process; both vendors treat a missing
  package as no telemetry (OpenVINO's converter falls back to its stub, NNCF to its own);
* ``NNCF_CI`` is set, which NNCF (2.x-3.x) reads for one thing, to replace its telemetry with a
  stub; it carries to the processes rooftune starts (trial workers) before they import NNCF.

A consent file the user wrote is theirs and is left to decide, as is an ``NNCF_CI`` already set.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from platform import system

#: NNCF's variable that, set to anything, replaces its telemetry with a stub (nncf/telemetry/wrapper.py).
NNCF_OPT_OUT = "NNCF_CI"
#: The package both vendors send their events through.
TELEMETRY_PACKAGE = "openvino_telemetry"


def consent_file() -> Path | None:
    """Where ``opt_in_out`` records the user's choice (as openvino_telemetry looks for it)."""
    if system() == "Windows":
        base = os.environ.get("LOCALAPPDATA")
        return Path(base) / "Intel Corporation" / "openvino_telemetry" if base else None
    return Path.home() / "intel" / "openvino_telemetry"


def quiet_vendor_telemetry() -> None:
    """Keep OpenVINO's and NNCF's telemetry off in this process and its children, unless the
    user chose for themselves (a consent file). Call before ``openvino`` or ``nncf`` is
    imported; calling it again changes nothing."""
    try:
        chosen = (f := consent_file()) is not None and f.exists()
    except (OSError, RuntimeError):  # no home directory to look in: nothing was chosen there
        chosen = False
    if chosen:
        return
    os.environ.setdefault(NNCF_OPT_OUT, "1")
    # None in sys.modules makes `import openvino_telemetry` raise ImportError (the import
    # system's documented rule), the case both vendors handle by sending nothing.
    sys.modules.setdefault(TELEMETRY_PACKAGE, None)  # type: ignore[arg-type]


__all__ = ["NNCF_OPT_OUT", "TELEMETRY_PACKAGE", "consent_file", "quiet_vendor_telemetry"]

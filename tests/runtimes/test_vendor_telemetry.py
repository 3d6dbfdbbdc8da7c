"""OpenVINO's and NNCF's usage telemetry is off once rooftune's OpenVINO runtime is imported,
unless the user chose for themselves (their consent file, or NNCF_CI already set)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: A fresh interpreter: nothing imported before rooftune's runtime, as in a command or a trial worker.
PROBE = (
    "import importlib, json, os, sys\n"
    "import rooftune.runtimes.openvino_runtime\n"
    "try:\n"
    "    importlib.import_module('openvino_telemetry')\n"
    "    importable = True\n"
    "except ImportError:\n"
    "    importable = False\n"
    "print(json.dumps({'nncf_ci': os.environ.get('NNCF_CI'), 'telemetry_importable': importable}))\n"
)


def _probe(home: Path, **env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if k not in ("NNCF_CI", "PYTEST_CURRENT_TEST")}
    proc = subprocess.run([sys.executable, "-c", PROBE], env={**clean, "HOME": str(home), **env},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_opt_outs_are_set_where_the_user_chose_nothing(tmp_path: Path) -> None:
    assert _probe(tmp_path) == {"nncf_ci": "1", "telemetry_importable": False}


@pytest.mark.parametrize("answer", ["0", "1"])
def test_a_consent_file_the_user_wrote_decides(tmp_path: Path, answer: str) -> None:
    (tmp_path / "intel").mkdir()
    (tmp_path / "intel" / "openvino_telemetry").write_text(answer)
    assert _probe(tmp_path) == {"nncf_ci": None, "telemetry_importable": True}


def test_an_nncf_setting_of_the_users_is_kept(tmp_path: Path) -> None:
    assert _probe(tmp_path, NNCF_CI="yes")["nncf_ci"] == "yes"


def test_a_converted_model_is_converted_without_the_telemetry_package(tmp_path: Path) -> None:
    """The vendors' own fallback (no telemetry package) still converts a model."""
    code = ("import rooftune.runtimes.openvino_runtime\n"
            "import openvino as ov, torch\n"
            "m = ov.convert_model(torch.nn.Linear(2, 3), example_input=torch.zeros(1, 2))\n"
            "import openvino.tools.ovc.telemetry_utils as t\n"
            "print(t.tm.__name__, m.outputs[0].get_partial_shape())\n")
    clean = {k: v for k, v in os.environ.items() if k != "NNCF_CI"}
    proc = subprocess.run([sys.executable, "-c", code], env={**clean, "HOME": str(tmp_path)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "openvino.tools.ovc.telemetry_stub" and ",3]" in proc.stdout

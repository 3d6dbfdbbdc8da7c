"""A run configuration is read and checked by :mod:`rooftune.runconfig` alone: the runtimes'
options are declared below it, so no runtime (nor torch) has to be imported first; and the
runtimes take their options from that same declaration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rooftune.errors import InvalidArgument
from rooftune.runtime_options import RUNTIME_OPTIONS


def test_a_configuration_is_read_without_importing_a_runtime(tmp_path: Path) -> None:
    path = tmp_path / "best.json"
    path.write_text(json.dumps({"config": {"runtime": "onnxruntime", "intra_threads": 1,
                                           "runtime_options": {"spinning": False}}}))
    script = f"""
import sys
from rooftune.runconfig import RunConfig, load_config
cfg = RunConfig.from_dict({{"runtime": "openvino", "intra_threads": 2, "runtime_options": {{"streams": 2}}}},
                          usable_cores=2)
assert cfg.option("hint") == "LATENCY" and cfg.option("streams") == 2
assert load_config({str(path)!r}, usable_cores=1).option("spinning") is False
try:
    RunConfig.from_dict({{"runtime": "nope"}}, usable_cores=2)
except Exception as exc:
    print(exc)
print("torch" in sys.modules, "rooftune.runtimes" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    assert lines[0] == ("invalid runtime 'nope': allowed eager, torchscript, compile, onnxruntime, openvino, "
                        "ncnn, tensorflow")
    assert lines[1] == "False False"


def test_every_runtime_takes_its_options_from_the_one_declaration() -> None:
    from rooftune.runtimes import RUNTIMES

    assert list(RUNTIMES) == list(RUNTIME_OPTIONS)
    for name, runtime in RUNTIMES.items():
        declared = RUNTIME_OPTIONS[name]
        assert runtime.name == name
        assert (runtime.options, runtime.absent, runtime.train_options, runtime.peer_options) == (
            dict(declared.options), dict(declared.absent), dict(declared.train_options), dict(declared.peer_options))
        # every searched and every peer's option has what a configuration without it runs
        choices = {**declared.options, **declared.peer_options}
        assert set(declared.absent) == set(choices)
        assert all(declared.absent[k] in choices[k] for k in choices)


def test_a_training_option_is_a_configurations_option_of_a_runtime_that_trains() -> None:
    from rooftune.runconfig import RunConfig

    assert RunConfig.from_dict({"runtime": "compile", "runtime_options": {"optimizer": "fused"}},
                               usable_cores=1).option("optimizer") == "fused"
    with pytest.raises(InvalidArgument, match="allowed none: it has no options of its own"):
        RunConfig.from_dict({"runtime": "torchscript", "runtime_options": {"optimizer": "fused"}}, usable_cores=1)

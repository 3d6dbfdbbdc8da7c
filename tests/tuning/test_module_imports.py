"""A module object tuned through the Python API runs in the trials' processes, whose exported
program names types its package registers when imported (a transformers model's output classes);
and a study whose trials all fail says why, each error once with its count, in the exception, the
commands' output, ``summary.json`` and the report."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import rooftune.tuning.compare as final
import rooftune.tuning.phases as phases
import rooftune.tuning.study as study
from rooftune.bench import Policy
from rooftune.errors import RooftuneError, WorkloadError
from rooftune.tuning import NoVerifiedTrial, RunConfig, TrialResult, tune
from rooftune.tuning.result import failure_groups, failures_text
from rooftune.workload import load_workload
from rooftune.workload.exported import export_imports, export_module_file
from rooftune.workload.imports import import_modules
from tests.test_cli import rooftune_in_process
from tests.test_optimize import store_with_ceilings

CNN = "tests.analysis.tiny_models:small_cnn"
FAST = Policy(number=1, warmup_s=0.05, budget_s=0.3, min_samples=6, max_samples=60)
#: The Python API's call as the README shows it for an nn.Module, with few processes: the
#: guideline and vanilla PyTorch in fp32, compared on one pair of processes.
SMALL = dict(runtimes=["eager"], guidelines_only=True, precisions=("fp32",), trial_policy=FAST, compare_policy=FAST,
             compare_pairs=1, budget_s=60)


@pytest.fixture(scope="module")
def bert() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """A small BertForSequenceClassification with random weights, its token ids and mask."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                     vocab_size=100, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config).eval()
    ids = torch.randint(0, 100, (1, 16))
    return model, ids, torch.ones(1, 16, dtype=torch.long)


def test_a_transformers_model_given_as_a_module_runs_and_verifies_in_the_trials(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bert: Any) -> None:
    m, ids, mask = bert
    # the guideline's trial alone (each process imports transformers), its comparison not timed
    monkeypatch.setattr(phases, "baselines", lambda *a, **k: [])
    monkeypatch.setattr(final, "interleaved", lambda a, b, setup, objective, policy, pairs=None: {
        "ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0, "pairs": 1})
    save = tmp_path / "out" / "best.json"
    r = tune(m, example_inputs=(ids,), example_kwargs={"attention_mask": mask}, store=str(tmp_path / "t.db"),
             save=str(save), **SMALL)
    ran = [t for t in r.trials if t.ok]
    assert ran and all(t.verify["ok"] for t in ran), [(t.config.name, t.error) for t in r.trials]
    # the best's output, in its trial's process, against the program's in this one, which is the module's
    assert r.best.ok and r.best.verify["ok"] and r.best.verify["max_rel"] < 1e-4, r.best.verify
    with torch.no_grad():
        assert torch.allclose(torch.export.load(r.model).module()(ids, attention_mask=mask).logits,
                              m(ids, attention_mask=mask).logits, atol=1e-5)
    # the saved configuration names what a process imports before it loads the file
    assert "transformers.modeling_outputs" in json.loads(save.read_text())["workload"]["imports"]


def test_an_export_names_the_installed_modules_of_its_types_never_a_local_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bert: Any) -> None:
    m, ids, mask = bert
    monkeypatch.chdir(Path(__file__).parents[2])  # the folder this test module is imported from
    wl = load_workload(str(export_module_file(m, (ids,), {"attention_mask": mask}, tmp_path)))
    # the model's own module first, then those of its submodules' classes and of its outputs
    assert wl.imports[0] == "transformers.models.bert.modeling_bert"
    assert "transformers.modeling_outputs" in wl.imports
    assert not [n for n in wl.imports if n.split(".")[0] in ("torch", "builtins", "rooftune")]
    # a class from a file of the working directory (this test module's) is never named
    local = torch.nn.Sequential(Local())
    ep = torch.export.load(str(export_module_file(local, (torch.ones(2),), None, tmp_path)))
    assert export_imports(ep) == ()


class Local(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def test_import_modules_imports_an_installed_module_never_one_of_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "rooftune_local_probe.py").write_text("raise RuntimeError('imported from the working directory')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    import_modules(["rooftune_local_probe", "colorsys", "no_such_package.mod", "not a name", 3])
    assert "rooftune_local_probe" not in sys.modules
    assert "colorsys" in sys.modules


def test_a_pt2_naming_a_type_not_registered_here_says_which(tmp_path: Path) -> None:
    """torch logs why a program does not load and raises a generic error: the one line names the type."""
    import dataclasses

    import torch.utils._pytree as pytree

    @dataclasses.dataclass
    class Out:
        y: torch.Tensor

    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> Out:
            return Out(x * 2)

    pytree.register_dataclass(Out, serialized_type_name="rooftune_probe.Out")
    try:
        torch.export.save(torch.export.export(Net(), (torch.ones(2),)), tmp_path / "out.pt2")
    finally:
        pytree._deregister_pytree_node(Out)
    with pytest.raises(WorkloadError) as info:
        load_workload(str(tmp_path / "out.pt2"))
    msg = str(info.value)
    assert "its torch.export program does not load here" in msg and "module:callable" in msg and "\n" not in msg
    assert "Deserializing rooftune_probe.Out in pytree is not registered" in msg


def test_a_study_whose_trials_fail_in_their_processes_names_each_error_with_its_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model that raises when built in a trial's process: its trial fails there (the guideline's
    alone: the baselines fail the same way), and the study's error says how."""
    monkeypatch.setattr(phases, "baselines", lambda *a, **k: [])
    with pytest.raises(NoVerifiedTrial) as info:
        tune("tests.analysis.tiny_models:built_outside_trials", store=str(tmp_path / "t.db"), **SMALL)
    [(n, error)] = info.value.failures
    assert n == 1 and error.startswith("WorkloadError: ") and "built inside a trial" in error, info.value.failures
    assert str(info.value) == f"no configuration ran and verified: 1 trial: {error}"


def test_failures_are_grouped_by_message_most_frequent_first() -> None:
    cfg = RunConfig(runtime="eager")
    trials = [TrialResult(cfg, False, error=e) for e in ("b", "a", "a", "c", "d", "e")] + [TrialResult(cfg, True)]
    groups = failure_groups(trials)
    assert groups == ((2, "a"), (1, "b"), (1, "c"), (1, "d"), (1, "e"))
    assert failures_text(groups) == "2 trials: a; 1 trial: b; 1 trial: c; and 2 other errors in 2 trials"
    e = NoVerifiedTrial(groups[:1])
    import pickle

    again = pickle.loads(pickle.dumps(e))  # raised on a cluster's node, read back on the lead
    assert again.failures == e.failures and str(again) == str(e) == "no configuration ran and verified: 2 trials: a"
    assert str(NoVerifiedTrial((), ("fp32",))) == "no configuration ran and verified in fp32"


LOAD_ERROR = ("WorkloadError: model '/out/model.pt2': its torch.export program does not load here: NotImplementedError: "
              "Deserializing pkg.Output in pytree is not registered.")


@pytest.fixture
def failing_trials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every trial fails: vanilla's process crashes, the guideline and two other baselines fail to
    load the model; no search (the budget is not spent asking)."""
    def fake_evaluate(cfg, setup, policy, prepare_timeout_s=0.0):  # type: ignore[no-untyped-def]
        error = "the trial process crashed (exit 1): boom" if cfg.name == "vanilla" else LOAD_ERROR
        return TrialResult(cfg, False, error=error)

    monkeypatch.setattr(study, "_evaluate", fake_evaluate)
    monkeypatch.setattr(phases, "baselines", lambda *a, **k: [
        RunConfig(runtime="eager", set_threads=False, name="vanilla"),
        RunConfig(runtime="eager", intra_threads=1, name="b1"),
        RunConfig(runtime="eager", intra_threads=1, memory_format="channels_last", name="b2")])
    monkeypatch.setattr(study.Study, "_search", lambda self: None)

    def no_analysis(*args: Any, **kwargs: Any) -> None:  # the steps before the tuning kept short
        raise RooftuneError("left out in this test")

    monkeypatch.setattr("rooftune.analysis.analyze", no_analysis)


def test_rooftune_tune_prints_the_trials_errors_grouped(tmp_path: Path, failing_trials: None) -> None:
    proc = rooftune_in_process("tune", CNN, "--runtime", "eager", "--fp32", "--guidelines-only",
                               db=tmp_path / "t.db")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    text = " ".join(proc.stderr.split())
    assert f"no configuration ran and verified: 3 trials: {LOAD_ERROR}; 1 trial: the trial process crashed" in text


def test_a_failed_tune_step_shows_its_trials_errors_in_the_summary_the_report_and_the_terminal(
        tmp_path: Path, failing_trials: None) -> None:
    db = store_with_ceilings(tmp_path / "r.db")
    out = tmp_path / "out"
    proc = rooftune_in_process("optimize", CNN, "--runtime", "eager", "--fp32", "--skip", "select", "--budget", "60",
                               "--out", str(out), db=db)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    [step] = [s for s in summary["steps"] if s["name"] == "tune"]
    assert step["status"] == "failed"
    assert step["errors"] == [{"trials": 3, "error": LOAD_ERROR},
                              {"trials": 1, "error": "the trial process crashed (exit 1): boom"}]
    assert step["message"].startswith(f"no configuration ran and verified: 3 trials: {LOAD_ERROR}")
    import html

    page = html.unescape((out / "report.html").read_text())
    assert "The trials' errors" in page
    assert f"<td class=n>3</td><td>{LOAD_ERROR}</td>" in page
    assert "<td class=n>1</td><td>the trial process crashed (exit 1): boom</td>" in page
    terminal = proc.stdout + proc.stderr
    assert f"tune: 3 trials: {LOAD_ERROR}" in " ".join(terminal.split())
    assert "tune: 1 trial: the trial process crashed (exit 1): boom" in " ".join(terminal.split())


KERAS_LAYERS = '''import keras


@keras.saving.register_keras_serializable(package="rooftune_probe_keras")
class Doubled(keras.layers.Layer):
    def call(self, x):
        return x * 2.0
'''


def test_a_keras_file_names_the_package_of_its_layers_and_loads_once_it_is_imported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A .keras file of a layer registered by an installed package (here a folder outside the working
    directory on the path): the loader names the package's module, and a process that has not
    imported it loads the file once it imports what the workload names."""
    import importlib

    importlib.import_module("torch._dynamo")  # Triton before TensorFlow, as rooftune loads them
    keras = pytest.importorskip("keras")
    from rooftune.workload.keras_models import save_keras_file

    site = tmp_path / "site"
    (site / "rooftune_probe_keras").mkdir(parents=True)
    (site / "rooftune_probe_keras" / "__init__.py").write_text("")
    (site / "rooftune_probe_keras" / "layers.py").write_text(KERAS_LAYERS)
    monkeypatch.syspath_prepend(str(site))
    from rooftune_probe_keras.layers import Doubled

    x = keras.Input((4,))
    path = save_keras_file(keras.Model(x, Doubled()(keras.layers.Dense(3)(x))), tmp_path)
    assert load_workload(str(path)).imports == ("rooftune_probe_keras.layers",)
    # a process that never imported the package: its class is not registered, its module not loaded
    monkeypatch.delitem(keras.saving.get_custom_objects(), "rooftune_probe_keras>Doubled")
    monkeypatch.delitem(sys.modules, "rooftune_probe_keras.layers")
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path))
    msg = str(info.value)
    assert "its class 'Doubled' is not registered here" in msg and "module:callable" in msg and "\n" not in msg
    import_modules(["rooftune_probe_keras.layers"])
    assert load_workload(str(path)).imports == ("rooftune_probe_keras.layers",)

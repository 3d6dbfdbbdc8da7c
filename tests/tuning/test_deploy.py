"""`rooftune.load_tuned`: a saved configuration run in the caller's own process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import rooftune
from rooftune.errors import InvalidArgument, RooftuneError
from rooftune.tuning import RunConfig
from rooftune.tuning.deploy import environment_notes

CNN = "tests.analysis.tiny_models:small_cnn"


def saved(tmp_path: Path, config: RunConfig, name: str = "c.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"config": config.to_dict(), "workload": {"model": CNN, "inputs": None, "options": {}}}))
    return path


def test_a_saved_onnxruntime_config_runs_the_users_inputs_in_a_fresh_process(tmp_path: Path) -> None:
    from rooftune.runtimes import get_runtime

    if get_runtime("onnxruntime").available():
        pytest.skip(get_runtime("onnxruntime").available())
    path = saved(tmp_path, RunConfig(runtime="onnxruntime", intra_threads=1, runtime_options={"spinning": False}))
    # its own process: loading sets torch's thread pools, as a user's program wants
    code = f"""
import json, torch, rooftune
from tests.analysis.tiny_models import small_cnn
m = rooftune.load_tuned({str(path)!r})
module, example = small_cnn()
module.eval()
x = torch.randn_like(example)
with torch.no_grad():
    want = module(x)
got = m(x)
err = None
try:
    m(torch.randn(2, *x.shape[1:]))
except rooftune.InvalidArgument as exc:
    err = str(exc)
print(json.dumps({{"ok": m.check["ok"], "threads": torch.get_num_threads(), "close": torch.allclose(got, want, atol=1e-4, rtol=1e-4),
                  "shape": list(got.shape), "err": err, "notes": list(m.notes)}}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    # a new input, not the one it was tuned and checked on, gives the module's output
    assert r["ok"] and r["close"] and r["threads"] == 1 and r["shape"][0] == 1
    assert r["err"].startswith("invalid input 0 '2x") and "tuned on 1x" in r["err"]
    assert r["notes"] == []  # ONNX Runtime's configuration sets no process environment beyond threads


def test_a_wrong_output_is_refused_and_can_be_loaded_unchecked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rooftune.tuning.verify as verify

    path = saved(tmp_path, RunConfig(runtime="eager", set_threads=False, name="vanilla"))
    real = verify.compare_outputs

    def wrong(out: tuple, ref: tuple, precision: str) -> dict:
        return real(tuple(o + 1.0 for o in out), ref, precision)

    monkeypatch.setattr(verify, "compare_outputs", wrong)
    with pytest.raises(RooftuneError, match=r"gives a wrong output here \(fails max error"):
        rooftune.load_tuned(path)
    m = rooftune.load_tuned(path, check=False)
    assert m.check is None
    x = torch.randn(*m.signature[0][0])
    assert m(x).shape[0] == m.signature[0][0][0]
    with pytest.raises(InvalidArgument, match=r"invalid inputs '2 tensor\(s\)': the configuration runs 1"):
        m(x, x)
    with pytest.raises(InvalidArgument, match=r"""invalid inputs "keyword 'y'": the model takes 1 tensor\(s\), positionally"""):
        m(x, y=x)
    with pytest.raises(InvalidArgument, match=r"invalid input 0 'list'"):
        m([1.0])


def test_refuses_a_file_that_is_not_a_saved_configuration(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"^invalid path '.*missing.json': no such file"):
        rooftune.load_tuned(tmp_path / "missing.json")
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"config": RunConfig(intra_threads=1).to_dict()}))
    with pytest.raises(InvalidArgument, match=r"^invalid path '.*bare.json': names no workload"):
        rooftune.load_tuned(bare)


def test_environment_notes_name_what_a_process_sets_at_its_start(monkeypatch: pytest.MonkeyPatch) -> None:
    config = RunConfig(intra_threads=1, omp={"OMP_PROC_BIND": "close"})
    monkeypatch.delenv("OMP_PROC_BIND", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    notes = environment_notes(config, "best.json")
    # the thread counts are the loader's to set; the binding only a process start can
    assert notes == ["OMP_PROC_BIND=close is not set in this process (unset); "
                     "start it with rooftune exec --config best.json -- ..."]
    monkeypatch.setenv("OMP_PROC_BIND", "close")
    assert environment_notes(config, "best.json") == []
    from rooftune.tuning import allocator_library

    lib = allocator_library("tcmalloc")
    if lib:
        config = RunConfig(intra_threads=1, allocator="tcmalloc")
        monkeypatch.setenv("LD_PRELOAD", f"/other.so {lib}")
        assert environment_notes(config, "best.json") == []
        monkeypatch.setenv("LD_PRELOAD", "/other.so")
        assert environment_notes(config, "best.json")[0].startswith(f"LD_PRELOAD={lib} is not set in this process ('/other.so')")
        # OpenVINO's oneTBB needs its switch under a preloaded allocator; no other runtime reads it
        monkeypatch.setenv("LD_PRELOAD", lib)
        monkeypatch.delenv("TBB_ENABLE_SANITIZERS", raising=False)
        ov = RunConfig(runtime="openvino", intra_threads=1, allocator="tcmalloc")
        assert [n.split(" ")[0] for n in environment_notes(ov, "best.json")] == ["TBB_ENABLE_SANITIZERS=1"]
        monkeypatch.setenv("TBB_ENABLE_SANITIZERS", "1")
        assert environment_notes(ov, "best.json") == []
        from rooftune.runconfig import intel_openmp_library

        if intel_openmp_library():  # two libraries preloaded (the launcher's recipe): both present, in any order
            both = RunConfig(intra_threads=1, allocator="tcmalloc", openmp="intel")
            preload = both.environment()["LD_PRELOAD"]
            assert len(preload.split(":")) == 2
            monkeypatch.setenv("LD_PRELOAD", preload)
            assert environment_notes(both, "best.json") == []
            monkeypatch.setenv("LD_PRELOAD", " ".join(reversed(preload.split(":"))))
            assert environment_notes(both, "best.json") == []
            monkeypatch.setenv("LD_PRELOAD", lib)
            assert environment_notes(both, "best.json")[0].startswith(f"LD_PRELOAD={preload} is not set")


def refuse_all(outputs: list, refs: list) -> tuple[bool, str]:
    return False, f"refused {len(outputs)} outputs"


def test_an_artifact_missing_beside_the_file_is_prepared_again_and_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rooftune.runtimes import get_runtime

    if get_runtime("onnxruntime").available():
        pytest.skip(get_runtime("onnxruntime").available())
    config = RunConfig(runtime="onnxruntime", set_threads=False, vendor_defaults=True, name="onnxruntime-default")
    path = saved(tmp_path, config)
    data = json.loads(path.read_text())
    # as a folder copied from elsewhere: the path stored is absolute and no longer there
    path.write_text(json.dumps({**data, "artifact": "/gone/out/c_model.onnx"}))
    m = rooftune.load_tuned(path)
    assert m.check["ok"] and len(m.notes) == 1
    assert m.notes[0].startswith(f"the artifact c_model.onnx was not found beside {path}: prepared again")
    # beside the file, it is the one loaded: no export happens
    import rooftune.runtimes.onnx_runtime as ort
    from rooftune.workload import load_workload

    ort.export_onnx(load_workload(CNN), config, tmp_path / "c_model.onnx")

    def no_export(*args: object) -> None:
        raise AssertionError("exported again")

    monkeypatch.setattr("rooftune.runtimes.sources.export_onnx", no_export)
    m = rooftune.load_tuned(path)
    assert m.check["ok"] and m.notes == ()
    with torch.no_grad():
        want = load_workload(CNN).module.eval()(*m.example_inputs)
    assert torch.allclose(m(*m.example_inputs), want, atol=1e-5)
    # a runtime not installed here is one line naming it
    monkeypatch.setattr(type(get_runtime("onnxruntime")), "available", lambda self: "onnxruntime is not installed")
    with pytest.raises(InvalidArgument, match="invalid runtime 'onnxruntime': onnxruntime is not installed"):
        rooftune.load_tuned(path)


def test_int8_is_checked_by_the_guard_over_its_calibration_set_or_the_callers_validation(tmp_path: Path) -> None:
    from rooftune.runtimes import get_runtime
    from rooftune.runtimes.quantize import int8_missing

    if int8_missing("onnxruntime") or get_runtime("onnxruntime").available():
        pytest.skip(int8_missing("onnxruntime") or get_runtime("onnxruntime").available())
    path = saved(tmp_path, RunConfig(runtime="onnxruntime", precision="int8", set_threads=False))
    path.write_text(json.dumps({**json.loads(path.read_text()), "calibration": 4}))
    from rooftune.tuning.deploy import load_saved

    m = load_saved(path)  # not raised on: whether the guard passes on this machine is the quantizer's
    # the trial's rule: over the calibration set, not the one input alone
    assert m.check["inputs"] == 4 and "over 4 inputs" in m.check["rule"]
    with pytest.raises(RooftuneError, match=r"refused 4 outputs"):
        rooftune.load_tuned(path, validate="tests.tuning.test_deploy:refuse_all")
    # the file's own --validate is the default, as the study checked its trials with it
    path.write_text(json.dumps({**json.loads(path.read_text()), "validate": "tests.tuning.test_deploy:refuse_all"}))
    with pytest.raises(RooftuneError, match=r"refused 4 outputs"):
        rooftune.load_tuned(path)
    with pytest.raises(InvalidArgument, match="give check=True"):
        rooftune.load_tuned(path, check=False, validate=refuse_all)
    accepted = rooftune.load_tuned(path, validate=lambda outs, refs: len(outs) == 4)
    assert accepted.check["ok"] and accepted.check["rule"].endswith("<lambda>")


@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino", "ncnn"])
def test_an_output_is_the_callers_and_not_overwritten_by_the_next_call(tmp_path: Path, runtime: str) -> None:
    from rooftune.runtimes import get_runtime

    if get_runtime(runtime).available():
        pytest.skip(get_runtime(runtime).available())
    m = rooftune.load_tuned(saved(tmp_path, RunConfig(runtime=runtime, set_threads=False, vendor_defaults=True)))
    shape = m.signature[0][0]
    first = m(torch.randn(shape))
    kept = first.clone()
    second = m(torch.randn(shape))
    assert torch.equal(first, kept) and not torch.equal(first, second)


def test_the_saved_file_records_the_studys_validation(tmp_path: Path) -> None:
    from rooftune.tuning import TrialResult, save_config

    trial = TrialResult(RunConfig(runtime="eager", set_threads=False), True)
    workload = {"model": CNN, "inputs": None, "options": {}}
    data = json.loads(save_config(trial, tmp_path / "a.json", workload, validate="mypkg.checks:ok").read_text())
    assert data["validate"] == "mypkg.checks:ok"
    assert "validate" not in json.loads(save_config(trial, tmp_path / "b.json", workload).read_text())


def test_a_model_of_several_outputs_gets_them_all_checked_and_returned_as_it_returns_them(tmp_path: Path) -> None:
    """Each runtime returns every output tensor in the model's order (ONNX Runtime and OpenVINO
    flatten a dict to a list); the loaded configuration puts them back in the model's dict."""
    from rooftune.runtimes import get_runtime
    from rooftune.workload import load_workload
    from tests.analysis.tiny_models import two_heads

    heads = "tests.analysis.tiny_models:two_heads"
    module, x = two_heads()
    with torch.no_grad():
        want = module.eval()(x)
    ran = []
    for runtime in ("eager", "torchscript", "onnxruntime", "openvino"):
        rt = get_runtime(runtime)
        if rt.available():
            continue
        wl = load_workload(heads)
        out = rt.prepare(wl, RunConfig(runtime=runtime, intra_threads=1), tmp_path / runtime).output()
        assert len(out) == 2, runtime
        assert torch.allclose(out[0], want["logits"], atol=1e-5) and torch.allclose(out[1], want["embedding"], atol=1e-7), runtime
        ran.append(runtime)
    assert ran == ["eager", "torchscript", "onnxruntime", "openvino"]  # all four are dependencies
    path = tmp_path / "heads.json"
    path.write_text(json.dumps({"config": RunConfig(runtime=ran[-1], intra_threads=1).to_dict(),
                                "workload": {"model": heads, "inputs": None, "options": {}}}))
    m = rooftune.load_tuned(path)
    assert m.check["ok"] and m.check["outputs"] == 2
    got = m(x)
    assert isinstance(got, dict) and list(got) == ["logits", "embedding"]
    assert torch.allclose(got["embedding"], want["embedding"], atol=1e-7)
    m.close()


def test_indices_numbers_and_empty_outputs_pass_the_check_and_come_back_in_their_types(tmp_path: Path) -> None:
    """ONNX Runtime returns the Python int as a 1-element int64 array and the argmax as int64: both
    are compared, and the loaded configuration gives them back as the model does."""
    from tests.analysis.tiny_models import with_extras

    module, x = with_extras()
    x = x[:1]  # the configuration's batch
    with torch.no_grad():
        want = module.eval()(x)
    path = tmp_path / "extras.json"
    path.write_text(json.dumps({"config": RunConfig(runtime="onnxruntime", intra_threads=1).to_dict(),
                                "workload": {"model": "tests.analysis.tiny_models:with_extras", "inputs": None, "options": {}}}))
    m = rooftune.load_tuned(path)
    assert m.check["ok"] and m.check["outputs"] == 4 and m.check["agreement"] == 1.0
    got = m(x)
    assert list(got) == ["logits", "label", "batch", "none"]
    assert got["label"].dtype == torch.int64 and torch.equal(got["label"], want["label"])
    assert got["batch"] == 1 and type(got["batch"]) is int and got["none"].shape == (1, 0)
    m.close()


def test_a_model_called_with_keywords_runs_on_every_runtime_and_is_called_the_same_way_when_loaded(tmp_path: Path) -> None:
    """Each runtime takes the call's tensors in order; the loaded configuration is called as the
    model is, and a call made otherwise is refused by name."""
    from rooftune.runtimes import get_runtime
    from rooftune.tuning.verify import compare_outputs
    from rooftune.workload import load_workload
    from tests.analysis.tiny_models import keywords

    name = "tests.analysis.tiny_models:keywords"
    module, (x,), kwargs = keywords()
    with torch.no_grad():
        want = module.eval()(x, **kwargs)
    for runtime in ("eager", "torchscript", "onnxruntime", "openvino"):
        wl = load_workload(name)
        out = get_runtime(runtime).prepare(wl, RunConfig(runtime=runtime, intra_threads=1), tmp_path / runtime).output()
        assert compare_outputs(out, want, "fp32")["ok"], runtime
    path = tmp_path / "kw.json"
    path.write_text(json.dumps({"config": RunConfig(runtime="onnxruntime", intra_threads=1).to_dict(),
                                "workload": {"model": name, "inputs": None, "options": {}}}))
    m = rooftune.load_tuned(path)
    assert m.check["ok"]
    other = torch.randn_like(x)
    with torch.no_grad():
        assert torch.allclose(m(other, **kwargs), module(other, **kwargs), atol=1e-5)
    # keywords and dict keys are matched by name, in whatever order they are written
    swapped = {"gain": kwargs["extra"]["gain"], "bias": kwargs["extra"]["bias"]}
    with torch.no_grad():
        assert torch.allclose(m(other, scale=0.5, extra=swapped), module(other, **kwargs), atol=1e-5)
    args, kw = m.example_call
    assert torch.equal(args[0], m.example_inputs[0]) and kw["scale"] == 0.5 and set(kw["extra"]) == {"bias", "gain"}
    with pytest.raises(InvalidArgument, match=r"^invalid call 'model\(Tensor\)': the model was tuned called as "
                                              r"model\(tensor, extra=\{'bias': tensor, 'gain': \[tensor\]\}, scale=0.5\)"):
        m(other)
    with pytest.raises(InvalidArgument, match=r"^invalid argument scale '2.0': the value it was tuned with, 0.5"):
        m(other, extra=kwargs["extra"], scale=2.0)
    with pytest.raises(InvalidArgument, match=r"^invalid input extra\['bias'\] '2x8 float32'"):
        m(other, extra={"bias": torch.ones(2, 8), "gain": kwargs["extra"]["gain"]}, scale=0.5)
    m.close()

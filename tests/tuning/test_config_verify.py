"""RunConfig validation and environment, saved-config loading, output verification."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rooftune.errors import InvalidArgument
from rooftune.runconfig import allocator_library, load_config
from rooftune.tuning import RunConfig
from rooftune.tuning.verify import compare_outputs


def test_environment_sets_threads_openmp_and_nothing_for_vanilla() -> None:
    cfg = RunConfig(intra_threads=2, omp={"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"})
    assert cfg.environment() == {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}
    assert RunConfig(set_threads=False).environment() == {}


def test_missing_allocator_is_a_clear_error() -> None:
    if allocator_library("jemalloc"):
        env = RunConfig(allocator="jemalloc").environment()
        assert env["LD_PRELOAD"].endswith("libjemalloc.so.2") and "MALLOC_CONF" not in env  # jemalloc defaults
        assert env["TBB_ENABLE_SANITIZERS"] == "1"  # OpenVINO under a preloaded allocator
    else:
        with pytest.raises(InvalidArgument, match="allocator 'jemalloc'.*not installed"):
            RunConfig(allocator="jemalloc").environment()


@pytest.mark.parametrize(
    "data,fragment",
    [
        ({"runtime": "eager", "threads": 2}, "configuration key 'threads'"),
        ({"intra_threads": 10_000}, "intra_threads 10000"),
        ({"inter_threads": 0}, "inter_threads 0"),
        ({"batch": 0}, "batch 0"),
        ({"runtime": "tflite"}, "runtime 'tflite'"),
        ({"memory_format": "nhwc"}, "memory_format 'nhwc'"),
        ({"precision": "fp8"}, "precision 'fp8'"),
        ({"omp": {"PATH": "/x"}}, "omp variable 'PATH': allowed OMP_PROC_BIND, OMP_PLACES"),
        ({"omp": {"OMP_A=B": "1"}}, "omp variable 'OMP_A=B'"),  # would set OMP_A to 'B=1'
        ({"omp": {"OMP_": "1"}}, "omp variable 'OMP_'"),
        ({"omp": {"OMP_PLACES": "cores\0"}}, "omp OMP_PLACES 'cores\\x00': allowed threads, cores"),
        ({"omp": ["OMP_PROC_BIND"]}, "omp ['OMP_PROC_BIND']: allowed a mapping"),
        ({"runtime": ["eager"]}, "runtime ['eager']"),
        ({"precision": {"a": 1}}, "precision {'a': 1}"),
        ({"runtime": "onnxruntime", "runtime_options": {"turbo": True}}, "onnxruntime option 'turbo': allowed execution_mode"),
        ({"runtime": "onnxruntime", "runtime_options": {"spinning": 1}}, "option spinning 1: allowed True, False"),
        ({"runtime": "openvino", "runtime_options": {"hint": "FAST"}}, "option hint 'FAST': allowed LATENCY, THROUGHPUT"),
        ({"runtime": "eager", "runtime_options": {"mode": "default"}}, "allowed optimizer"),
    ],
)
def test_impossible_configurations_are_refused(data: dict, fragment: str) -> None:
    with pytest.raises(InvalidArgument) as exc:
        RunConfig.from_dict(data, usable_cores=2)
    assert fragment in str(exc.value)


def test_key_is_stable_and_depends_on_every_field() -> None:
    a = RunConfig(intra_threads=2)
    assert a.key() == RunConfig(intra_threads=2).key()
    assert a.key() != RunConfig(intra_threads=2, memory_format="channels_last").key()
    assert RunConfig.from_dict(a.to_dict(), usable_cores=2) == a


def test_load_config_reads_saved_files_and_refuses_bad_ones(tmp_path: Path) -> None:
    good = tmp_path / "best.json"
    good.write_text(json.dumps({"config": RunConfig(intra_threads=1).to_dict(), "figures": {}}))
    assert load_config(good).intra_threads == 1
    with pytest.raises(InvalidArgument, match="no such file"):
        load_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidArgument, match="not JSON"):
        load_config(bad)
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"config": {"runtime": "eager", "speed": "max"}}))
    with pytest.raises(InvalidArgument, match="configuration key 'speed'"):
        load_config(unknown)
    with pytest.raises(InvalidArgument, match="a directory"):
        load_config(tmp_path)
    with pytest.raises(InvalidArgument, match="'/dev/null': not a regular file"):
        load_config("/dev/null")
    unreadable = tmp_path / "unreadable.json"
    unreadable.write_text("{}")
    with pytest.MonkeyPatch.context() as mp:
        def fail(*_a: object, **_k: object) -> int:
            raise OSError(5, "Input/output error")
        mp.setattr("rooftune.fileio.os.open", fail)
        with pytest.raises(InvalidArgument, match="unreadable.json': cannot read it \\(Input/output error\\)"):
            load_config(unreadable)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InvalidArgument, match="nested deeper than 64 levels"):
        load_config(deep)
    ok = RunConfig(runtime="onnxruntime", intra_threads=1, runtime_options={"spinning": False, "execution_mode": "parallel"})
    assert RunConfig.from_dict(ok.to_dict(), usable_cores=2) == ok


def test_verification_accepts_rounding_and_refuses_a_different_function() -> None:
    torch.manual_seed(0)
    ref = torch.randn(4, 10)
    assert compare_outputs(ref + 1e-6, ref, "fp32")["ok"]
    wrong = compare_outputs(torch.randn(4, 10), ref, "fp32")
    assert not wrong["ok"] and "fails max error" in wrong["why"]
    assert not compare_outputs(ref.reshape(2, 20)[:, :5], ref, "fp32")["ok"]  # other shape
    nan = ref.clone()
    nan[0, 0] = float("nan")
    assert not compare_outputs(nan, ref, "fp32")["ok"]
    assert compare_outputs(ref.bfloat16().float(), ref, "bf16")["ok"]
    assert not compare_outputs(ref.bfloat16().float() * 1.2, ref, "fp32")["ok"]
    # int8 guard: cosine >= 0.99 and top-1 agreement >= 99 %
    flipped = ref.clone()
    flipped[0] = -flipped[0]
    r = compare_outputs(flipped, ref, "int8")
    assert not r["ok"] and r["top1"] == 0.75


def test_every_output_of_a_model_is_verified_on_its_own_scale() -> None:
    """A model of two outputs: the second wrong, or missing, fails the check however right the first,
    and however small the second is beside it."""
    torch.manual_seed(0)
    logits, embedding = torch.randn(2, 10), 1e-3 * torch.randn(2, 4)
    ref = (logits, embedding)
    good = compare_outputs((logits + 1e-6, embedding * (1 + 1e-6)), ref, "fp32")
    assert good["ok"] and good["outputs"] == 2 and good["cosine"] > 0.9999
    wrong = compare_outputs((logits, -embedding), ref, "fp32")
    assert not wrong["ok"] and "(output 2 of 2)" in wrong["why"] and wrong["cosine"] < 0
    # concatenated, the small output's error would hide under the large one's scale
    assert compare_outputs(torch.cat([logits.flatten(), -embedding.flatten()]),
                           torch.cat([logits.flatten(), embedding.flatten()]), "fp32")["ok"]
    missing = compare_outputs((logits,), ref, "fp32")
    assert not missing["ok"] and missing["why"] == "1 output tensor(s) where the model returns 2"
    shape = compare_outputs((logits, embedding[:, :2]), ref, "fp32")
    assert not shape["ok"] and shape["why"].startswith("output 2 of 2: shape (2, 2) differs")
    # a lone tensor is a model's one output, as before; top-1 is the first output's
    assert compare_outputs(logits, (logits,), "fp32")["ok"] and "outputs" not in compare_outputs(logits, logits, "fp32")
    flipped = compare_outputs((logits, embedding.flip(-1)), ref, "int8")
    assert flipped["top1"] == 1.0 and not flipped["ok"] and "(output 2 of 2)" in flipped["why"]


def test_outputs_of_every_kind_are_flattened_in_order_and_put_back_as_the_model_returns_them() -> None:
    import numpy as np

    from rooftune.runtimes import like_output, output_tensors

    out = {"logits": torch.ones(2, 3, dtype=torch.float64), "label": torch.tensor([1, 2]), "n": 2, "score": 0.5,
           "none": None, "name": "x", "nested": [np.array([True, False]), (np.float32(1.5),)]}
    flat = output_tensors(out)
    assert [t.dtype for t in flat] == [torch.float32, torch.int64, torch.int64, torch.float32, torch.bool, torch.float32]
    assert [tuple(t.shape) for t in flat] == [(2, 3), (2,), (), (), (2,), ()]
    # put back: the model's structure, each tensor in its dtype, numbers as numbers
    back = like_output(out, flat)
    assert back["logits"].dtype == torch.float64 and back["label"].dtype == torch.int64
    assert back["n"] == 2 and type(back["n"]) is int and back["score"] == 0.5 and back["none"] is None and back["name"] == "x"
    assert like_output(torch.empty(0, dtype=torch.int32), (torch.tensor([1.0, 2.0]),)).dtype == torch.int32
    assert like_output(out, flat[:2]) == flat[:2]  # another count: the tensors as they are
    with pytest.raises(TypeError, match="has no tensor"):
        output_tensors({"a": None, "b": "text"})
    # containers pytree does not know: a dataclass, a dict subclass, opened and rebuilt as they were
    import dataclasses

    @dataclasses.dataclass
    class Out:
        logits: torch.Tensor
        extra: tuple

    class Heads(dict):
        pass

    made = Heads(first=Out(torch.ones(2), (torch.tensor([3]), 4, None)), second=[torch.zeros(1)])
    flat = output_tensors(made)
    assert [t.tolist() for t in flat] == [[1.0, 1.0], [3], 4, [0.0]]
    back = like_output(made, [t + 1 for t in flat])
    assert type(back) is Heads and type(back["first"]) is Out and back["first"].extra[1:] == (5, None)
    assert back["first"].logits.tolist() == [2.0, 2.0] and back["second"][0].tolist() == [1.0]


def test_integer_and_empty_outputs_are_compared_by_agreement_and_shape() -> None:
    logits, label, empty = torch.randn(100, 10), torch.arange(100), torch.zeros(2, 0)
    assert compare_outputs((logits, label, empty), (logits, label, empty), "fp32")["ok"]
    one_off = label.clone()
    one_off[0] = 7  # 99 % of the indices agree: a near tie may flip one
    r = compare_outputs((logits, one_off), (logits, label), "fp32")
    assert r["ok"] and r["agreement"] == 0.99 and r["max_rel"] < 1e-6
    one_off[1] = 7
    r = compare_outputs((logits, one_off), (logits, label), "bf16")
    assert not r["ok"] and "(output 2 of 2): its integer values agree on 98.0% of the elements" in r["why"]
    assert not compare_outputs((logits, one_off), (logits, label), "int8")["ok"]
    assert not compare_outputs((logits, torch.zeros(2, 1)), (logits, empty), "fp32")["ok"]  # the shape still counts
    from rooftune.tuning.verify import compare_set

    bad = compare_set([(logits, one_off)] * 2, [(logits, label)] * 2, "int8")
    assert not bad["ok"] and bad["agreement"] == 0.98 and "integer outputs agreeing on 98.0%" in bad["why"]


def test_a_validation_function_gets_each_inputs_outputs_as_the_model_gives_them() -> None:
    from rooftune.tuning.verify import check_prepared

    seen = []

    def record(outs, refs):
        seen.append((outs, refs))
        return True

    class Prepared:  # two outputs per call
        def output(self):
            return (torch.ones(1, 3), torch.zeros(1, 2))

        def output_for(self, xs):
            return self.output()

    r = check_prepared(Prepared(), "fp32", (torch.ones(1),), (torch.ones(1, 3), torch.zeros(1, 2)), validate=record)
    assert r["ok"] and r["rule"].startswith("validation ")
    outs, refs = seen[0]
    assert len(outs) == 1 and isinstance(outs[0], tuple) and len(outs[0]) == 2 and len(refs[0]) == 2
    seen.clear()

    class One(Prepared):
        def output(self):
            return (torch.ones(1, 3),)

    check_prepared(One(), "fp32", (torch.ones(1),), (torch.ones(1, 3),), validate=record)
    assert isinstance(seen[0][0][0], torch.Tensor) and isinstance(seen[0][1][0], torch.Tensor)
    seen.clear()
    # an output missing is wrong whatever the caller's function would accept
    r = check_prepared(One(), "fp32", (torch.ones(1),), (torch.ones(1, 3), torch.zeros(1, 2)), validate=record)
    assert not r["ok"] and not seen and r["why"] == "1 output tensor(s) where the model returns 2"


def test_verification_does_not_depend_on_the_outputs_scale() -> None:
    """A deep network with random weights (mobilenet_v3_large) outputs ~1e-10: torch's cosine
    clamps each norm at 1e-8 and read 0.6 for two outputs equal to 3e-7 of their scale."""
    from rooftune.primitives.check import cosine

    torch.manual_seed(0)
    a, b = torch.randn(1, 1000), torch.randn(1, 1000)
    for scale in (1e-12, 1e-10, 1.0, 1e6):  # the cosine is the angle, whatever the outputs' size
        assert cosine(a * scale, a * scale) == pytest.approx(1.0)
        assert cosine((a + b) * scale, a * scale) == pytest.approx(cosine(a + b, a), abs=1e-6)
    assert cosine(torch.zeros(3), torch.zeros(3)) == 1.0 and cosine(torch.ones(3), torch.zeros(3)) == 0.0
    ref = a * 1e-10
    r = compare_outputs(ref * (1 + 1e-6 * torch.randn_like(ref)), ref, "fp32")
    assert r["ok"] and r["cosine"] > 0.999999
    assert not compare_outputs(b * 1e-10, ref, "fp32")["ok"]


def test_the_int8_guard_says_when_the_quantized_outputs_are_all_zeros() -> None:
    from rooftune.tuning.verify import compare_set

    refs = [torch.randn(1, 10) for _ in range(4)]
    r = compare_set([torch.zeros(1, 10)] * 3 + [refs[3].clone()], refs, "int8")
    assert not r["ok"] and "3 of 4 outputs are all zeros" in r["why"]
    good = compare_set([x.clone() for x in refs], refs, "int8")
    assert good["ok"] and good["why"] == ""


@pytest.mark.parametrize(
    "omp,fragment",
    [
        # LLVM's and Intel's OpenMP load the libraries it names at their start
        ({"OMP_TOOL_LIBRARIES": "/tmp/tool.so"}, "invalid omp variable 'OMP_TOOL_LIBRARIES': allowed OMP_PROC_BIND, "
                                                 "OMP_PLACES, OMP_WAIT_POLICY, KMP_BLOCKTIME, KMP_AFFINITY, MALLOC_CONF"),
        ({"LD_PRELOAD": "/tmp/evil.so"}, "'LD_PRELOAD': allowed OMP_PROC_BIND, OMP_PLACES, OMP_WAIT_POLICY, KMP_BLOCKTIME, "
                                         "KMP_AFFINITY, MALLOC_CONF (the settings the search and the peers set); a preloaded allocator is set by "
                                         "allocator (glibc, jemalloc, tcmalloc)"),
        ({"OMP_NUM_THREADS": "4; rm"}, "'OMP_NUM_THREADS': allowed OMP_PROC_BIND"),
        ({"OMP_PROC_BIND": "close; rm -rf ~"}, "invalid omp OMP_PROC_BIND 'close; rm -rf ~': allowed close, spread"),
        ({"KMP_BLOCKTIME": "4; rm"}, "invalid omp KMP_BLOCKTIME '4; rm': allowed milliseconds 0..2147483647 or infinite"),
        ({"KMP_AFFINITY": "granularity=fine,proclist=[0,1],explicit"}, "invalid omp KMP_AFFINITY"),
        ({"OMP_WAIT_POLICY": 1}, "invalid omp OMP_WAIT_POLICY 1: allowed ACTIVE or PASSIVE"),
    ],
)
def test_a_configuration_sets_no_environment_the_search_does_not(tmp_path: Path, omp: dict, fragment: str) -> None:
    """Made in Python, read from a file (``rooftune exec --config``, ``load_tuned``) or from the
    store (a study resumed): the same one-line refusal, before any process starts with it."""
    from rooftune.tuning.study import TrialResult

    with pytest.raises(InvalidArgument) as made:
        RunConfig(runtime="eager", omp=omp)
    saved = tmp_path / "best.json"
    saved.write_text(json.dumps({"config": {"runtime": "eager", "omp": omp}}))
    with pytest.raises(InvalidArgument) as loaded:
        load_config(saved, usable_cores=2)
    with pytest.raises(InvalidArgument) as stored:
        TrialResult.from_stored({"config": {"runtime": "eager", "omp": omp}, "status": "ok", "result": {}})
    assert str(made.value) == str(loaded.value) == str(stored.value)
    assert fragment in str(made.value) and "\n" not in str(made.value)


def test_exec_refuses_a_configuration_file_that_sets_another_variable(tmp_path: Path) -> None:
    from tests.test_cli import assert_one_line_error, rooftune_in_process

    saved = tmp_path / "best.json"
    saved.write_text(json.dumps({"config": {"runtime": "eager", "omp": {"LD_PRELOAD": "/tmp/evil.so"}}}))
    marker = tmp_path / "ran"
    proc = rooftune_in_process("exec", "--config", str(saved), "--", "touch", str(marker))
    assert_one_line_error(proc, "omp variable 'LD_PRELOAD'", "allocator (glibc, jemalloc, tcmalloc)")
    assert not marker.exists()


@pytest.mark.parametrize("openmp", ["libgomp.so.1", "libiomp5.so"])
def test_every_configuration_rooftune_makes_sets_an_allowed_environment(fake_platform, openmp: str) -> None:
    """The guideline, the baselines and every OpenMP setting of the search (GNU's and Intel's
    OpenMP each have their own) pass the check a saved file is read with."""
    from dataclasses import replace

    import optuna

    from rooftune.runtimes import get_runtime
    from rooftune.tuning import baselines, guideline
    from rooftune.tuning.space import search_space
    from rooftune.tuning.space import suggest as _suggest
    from rooftune.workload import OpGraph, OpNode, TensorMeta

    platform = replace(fake_platform, openmp={**(fake_platform.openmp or {}), "library": openmp})
    t = TensorMeta((1, 8, 8, 8), "float32", 4)
    w = TensorMeta((8, 8, 3, 3), "float32", 4)
    graph = OpGraph("c", (OpNode(0, "conv0", "aten.conv2d", "", "Conv2d", {"input": t, "weight": w}, (t,), ()),),
                    "torch.export")
    made = [*baselines(platform, {"eager": None, "onnxruntime": None, "openvino": None})]
    for available in ({"eager": None, "torchscript": None}, {"onnxruntime": None}, {"openvino": None}):
        made.append(guideline(platform, graph, available)[0])
    space = search_space(platform, {"eager": get_runtime("eager")}, ["fp32"])
    study = optuna.create_study()
    for bind in space["bind"]:
        for wait in space["wait"]:
            study.enqueue_trial({"runtime": "eager", "bind": bind, "wait": wait})
            made.append(_suggest(study.ask(), space))
    # KMP_* where the OpenMP is Intel's: torch's own, or the intel-openmp package's that the
    # launcher's and Intel's recipes preload (openmp="intel")
    assert any("KMP_AFFINITY" in c.omp and c.openmp == "default" for c in made) == (openmp == "libiomp5.so")
    assert all(c.openmp == "intel" for c in made if "KMP_AFFINITY" in c.omp and openmp != "libiomp5.so")
    assert {k for c in made for k in c.omp} >= {"OMP_PROC_BIND", "OMP_PLACES"}
    for cfg in made:
        assert RunConfig.from_dict(cfg.to_dict(), usable_cores=platform.usable_cores) == cfg

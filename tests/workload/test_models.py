"""Loading workloads by name: the torchvision zoo, the built-ins, module:callable and .pt2 files."""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from rooftune.errors import InvalidArgument, WorkloadError
from rooftune.workload import Workload, load_workload, parse_options, run_once
from rooftune.workload.builtin import BUILTINS

# --------------------------------------------------------------------------------------------
# torchvision zoo


def test_resnet18_defaults() -> None:
    wl = load_workload("resnet18")
    assert isinstance(wl, Workload)
    assert wl.name == "resnet18"
    assert wl.kind.startswith("torchvision")
    assert wl.kind == "torchvision classification"
    assert wl.input_shapes == [(1, 3, 224, 224)]
    assert wl.batch == 1
    assert wl.module.training is False
    assert all(not m.training for m in wl.module.modules())
    assert wl.describe() == "resnet18 (torchvision classification; input 1x3x224x224)"
    out = run_once(wl)
    assert tuple(out.shape) == (1, 1000)


def test_options_a_builder_takes_out_of_kwargs_still_build() -> None:
    small = load_workload("mobilenet_v3_small", options={"width_mult": 0.5}, check=False)
    full = load_workload("mobilenet_v3_small", check=False)
    assert sum(p.numel() for p in small.module.parameters()) < sum(p.numel() for p in full.module.parameters())
    assert load_workload("convnext_tiny", options={"layer_scale": 0.5}, check=False).options == {"layer_scale": 0.5}


def test_resnet18_batch_4() -> None:
    wl = load_workload("resnet18", batch=4)
    assert wl.input_shapes == [(4, 3, 224, 224)]
    assert wl.batch == 4


def test_resnet18_explicit_input_shape() -> None:
    wl = load_workload("resnet18", inputs=[(2, 3, 64, 64)])
    assert wl.input_shapes == [(2, 3, 64, 64)]
    assert wl.inputs[0].dtype == torch.float32


def test_explicit_input_shape_with_batch_sets_dim0() -> None:
    wl = load_workload("squeezenet1_0", inputs=[(2, 3, 64, 64)], batch=3, check=False)
    assert wl.input_shapes == [(3, 3, 64, 64)]


def test_segmentation_builds_without_fetching_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """Segmentation builders default to a pretrained backbone; rooftune must never reach a hub."""
    import torch.hub

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"tried to download {args[0] if args else kwargs}")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", refuse)
    wl = load_workload("lraspp_mobilenet_v3_large", inputs=[(1, 3, 64, 64)])
    assert wl.kind == "torchvision segmentation"
    out = run_once(wl)
    assert tuple(out["out"].shape) == (1, 21, 64, 64)


def test_example_inputs_are_seeded() -> None:
    a = load_workload("squeezenet1_0", check=False)
    b = load_workload("squeezenet1_0", check=False)
    assert torch.equal(a.inputs[0], b.inputs[0])


def test_inception_v3_gets_299() -> None:
    wl = load_workload("inception_v3")
    assert wl.input_shapes == [(1, 3, 299, 299)]
    assert not wl.module.training
    # no auxiliary head: the model returns a plain tensor
    out = run_once(wl)
    assert isinstance(out, torch.Tensor)
    assert tuple(out.shape) == (1, 1000)


@pytest.mark.parametrize("batch", [0, -1, 4097, True, 2.0])
def test_bad_batch_is_refused(batch: object) -> None:
    with pytest.raises(InvalidArgument) as info:
        load_workload("resnet18", batch=batch)  # type: ignore[arg-type]
    assert "batch" in str(info.value)
    assert "1..4096" in str(info.value)


def test_unknown_name_suggests_the_close_one() -> None:
    with pytest.raises(InvalidArgument) as info:
        load_workload("resnet5O")  # letter O, not zero
    msg = str(info.value)
    assert "'resnet5O'" in msg
    assert "did you mean" in msg
    assert "resnet50" in msg


def test_unknown_name_without_close_match_points_to_the_list() -> None:
    with pytest.raises(InvalidArgument) as info:
        load_workload("qqqqqqqqqqqq")
    assert "rooftune models" in str(info.value)


@pytest.mark.parametrize("name", ["", "   "])
def test_empty_name_is_refused(name: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        load_workload(name)
    assert str(info.value).startswith("invalid model ''")


# --------------------------------------------------------------------------------------------
# built-ins


def test_lstm_defaults() -> None:
    wl = load_workload("lstm")
    d = BUILTINS["lstm"].defaults
    assert wl.kind == "builtin"
    assert wl.options == d
    assert wl.input_shapes == [(1, d["seq_len"], d["input_size"])]
    assert wl.input_shapes == [(1, 64, 128)]
    rnn = wl.module.rnn
    assert type(rnn) is nn.LSTM
    assert (rnn.input_size, rnn.hidden_size, rnn.num_layers) == (128, 256, 2)
    assert rnn.batch_first is True
    assert rnn.bidirectional is False
    assert not wl.module.training
    out = run_once(wl)
    assert tuple(out.shape) == (1, 64, 256)


def test_lstm_options_change_the_module() -> None:
    opts = {"hidden": 32, "layers": 3, "seq_len": 5, "input_size": 7}
    wl = load_workload("lstm", options=opts, batch=2)
    rnn = wl.module.rnn
    assert (rnn.input_size, rnn.hidden_size, rnn.num_layers) == (7, 32, 3)
    assert wl.input_shapes == [(2, 5, 7)]
    assert wl.options == {**BUILTINS["lstm"].defaults, **opts}
    assert tuple(run_once(wl).shape) == (2, 5, 32)


def test_lstm_bidirectional_from_parsed_options() -> None:
    wl = load_workload("lstm", options=parse_options(["bidirectional=true", "hidden=8", "seq_len=3"]))
    assert wl.module.rnn.bidirectional is True
    assert tuple(run_once(wl).shape) == (1, 3, 16)


def test_unknown_builtin_option_lists_the_allowed_ones() -> None:
    with pytest.raises(InvalidArgument) as info:
        load_workload("lstm", options={"hiden": 32})
    msg = str(info.value)
    assert "'hiden'" in msg
    for key in BUILTINS["lstm"].defaults:
        assert key in msg
    assert "hidden (default 256)" in msg


@pytest.mark.parametrize("key,value", [("hidden", 0), ("layers", -1), ("seq_len", 0)])
def test_non_positive_builtin_option_is_refused(key: str, value: int) -> None:
    with pytest.raises(InvalidArgument) as info:
        load_workload("lstm", options={key: value})
    msg = str(info.value)
    assert key in msg
    assert repr(value) in msg
    assert "positive integer" in msg


@pytest.mark.parametrize("key,value", [("hidden", True), ("hidden", "big"), ("hidden", 2.5)])
def test_non_integer_builtin_option_is_refused(key: str, value: object) -> None:
    with pytest.raises(InvalidArgument, match="positive integer"):
        load_workload("lstm", options={key: value})


def test_bool_builtin_option_must_be_bool() -> None:
    with pytest.raises(InvalidArgument) as info:
        load_workload("gru", options={"bidirectional": 1})
    assert "true or false" in str(info.value)


def test_gru_loads_and_runs() -> None:
    wl = load_workload("gru")
    assert type(wl.module.rnn) is nn.GRU
    assert wl.input_shapes == [(1, 64, 128)]
    assert tuple(run_once(wl).shape) == (1, 64, 256)


def test_transformer_encoder_loads_and_runs() -> None:
    wl = load_workload("transformer-encoder")
    assert isinstance(wl.module, nn.TransformerEncoder)
    assert len(wl.module.layers) == 4
    assert wl.input_shapes == [(1, 128, 512)]
    assert tuple(run_once(wl).shape) == (1, 128, 512)


def test_transformer_encoder_options() -> None:
    wl = load_workload(
        "transformer-encoder", options={"layers": 1, "d_model": 16, "heads": 2, "ff": 32, "seq_len": 4}, batch=3
    )
    assert len(wl.module.layers) == 1
    assert wl.input_shapes == [(3, 4, 16)]
    assert wl.module.layers[0].self_attn.num_heads == 2


def test_transformer_d_model_not_divisible_by_heads() -> None:
    with pytest.raises(InvalidArgument) as info:
        load_workload("transformer-encoder", options={"d_model": 10, "heads": 3})
    msg = str(info.value)
    assert "d_model" in msg
    assert "10" in msg
    assert "heads=3" in msg


# --------------------------------------------------------------------------------------------
# package.module:callable


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """``user_module(source)`` writes a uniquely named module under tmp_path (on sys.path) and
    returns its name; every module written is dropped from sys.modules afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names: list[str] = []

    def write(source: str) -> str:
        name = f"rt_user_{uuid.uuid4().hex[:12]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        names.append(name)
        return name

    yield write
    for name in names:
        sys.modules.pop(name, None)


MODULE_ONLY = """
    import torch
    from torch import nn

    def make(width=4):
        torch.manual_seed(0)
        return nn.Linear(width, 2)
"""

WITH_EXAMPLE = """
    import torch
    from torch import nn

    def make():
        torch.manual_seed(0)
        return nn.Linear(4, 2), torch.arange(4.0).reshape(1, 4)

    def make_two_rows():
        return nn.Linear(4, 2), torch.arange(8.0).reshape(2, 4)
"""


def test_callable_without_inputs_asks_for_input(user_module: Callable[[str], str]) -> None:
    mod = user_module(MODULE_ONLY)
    with pytest.raises(WorkloadError) as info:
        load_workload(f"{mod}:make")
    msg = str(info.value)
    assert "--input" in msg
    assert f"{mod}:make" in msg


def test_callable_with_given_inputs(user_module: Callable[[str], str]) -> None:
    mod = user_module(MODULE_ONLY)
    wl = load_workload(f"{mod}:make", inputs=[(3, 4)])
    assert wl.kind == "callable"
    assert wl.name == f"{mod}:make"
    assert isinstance(wl.module, nn.Linear)
    assert not wl.module.training
    assert wl.input_shapes == [(3, 4)]
    assert tuple(run_once(wl).shape) == (3, 2)


def test_callable_receives_options(user_module: Callable[[str], str]) -> None:
    mod = user_module(MODULE_ONLY)
    wl = load_workload(f"{mod}:make", inputs=[(1, 6)], options={"width": 6})
    assert wl.module.in_features == 6
    assert wl.options == {"width": 6}


def test_callable_returning_module_and_example(user_module: Callable[[str], str]) -> None:
    mod = user_module(WITH_EXAMPLE)
    wl = load_workload(f"{mod}:make")
    assert wl.input_shapes == [(1, 4)]
    assert torch.equal(wl.inputs[0], torch.arange(4.0).reshape(1, 4))


def test_callable_example_is_repeated_to_batch(user_module: Callable[[str], str]) -> None:
    mod = user_module(WITH_EXAMPLE)
    wl = load_workload(f"{mod}:make", batch=3)
    assert wl.input_shapes == [(3, 4)]
    assert wl.batch == 3
    row = torch.arange(4.0)
    for i in range(3):
        assert torch.equal(wl.inputs[0][i], row)


def test_callable_example_of_two_rows_is_cut_to_batch(user_module: Callable[[str], str]) -> None:
    mod = user_module(WITH_EXAMPLE)
    wl = load_workload(f"{mod}:make_two_rows", batch=3)
    assert wl.input_shapes == [(3, 4)]
    ex = torch.arange(8.0).reshape(2, 4)
    assert torch.equal(wl.inputs[0], torch.cat([ex, ex[:1]]))


def test_callable_module_failing_on_import(user_module: Callable[[str], str]) -> None:
    mod = user_module('raise RuntimeError("boom at import\\nsecond line")\n')
    with pytest.raises(WorkloadError) as info:
        load_workload(f"{mod}:make")
    msg = str(info.value)
    assert "\n" not in msg
    assert f"cannot import '{mod}'" in msg
    assert "RuntimeError: boom at import" in msg
    assert "second line" not in msg


def test_a_model_whose_output_holds_no_tensor_is_refused_by_name() -> None:
    with pytest.raises(WorkloadError, match=r"^model 'tests.analysis.tiny_models:returns_text' returns a str that "
                       r"holds no tensor; return a tensor, or a tuple, list, dict or dataclass of tensors$"):
        load_workload("tests.analysis.tiny_models:returns_text")


def test_callable_module_not_found() -> None:
    with pytest.raises(WorkloadError) as info:
        load_workload("rt_no_such_module_xyz:make")
    assert "cannot import 'rt_no_such_module_xyz'" in str(info.value)
    assert "ModuleNotFoundError" in str(info.value)


def test_callable_attribute_missing(user_module: Callable[[str], str]) -> None:
    mod = user_module(MODULE_ONLY)
    with pytest.raises(WorkloadError) as info:
        load_workload(f"{mod}:nope", inputs=[(1, 4)])
    msg = str(info.value)
    assert "no attribute 'nope'" in msg
    assert f"'{mod}'" in msg


def test_callable_not_callable(user_module: Callable[[str], str]) -> None:
    mod = user_module("VALUE = 3\n")
    with pytest.raises(WorkloadError, match="'VALUE' is not callable"):
        load_workload(f"{mod}:VALUE", inputs=[(1, 4)])


def test_callable_raising(user_module: Callable[[str], str]) -> None:
    mod = user_module("def make():\n    raise ValueError('bad config')\n")
    with pytest.raises(WorkloadError) as info:
        load_workload(f"{mod}:make", inputs=[(1, 4)])
    assert "calling make() failed: ValueError: bad config" in str(info.value)


def test_callable_returning_non_module(user_module: Callable[[str], str]) -> None:
    mod = user_module("def make():\n    return 42\n")
    with pytest.raises(WorkloadError) as info:
        load_workload(f"{mod}:make", inputs=[(1, 4)])
    msg = str(info.value)
    assert "returned int" in msg
    assert "not an nn.Module" in msg


def test_callable_example_not_a_tensor(user_module: Callable[[str], str]) -> None:
    mod = user_module("from torch import nn\ndef make():\n    return nn.Linear(4, 2), [1, 2]\n")
    with pytest.raises(WorkloadError, match=r"its example inputs hold no tensor \(\['int', 'int'\]\)"):
        load_workload(f"{mod}:make")


def test_callable_model_failing_on_its_input(user_module: Callable[[str], str]) -> None:
    mod = user_module(MODULE_ONLY)
    with pytest.raises(WorkloadError) as info:
        load_workload(f"{mod}:make", inputs=[(1, 3)])
    msg = str(info.value)
    assert "fails on input 1x3" in msg
    assert "\n" not in msg
    assert msg.startswith(f"model '{mod}:make' fails on input 1x3: RuntimeError: ")


def test_callable_with_wrong_number_of_inputs(user_module: Callable[[str], str]) -> None:
    mod = user_module(WITH_EXAMPLE)
    with pytest.raises(InvalidArgument, match="takes 1 input"):
        load_workload(f"{mod}:make", inputs=[(1, 4), (1, 4)])


@pytest.mark.parametrize("spec", [":make", "somemodule:"])
def test_callable_spec_missing_a_part(spec: str) -> None:
    with pytest.raises(InvalidArgument, match="package.module:callable"):
        load_workload(spec)


# --------------------------------------------------------------------------------------------
# options


def test_parse_options_types() -> None:
    assert parse_options(["hidden=512", "bidirectional=true", "name=abc"]) == {
        "hidden": 512,
        "bidirectional": True,
        "name": "abc",
    }


def test_parse_options_values() -> None:
    got = parse_options(["a=FALSE", "b=2.5", "c=[1, 2]", "d = 7 ", "e="])
    assert got == {"a": False, "b": 2.5, "c": [1, 2], "d": 7, "e": ""}
    assert type(got["d"]) is int


def test_parse_options_empty() -> None:
    assert parse_options([]) == {}


@pytest.mark.parametrize("item", ["novalue", "=3", "a b=1", "1x=2"])
def test_parse_options_rejects(item: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        parse_options([item])
    msg = str(info.value)
    assert repr(item) in msg
    assert "KEY=VALUE" in msg


@pytest.mark.parametrize("item", ["x={[1]: 2}", "x={{}}"])
def test_parse_options_unhashable_literal_is_not_a_crash(item: str) -> None:
    try:
        got = parse_options([item])
    except InvalidArgument:
        return
    assert got == {"x": item.partition("=")[2]}  # or kept as the string


# --------------------------------------------------------------------------------------------
# .pt2 files


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


@pytest.fixture(scope="module")
def pt2_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    example = (torch.randn(3, 4),)
    ep = torch.export.export(_Tiny().eval(), example)
    path = tmp_path_factory.mktemp("pt2") / "m.pt2"
    torch.export.save(ep, str(path))
    return path


def test_pt2_loads(pt2_file: Path) -> None:
    wl = load_workload(str(pt2_file))
    assert wl.kind == "torch.export"
    assert wl.name == "m.pt2"
    assert wl.input_shapes == [(3, 4)]
    assert wl.exported is not None
    assert tuple(run_once(wl).shape) == (3, 2)


def test_pt2_refuses_options(pt2_file: Path) -> None:
    with pytest.raises(InvalidArgument, match="takes no options"):
        load_workload(str(pt2_file), options={"hidden": 3})


def test_pt2_static_batch_mismatch_is_a_workload_error(pt2_file: Path) -> None:
    with pytest.raises(WorkloadError) as info:
        load_workload(str(pt2_file), batch=5)
    assert "fails on input 5x4" in str(info.value)
    assert "\n" not in str(info.value)


class _Keyword(nn.Module):
    def forward(self, x: torch.Tensor, *, y: torch.Tensor) -> torch.Tensor:
        return x + y


class _Nested(nn.Module):
    def forward(self, xs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return xs[0] * xs[1]


@pytest.mark.parametrize("module,args,kwargs,names", [
    (_Keyword(), (torch.randn(2, 3),), {"y": torch.randn(2, 3)}, ("x", "y")),
    (_Nested(), ((torch.randn(2, 3), torch.randn(2, 3)),), {}, ("xs[0]", "xs[1]")),
])
def test_pt2_with_keyword_or_nested_inputs_runs_with_its_tensors_in_order(
        tmp_path: Path, module: nn.Module, args: tuple, kwargs: dict, names: tuple) -> None:
    path = tmp_path / "odd.pt2"
    torch.export.save(torch.export.export(module, args, kwargs), str(path))
    wl = load_workload(str(path))
    assert wl.call is not None and wl.call.names == names and len(wl.inputs) == 2
    with torch.no_grad():
        assert torch.allclose(run_once(wl), module(*args, **kwargs))
    # exported again with the tensors in order: what the runtimes convert and the analysis reads
    assert len(wl.exported.graph_signature.user_inputs) == 2


def test_pt2_with_an_argument_that_is_not_a_tensor_is_refused_by_name(tmp_path: Path) -> None:
    from tests.analysis.tiny_models import keywords

    module, args, kwargs = keywords()
    path = tmp_path / "scaled.pt2"
    torch.export.save(torch.export.export(module.eval(), args, kwargs), str(path))
    with pytest.raises(WorkloadError, match=r"was exported with arguments that are not tensors \(scale = 0.5\); "
                                            r"export it with tensor inputs only"):
        load_workload(str(path))
    # a None among them is one too: the program holds it as an input and does not export again around it
    kwargs.pop("scale")
    kwargs["extra"]["none"] = None
    torch.export.save(torch.export.export(module.eval(), args, kwargs), str(path))
    with pytest.raises(WorkloadError, match=r"arguments that are not tensors \(extra\['none'\] = None\)"):
        load_workload(str(path))


@pytest.mark.parametrize("builder", ["keywords", "keywords_only"])
def test_a_callable_called_with_keywords_nesting_and_values_runs_as_its_example(builder: str) -> None:
    """The module takes the example's tensors in order and makes the example's call; its layers keep
    their names and weights, and values that are not tensors stay as given."""
    from tests.analysis import tiny_models

    wl = load_workload(f"tests.analysis.tiny_models:{builder}")
    module, (x,), kwargs = tiny_models.keywords()
    assert wl.call.names == ("x", "extra['bias']", "extra['gain'][0]")
    assert [n for n, _ in wl.module.named_modules()] == ["", "conv", "fc"]
    assert [t.shape for t in wl.inputs] == [x.shape, (1, 8), ()]
    if builder == "keywords_only":
        kwargs.pop("scale")
    with torch.no_grad():
        assert torch.allclose(run_once(wl), module.eval()(x, **kwargs))
    assert wl.describe().endswith("input x 1x3x16x16, extra['bias'] 1x8, extra['gain'][0] scalar)")
    wide = load_workload("tests.analysis.tiny_models:keywords", inputs=[(1, 3, 8, 8), (1, 8), ()])
    assert wide.inputs[0].shape == (1, 3, 8, 8)
    # --input shapes with --batch: the batched ones resized, the scalar left as it is
    two = load_workload("tests.analysis.tiny_models:keywords", inputs=[(1, 3, 8, 8), (1, 8), ()], batch=2)
    assert two.input_shapes == [(2, 3, 8, 8), (2, 8), ()] and run_once(two).shape == (2, 5)
    assert wl.call.describe() == ("model(tensor, extra={'bias': tensor, 'gain': [tensor]}, scale=0.5)"
                                  if builder == "keywords" else "model(x=tensor, extra={'bias': tensor, 'gain': [tensor]})")


CALLS = """
import dataclasses
import functools
import torch
from torch import nn


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, *, scale=1.0):
        return self.fc(x) * scale


def example():
    return (torch.randn(1, 4),), {"scale": 3.0}


def forward_on_the_object():
    m = Scaled()
    m.forward = functools.partial(Scaled.forward, m)  # as accelerate's hooks wrap it
    return (m, *example())


class OwnCall(Scaled):
    def __call__(self, x, **kw):
        return super().__call__(x, **kw)


def own_call():
    return (OwnCall(), *example())


def hooked():
    m = Scaled()
    m.register_forward_pre_hook(lambda mod, args, kwargs: None, with_kwargs=True)
    return (m, *example())


class ScaledPositional(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, scale: float = 1.0):
        return self.fc(x) * scale


def scripted():
    return (torch.jit.script(ScaledPositional()), *example())


@dataclasses.dataclass
class Batch:
    ids: torch.Tensor


class TakesBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, b):
        return self.fc(x + b.ids)


def batch_object():
    return TakesBatch(), (torch.randn(1, 4), Batch(torch.randn(1, 4)))


class Registered(nn.Module):
    seen = set()

    def __init_subclass__(cls, **kw):
        if cls.__name__ in Registered.seen:
            raise ValueError(f"{cls.__name__} registered twice")
        Registered.seen.add(cls.__name__)

    def forward(self, x, *, scale=1.0):
        return x * scale


class R(Registered):
    pass


def registry():
    return (R(), *example())


class Table(nn.Module):
    def forward(self, x, *, table):
        return x @ table.T


def table():
    return Table(), (torch.randn(1, 4),), {"table": torch.randn(16, 4)}


class TakesDict(nn.Module):
    def forward(self, batch):
        return batch["image"] * 2


def dict_argument():
    return TakesDict(), {"image": torch.randn(1, 4)}
"""


@pytest.mark.parametrize("builder,why", [
    ("forward_on_the_object", "its forward is set on the object itself (a hook library's wrapper)"),
    ("own_call", "its class OwnCall defines its own __call__"),
    ("hooked", "it has forward hooks on itself, which would see its tensors in order rather than the call"),
    ("scripted", "it is a TorchScript module: give the Python module it was scripted from"),
    ("batch_object", "its argument b is a Batch holding tensors, which rooftune cannot take apart"),
    ("registry", "its class R cannot be subclassed (ValueError: R registered twice)"),
])
def test_a_call_rooftune_cannot_take_apart_is_refused_by_name(user_module: Callable[[str], str], builder: str,
                                                             why: str) -> None:
    """Where the model's call would not go through its class's forward with the call's arguments,
    or an argument hides tensors, the model is refused, not run otherwise than the user runs it."""
    mod = user_module(CALLS)
    with pytest.raises(WorkloadError) as info:
        load_workload(f"{mod}:{builder}")
    assert str(info.value).startswith(f"model '{mod}:{builder}' is called with keywords or nested inputs, and {why}")


def test_a_dict_example_whose_keys_forward_does_not_take_is_its_one_argument(user_module: Callable[[str], str]) -> None:
    mod = user_module(CALLS)
    wl = load_workload(f"{mod}:dict_argument")
    assert wl.call.names == ("batch['image']",) and run_once(wl).shape == (1, 4)


def test_batch_resizes_the_inputs_batched_like_the_first_only(user_module: Callable[[str], str]) -> None:
    mod = user_module(CALLS)
    wl = load_workload(f"{mod}:table", batch=3)
    assert wl.input_shapes == [(3, 4), (16, 4)] and run_once(wl).shape == (3, 16)
    given = load_workload(f"{mod}:table", inputs=[(1, 4), (16, 4)], batch=3)
    assert given.input_shapes == [(3, 4), (16, 4)]


def test_missing_pt2_is_invalid_argument(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pt2"
    with pytest.raises(InvalidArgument) as info:
        load_workload(str(missing))
    msg = str(info.value)
    assert str(missing) in msg
    assert "no such file" in msg


def test_garbage_pt2_is_workload_error(tmp_path: Path) -> None:
    bad = tmp_path / "x.pt2"
    bad.write_bytes(b"not a zip archive" * 8)
    with pytest.raises(WorkloadError) as info:
        load_workload(str(bad))
    msg = str(info.value)
    assert "not a torch.export file" in msg
    assert str(bad) in msg
    assert "\n" not in msg


@pytest.mark.parametrize("name,options", [
    ("lstm", {}), ("lstm", {"bidirectional": True, "layers": 3, "hidden": 32}), ("gru", {"hidden": 48, "input_size": 7}),
    ("transformer-encoder", {"layers": 2, "d_model": 32, "heads": 4, "ff": 64}),
])
def test_a_builtin_counts_its_weights_before_building(name: str, options: dict) -> None:
    from rooftune.workload.builtin import BUILTINS

    b = BUILTINS[name]
    opts = b.options(options)
    assert b.parameters(opts) == sum(p.numel() for p in b.build(opts).parameters())

"""The conv graph, the solvers (against brute force), rewriting with verification and fallback,
saving and loading a selection, and the select/train CLI."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rooftune.cli import main
from rooftune.errors import InvalidArgument
from rooftune.perfmodel import PerfModel, save_model
from rooftune.primitives import ConvSpec, to_layout
from rooftune.selection import (
    CostTable,
    SelectedConv,
    Selection,
    best_uniform,
    conv_graph,
    layout_aware,
    load_selected,
    per_layer,
    rewrite,
    save_selection,
    select,
    uniform,
    verify,
)
from rooftune.selection.graph import ConvGraph
from rooftune.selection.rewrite import selected_layers
from rooftune.selection.solve import Choice, _selection

PRIMS = ["pytorch-default", "onednn-nhwc", "im2col-gemm", "winograd-f2x2"]


class Block(torch.nn.Module):
    """conv -> bn -> relu -> conv, plus a 1x1 shortcut: a DAG of three convolutions."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.b = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.short = torch.nn.Conv2d(8, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.b(torch.relu(self.bn(self.a(x))))) + self.short(x)


def _model() -> tuple[torch.nn.Module, list[torch.Tensor]]:
    torch.manual_seed(0)
    m = torch.nn.Sequential(Block(), torch.nn.Conv2d(16, 4, 3, padding=1)).eval()
    return m, [torch.randn(1, 8, 12, 12)]


def test_graph_follows_data_through_other_ops() -> None:
    m, x = _model()
    g = conv_graph(m, x)
    assert g.names == ["0.a", "0.b", "0.short", "1"] and g.traced
    assert set(g.edges) == {(0, 1), (1, 3), (2, 3)} and g.inputs == [0, 2] and not g.is_chain
    assert g.specs[0] == ConvSpec(1, 8, 12, 12, 16, 3, 3, padding=1)


def _brute(table: CostTable) -> float:
    best = np.inf
    for pick in itertools.product(range(len(table.primitives)), repeat=len(table.graph)):
        if all(np.isfinite(table.times[i, p]) for i, p in enumerate(pick)):
            best = min(best, _selection(table, pick, "x").total_s)
    return best


@pytest.mark.parametrize("chain", [True, False])
def test_layout_aware_solvers_are_exact(chain: bool) -> None:
    rng = np.random.default_rng(1)
    n = 5
    edges = [(i, i + 1) for i in range(n - 1)] if chain else [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4)]
    spec = ConvSpec(1, 8, 8, 8, 8, 3, 3, padding=1)
    g = ConvGraph([f"c{i}" for i in range(n)], [spec] * n, edges, [0])
    for trial in range(5):
        times = rng.uniform(1, 2, size=(n, len(PRIMS)))
        times[rng.integers(n), 3] = np.inf  # a primitive that does not apply somewhere
        table = CostTable(g, PRIMS, times, rng.uniform(0.1, 1.5, size=n), np.zeros(n, bool))
        sel = layout_aware(table)
        assert sel.total_s == pytest.approx(_brute(table)), trial
        assert sel.total_s <= per_layer(table).total_s + 1e-12
        assert sel.total_s <= best_uniform(table).total_s + 1e-12


def test_conversions_change_the_choice() -> None:
    spec = ConvSpec(1, 8, 8, 8, 8, 3, 3, padding=1)
    g = ConvGraph(["a", "b", "c"], [spec] * 3, [(0, 1), (1, 2)], [0])
    # the NHWC primitive is a little faster on the middle layer only; converting costs more
    times = np.array([[1.0, 1.1, 9, 9], [1.0, 0.9, 9, 9], [1.0, 1.1, 9, 9]])
    table = CostTable(g, PRIMS, times, np.full(3, 0.5), np.zeros(3, bool))
    assert [c.primitive for c in per_layer(table).choices][1] == "onednn-nhwc"
    assert [c.primitive for c in layout_aware(table).choices] == ["pytorch-default"] * 3
    assert uniform(table, "winograd-f2x2").total_s == pytest.approx(27)


def test_rewrite_verify_and_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m, x = _model()
    g = conv_graph(m, x)
    names = ["onednn-nhwc", "im2col-gemm", "pytorch-default", "winograd-f2x2"]
    sel = Selection("test", [Choice(n, s, p, 1.0) for n, s, p in zip(g.names, g.specs, names, strict=True)])
    new = rewrite(m, sel)
    assert isinstance(new[0].a, SelectedConv) and not isinstance(m[0].a, SelectedConv)  # the original is kept
    v = verify(m, new, x)
    assert v.ok and v.max_rel < 1e-3 and not v.fallbacks
    with torch.no_grad():
        assert torch.allclose(new(*x), m(*x), atol=1e-4)
        other = torch.randn(2, 8, 12, 12)  # a shape it was not selected for runs the original convolutions
        assert torch.allclose(new(other), m(other), atol=1e-5)
    # a primitive that returns a wrong answer on the real activation falls back to the default path
    bad = rewrite(m, sel)
    run = bad[0].b.kernel.run
    monkeypatch.setattr(bad[0].b.kernel, "run", lambda t: run(t) * 1.5)
    v = verify(m, bad, x)
    assert v.ok and [f["layer"] for f in v.fallbacks] == ["0.b"] and bad[0].b.fallback
    # saving and loading a selection rebuilds the same module
    from rooftune.selection import SelectResult

    r = SelectResult("resnet18", 1, 1, "p", len(g), sel, v, 0.0, module=bad)
    save_selection(r, tmp_path / "sel")
    doc = json.loads((tmp_path / "sel" / "selection.json").read_text())
    assert doc["selection"]["layers"][1]["primitive"] == "im2col-gemm" and (tmp_path / "sel" / "load.py").is_file()
    again = load_selected(tmp_path / "sel" / "selection.json", module=m)
    assert again[0].b.fallback and again[0].a.primitive == "onednn-nhwc"
    with torch.no_grad():
        assert torch.allclose(again(*x), m(*x), atol=1e-4)


def test_the_rewritten_model_is_verified_on_every_output_each_on_its_own_scale() -> None:
    """A wrong small second output fails the end-to-end check, where comparing the outputs joined
    end to end would have hidden it under the first one's scale."""
    from tests.analysis.tiny_models import two_heads

    m, x = two_heads()
    m.eval()
    g = conv_graph(m, (x,))
    sel = Selection("heads", [Choice(n, s, "im2col-gemm", 1.0) for n, s in zip(g.names, g.specs, strict=True)])
    new = rewrite(m, sel)
    v = verify(m, new, (x,))
    assert v.ok and v.max_rel < 1e-3 and v.outputs == 2 and v.to_dict()["outputs"] == 2

    class Flipped(torch.nn.Module):  # the selected model with its embedding's sign flipped
        def __init__(self) -> None:
            super().__init__()
            self.inner = new

        def forward(self, t: torch.Tensor) -> dict[str, torch.Tensor]:
            out = self.inner(t)
            return {"logits": out["logits"], "embedding": -out["embedding"]}

    v = verify(m, Flipped(), (x,))
    assert not v.ok and v.cosine < 0
    short = verify(m, torch.nn.Sequential(m.conv), (x,))  # another number of outputs
    assert not short.ok


class _Padded(torch.nn.Module):
    """Convolutions that pad otherwise than a primitive's symmetric zeros, and one with no primitive."""

    def __init__(self) -> None:
        super().__init__()
        self.reflect = torch.nn.Conv2d(3, 8, 3, padding=1, padding_mode="reflect")
        self.same = torch.nn.Conv2d(8, 8, 3, padding="same", dilation=2, bias=False)
        self.even = torch.nn.Conv2d(8, 8, (2, 4), padding="same")
        self.circular = torch.nn.Conv2d(8, 8, 3, padding=(1, 2), padding_mode="circular", stride=2)
        self.up = torch.nn.ConvTranspose2d(8, 4, 2, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(self.circular(self.even(torch.relu(self.same(self.reflect(x))))))


@pytest.mark.parametrize("primitive", ["onednn-nhwc", "im2col-gemm", "pytorch-default"])
def test_padding_modes_and_same_padding_run_as_the_layer_does(primitive: str) -> None:
    torch.manual_seed(0)
    m, x = _Padded().eval(), [torch.randn(1, 3, 11, 13)]
    g = conv_graph(m, x)
    assert g.names == ["reflect", "same", "even", "circular"] and g.skipped == {"up": "ConvTranspose2d"}
    # the explicit padding moves into the spec's input; a symmetric 'same' stays the layer's padding
    assert g.specs[0] == ConvSpec(1, 3, 13, 15, 8, 3, 3)
    assert g.specs[1] == ConvSpec(1, 8, 11, 13, 8, 3, 3, padding=2, dilation=2)
    assert g.specs[2] == ConvSpec(1, 8, 12, 16, 8, 2, 4)  # (2, 4) 'same': 0/1 rows, 1/2 columns
    assert g.specs[3] == ConvSpec(1, 8, 13, 17, 8, 3, 3, stride=2)
    sel = Selection("test", [Choice(n, s, primitive, 1.0) for n, s in zip(g.names, g.specs, strict=True)])
    new = rewrite(m, sel)
    v = verify(m, new, x)
    assert v.ok and not v.fallbacks and v.max_rel < 1e-5
    with torch.no_grad():
        assert torch.allclose(new(*x), m(*x), atol=1e-5)


def test_the_layer_check_holds_the_primitive_to_the_layers_own_padding(monkeypatch: pytest.MonkeyPatch) -> None:
    """A primitive that zero-pads a reflect-padded layer is caught on the layer, not averaged away."""
    torch.manual_seed(0)
    m, x = _Padded().eval(), [torch.randn(1, 3, 11, 13)]
    g = conv_graph(m, x)
    sel = Selection("test", [Choice(n, s, "onednn-nhwc", 1.0) for n, s in zip(g.names, g.specs, strict=True)])
    new = rewrite(m, sel)
    run = new.reflect.kernel.run
    # the reflected border replaced by zeros before the kernel runs: the border differs, the middle not
    monkeypatch.setattr(new.reflect.kernel, "run",
                        lambda t: run(to_layout(F.pad(t[..., 1:-1, 1:-1], (1, 1, 1, 1)), new.reflect.layout)))
    v = verify(m, new, x)
    assert [f["layer"] for f in v.fallbacks] == ["reflect"] and v.ok


def test_select_takes_a_module_with_its_inputs_and_saves_a_loader_for_it(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m, x = _Padded().eval(), [torch.randn(1, 3, 11, 13)]
    r = select(m, inputs=x, db=str(tmp_path / "r.db"), measure_s=None)
    assert r.verification.ok and len(r.selection.choices) == 4
    assert any("left on PyTorch's own path" in n and "up (ConvTranspose2d)" in n for n in r.notes)
    assert f"no oracle: 4 layer(s) not profiled on this platform at {r.threads} threads" in r.notes
    save_selection(r, tmp_path / "sel")
    namespace: dict[str, object] = {}
    exec((tmp_path / "sel" / "load.py").read_text().replace("Path(__file__)", f"Path({str(tmp_path / 'sel' / 'load.py')!r})"), namespace)
    again = namespace["load"](m)  # type: ignore[operator]
    with torch.no_grad():
        assert torch.allclose(again(*x), m(*x), atol=1e-5)
    # the caller's module keeps each submodule's mode (the selection runs a copy in eval mode), a
    # frozen part of a model in training too; also when the selection is refused
    m.train()
    frozen = list(m.children())[0].eval()
    modes = {n: sub.training for n, sub in m.named_modules()}
    assert not frozen.training and m.training
    r = select(m, inputs=x, db=str(tmp_path / "r.db"), measure_s=None)
    assert {n: sub.training for n, sub in m.named_modules()} == modes
    assert r.module is not None and not r.module.training
    with pytest.raises(InvalidArgument):
        select(m, inputs=[1.0], db=str(tmp_path / "r.db"), measure_s=None)
    assert {n: sub.training for n, sub in m.named_modules()} == modes
    m.eval()
    up = torch.nn.Sequential(torch.nn.ConvTranspose2d(3, 4, 2, stride=2)).eval()
    with pytest.raises(InvalidArgument, match=r"no 2-D convolution .* \(it has 1: ConvTranspose2d; `rooftune tune`"):
        select(up, inputs=x, db=str(tmp_path / "r.db"), measure_s=None)
    for bad, allowed in [(dict(model=m), "needs its example inputs"), (dict(model=m, inputs=[1.0]), "needs its example inputs"),
                         (dict(model="resnet18", inputs=x), "only with a module"), (dict(model=3), "a model name or")]:
        with pytest.raises(InvalidArgument, match=allowed):
            select(bad.pop("model"), db=str(tmp_path / "r.db"), measure_s=None, **bad)


def test_select_takes_a_module_called_with_keywords_and_its_loader_rewrites_the_users_module(tmp_path: Path) -> None:
    from tests.analysis.tiny_models import keywords

    m, args, kwargs = keywords()
    m.eval()
    r = select(m, inputs=args, kwargs=kwargs, db=str(tmp_path / "r.db"), measure_s=None)
    assert r.verification.ok and [c.layer for c in r.selection.choices] == ["conv"]
    save_selection(r, tmp_path / "sel")
    again = load_selected(tmp_path / "sel" / "selection.json", m)
    with torch.no_grad():
        assert torch.allclose(again(*args, **kwargs), m(*args, **kwargs), atol=1e-5)
    with pytest.raises(InvalidArgument, match="needs its example inputs, tensors"):
        select(m, inputs=[1.0], db=str(tmp_path / "r.db"), measure_s=None)


def test_optimize_exports_a_module_called_with_keywords(tmp_path: Path) -> None:
    from rooftune.pipeline import _export
    from rooftune.workload import load_workload, run_once
    from tests.analysis.tiny_models import keywords

    m, args, kwargs = keywords()
    kwargs.pop("scale")
    path = _export(m, args, tmp_path, kwargs)
    wl = load_workload(path)
    assert wl.call.names == ("x", "extra['bias']", "extra['gain'][0]")
    with torch.no_grad():
        assert torch.allclose(run_once(wl), m.eval()(*args, **kwargs))
    with pytest.raises(InvalidArgument, match=r"^invalid example inputs 'scale': tensors only"):
        _export(m, args, tmp_path, {**kwargs, "scale": 0.5})


def test_a_network_that_fails_end_to_end_falls_back_layer_by_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every layer passes its own check but the whole output disagrees: the lossy primitives fall
    back first, then, if it still disagrees, every layer; a tiny output (~1e-10) is no failure."""
    import rooftune.selection.network as selection
    from rooftune.selection.rewrite import Verification

    m, x = _model()
    g = conv_graph(m, x)
    names = ["onednn-nhwc", "im2col-gemm", "pytorch-default", "winograd-f2x2"]
    sel = Selection("test", [Choice(n, s, p, 1.0) for n, s, p in zip(g.names, g.specs, names, strict=True)])
    tiny = torch.nn.Sequential(m, _Scale(1e-12))
    assert selection._candidate("s", tiny, Selection("test", [Choice("0." + c.layer, c.spec, c.primitive, 1.0)
                                                                for c in sel.choices]), x).verification.ok
    calls = []

    def only_all_default(original: torch.nn.Module, rewritten: torch.nn.Module, inputs: list) -> Verification:
        layers = selected_layers(rewritten)
        own = []
        if not calls:  # the first look: layer 0.a fails its own check
            layers[0][1].fallback = True
            own = [{"layer": "0.a", "primitive": layers[0][1].primitive, "reason": "its own check"}]
        state = [mod.fallback for _, mod in layers]
        calls.append(state)
        return Verification(all(state), 0.5, 0.5, 1e-3, own)

    monkeypatch.setattr(selection, "verify", only_all_default)
    c = selection._candidate("s", m, sel, x)
    assert c.verification.ok and len(calls) == 3
    assert calls[1] == [True, False, False, True]  # the Winograd layer next
    # then all; each layer named once, with the reason it fell back for
    assert [(f["layer"], f["reason"]) for f in c.verification.fallbacks] == [
        ("0.a", "its own check"), ("1", "end-to-end check failed"), ("0.b", "end-to-end check failed"),
        ("0.short", "end-to-end check failed")]
    with torch.no_grad():
        assert torch.equal(c.module(*x), m(*x))
    # no lossy primitive: the same network is not verified twice
    calls.clear()
    exact = Selection("test", [Choice(ch.layer, ch.spec, "im2col-gemm", 1.0) for ch in sel.choices])
    c = selection._candidate("s", m, exact, x)
    assert c.verification.ok and len(calls) == 2


class _Scale(torch.nn.Module):
    def __init__(self, s: float) -> None:
        super().__init__()
        self.s = s

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return y * self.s


def _tiny_model_file(tmp_path: Path) -> Path:
    from rooftune.profiling import sample_specs

    specs = sample_specs(60, seed=0)
    prims = ["pytorch-default", "onednn-nhwc", "onednn-prepacked-nhwc", "im2col-gemm"]
    rate = {"pytorch-default": 30e9, "onednn-nhwc": 35e9, "onednn-prepacked-nhwc": 50e9, "im2col-gemm": 10e9}
    times = np.asarray([[s.flops / rate[p] + 1e-5 for p in prims] for s in specs])
    m = PerfModel("rf", n_estimators=20).fit(specs, times, prims, conversions=[(s, 1e-6) for s in specs])
    return save_model(m, tmp_path / "m.rtmodel")


def test_select_cli_rewrites_verifies_and_saves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model_file = _tiny_model_file(tmp_path)
    db = str(tmp_path / "r.db")
    code = main(["select", "resnet18", "--model", str(model_file), "--no-measure", "--json", "--db", db,
                 "--save", str(tmp_path / "out")])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert d["layers"] == 20 and d["verification"]["ok"]
    used = {c["primitive"] for c in d["selection"]["layers"]}
    assert "onednn-prepacked-nhwc" in used and "im2col-gemm" not in used
    assert "best-uniform" in d["others"] and any("no oracle" in n for n in d["notes"])
    assert (tmp_path / "out" / "selection.json").is_file()


def test_select_cli_takes_the_input_shape_of_a_module_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A callable returning its module alone needs --input, as analyze, tune and optimize take it;
    a module object with shapes is refused."""
    from rooftune.errors import InvalidArgument
    from rooftune.selection import select

    code = main(["select", "tests.analysis.tiny_models:small_cnn_module", "--input", "1x3x32x32", "--model",
                 str(_tiny_model_file(tmp_path)), "--no-measure", "--json", "--db", str(tmp_path / "r.db")])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert d["layers"] == 2 and d["verification"]["ok"]
    with pytest.raises(InvalidArgument, match="allowed only with a model name"):
        select(torch.nn.Conv2d(3, 8, 3), inputs=[torch.randn(1, 3, 8, 8)], shapes=[(1, 3, 8, 8)], measure_s=None)


def test_a_measured_faster_candidate_becomes_the_selection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The best uniform primitive beats the predicted selection with its whole CI: it is returned
    (and measured against vanilla again); with a CI that reaches 1 the prediction stays."""
    from types import SimpleNamespace

    import rooftune.bench

    model_file = _tiny_model_file(tmp_path)
    calls: list[str] = []

    def run_with(uniform_ci: tuple[float, float]) -> object:
        def fake_compare(fn_a: object, fn_b: object, *, label_a: str, label_b: str, **_: object) -> SimpleNamespace:
            calls.append(label_a)
            ratio, ci = (0.9, uniform_ci) if label_a == "best-uniform" else (1.3, (1.25, 1.35))
            return SimpleNamespace(ratio=ratio, ci=ci, a=SimpleNamespace(median=ratio * 1e-3),
                                   b=SimpleNamespace(median=1e-3), warnings=())

        monkeypatch.setattr(rooftune.bench, "compare", fake_compare)
        calls.clear()
        return select("resnet18", model_path=str(model_file), db=str(tmp_path / "r.db"), measure_s=1.0)

    kept = run_with((0.85, 1.01))
    assert kept.selection.strategy == "layout-aware" and set(kept.comparisons) == {"vanilla", "best-uniform"}
    assert "predicted" not in kept.others and len(calls) == 2
    # the table names the uniform selection's primitive; the others keep their names
    uniform = kept.others["best-uniform"]["strategy"].split(":", 1)[1]
    assert kept.label("best-uniform") == f"best-uniform ({uniform})" and kept.label("vanilla") == "vanilla"
    r = run_with((0.88, 0.92))
    assert r.selection.strategy.startswith("uniform") and r.verification.ok
    assert set(r.comparisons) == {"vanilla", "predicted"} and r.comparisons["vanilla"]["speedup"] == 1.3
    p = r.comparisons["predicted"]
    assert p["speedup"] == pytest.approx(1 / 0.9) and p["ci"] == pytest.approx([1 / 0.92, 1 / 0.88])
    assert r.others["predicted"]["strategy"] == "layout-aware" and "best-uniform" not in r.others
    assert calls == ["vanilla", "best-uniform", "vanilla"]  # the new selection measured against vanilla
    assert any("it is the selection returned (and the one --save writes)" in n for n in r.notes)
    own = select("resnet18", model_path=str(model_file), db=str(tmp_path / "r.db"), measure_s=1.0, promote=False)
    assert own.selection.strategy == "layout-aware" and "best-uniform" in own.comparisons
    with torch.no_grad():
        x = torch.randn(1, 3, 224, 224)
        assert {m.primitive for _, m in selected_layers(r.module)} == {r.selection.choices[0].primitive}
        r.module(x)


def test_select_and_train_cli_reject_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "r.db")
    assert main(["select", "resnet18", "--strategy", "greedy", "--no-measure", "--model",
                 str(_tiny_model_file(tmp_path)), "--db", db]) != 0
    e = capsys.readouterr().err
    assert "strategy" in e and "Traceback" not in e
    assert main(["select", "resnet18", "--model", str(tmp_path / "nope.rtmodel"), "--db", db]) != 0
    assert "does not exist" in capsys.readouterr().err
    assert main(["train", "--db", db]) != 0
    e = capsys.readouterr().err
    assert "no store at" in e and "rooftune profile" in e and not Path(db).exists()  # not created empty
    from rooftune.store import Store

    Store(db).close()
    assert main(["train", "--db", db]) != 0
    e = capsys.readouterr().err
    assert "no profiled convolutions" in e and "rooftune profile" in e
    assert main(["train", "--estimator", "svm", "--db", db]) != 0
    assert "estimator" in capsys.readouterr().err


def test_train_cli_evaluates_and_saves(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import functools

    import rooftune.perfmodel.regressors as regressors
    from rooftune.perfmodel import load_model

    # What the command does, not how well the mlp fits (tests/perfmodel checks that): one net of
    # 800 epochs instead of five of 1500, the parameters' signature kept for get_params
    full = regressors.PerfModel.__init__

    @functools.wraps(full)
    def small(self, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
        kwargs.setdefault("n_nets", 1)
        kwargs.setdefault("epochs", 800)
        full(self, *args, **kwargs)

    monkeypatch.setattr(regressors.PerfModel, "__init__", small)
    from rooftune.platform import current_platform
    from rooftune.profiling import sample_specs
    from rooftune.store import Store

    prims = {"pytorch-default": 30e9, "onednn-nhwc": 35e9, "im2col-gemm": 10e9}
    rows = []
    for i, s in enumerate(sample_specs(48, seed=2)):
        for p, rate in prims.items():
            rows.append({"spec_key": s.key(), "spec": s.to_dict(), "primitive": p, "threads": 1, "status": "ok",
                         "median_s": s.flops / rate + 1e-5, "iqr_s": 0.0, "repetitions": 10, "reason": "",
                         "warnings": [], "sources": [f"net{i % 3}"]})
        rows.append({"spec_key": s.key(), "spec": s.to_dict(), "primitive": "transform:nchw-to-nhwc", "threads": 1,
                     "status": "ok", "median_s": 1e-6 * (1 + i), "iqr_s": 0.0, "repetitions": 10, "reason": "",
                     "warnings": [], "sources": [f"net{i % 3}"]})
    db = str(tmp_path / "p.db")
    with Store(db) as st:
        st.save_profiles(current_platform(), rows)
    code = main(["train", "--eval", "--json", "--estimator", "rf", "--save", str(tmp_path / "m.rtmodel"), "--db", db])
    assert code == 0
    r = json.loads(capsys.readouterr().out)
    assert r["networks"] == ["net0", "net1", "net2"] and set(r["regressors"]) == {"gbr", "rf", "mlp", "mlp/roofline"}
    assert r["regressors"]["gbr"]["spearman"] > 0.8 and r["select_time"]["layers"] == 53
    m = load_model(tmp_path / "m.rtmodel")
    assert m.estimator == "rf" and m.provenance_["specs"] == 48 and m.conversion_ is not None
    assert main(["train", "--save", str(tmp_path / "default.rtmodel"), "--db", db]) == 0
    assert load_model(tmp_path / "default.rtmodel").estimator == "mlp"  # the shipped model's kind
    assert load_model(tmp_path / "default.rtmodel").target_ == "roofline"  # auto: the mlp's default
    assert main(["train", "--target", "time", "--save", str(tmp_path / "time.rtmodel"), "--db", db]) == 0
    assert load_model(tmp_path / "time.rtmodel").target_ == "time"
    assert main(["train", "--target", "roofline", "--estimator", "gbr", "--db", db]) != 0
    assert "invalid --target 'roofline': allowed with the mlp only" in capsys.readouterr().err
    assert main(["train", "--target", "seconds", "--db", db]) != 0
    assert "invalid --target 'seconds': allowed auto, time, per_flop, roofline" in capsys.readouterr().err
    assert main(["train", "--eval", "--held-out", "resnet50", "--db", db]) != 0
    assert "profiled networks: net0, net1, net2" in capsys.readouterr().err


def test_fast_algorithms_are_kept_only_if_the_network_runs_faster() -> None:
    """Winograd's and FFT's profiled times are the least sure: a selection that uses them is
    checked end to end as one group, like a thread pool of its own, and they are left out when the
    network did not run faster with them."""
    from rooftune.selection.pools import (
        FAST_ALGORITHMS,
        OPENMP,
        GroupCheck,
        check_group,
        solve_checking_groups,
    )

    assert check_group("winograd-f2x2") == check_group("winograd-f4x4") == check_group("fft") == FAST_ALGORITHMS
    assert check_group("im2col-gemm") == OPENMP and check_group("nnpack") == "pthreadpool"
    prims = ["pytorch-default", "winograd-f4x4", "fft"]
    specs = [ConvSpec(1, 8, 12, 12, 8, 3, 3, padding=1)] * 2
    table = CostTable(ConvGraph(["a", "b"], specs, [(0, 1)], [0]), prims, np.array([[1.0, 0.7, 0.8], [1.0, 0.9, 0.6]]),
                      np.zeros(2), np.zeros(2, bool))
    seen = []

    def slower(pool: str, with_pool: Selection, without: Selection) -> GroupCheck:
        seen.append((pool, [c.primitive for c in with_pool.choices], [c.primitive for c in without.choices]))
        return GroupCheck(pool, ("winograd-f4x4", "fft"), 2, 0.94, (0.92, 0.98), False)

    checks: dict[str, GroupCheck] = {}
    sel = solve_checking_groups(table, per_layer, checks, slower)
    assert seen == [(FAST_ALGORITHMS, ["winograd-f4x4", "fft"], ["pytorch-default", "pytorch-default"])]
    assert [c.primitive for c in sel.choices] == ["pytorch-default", "pytorch-default"]
    text = checks[FAST_ALGORITHMS].describe()
    assert "(fast algorithm, its profiled times the least sure) on 2 layer(s)" in text and "without them" in text
    assert "left out of every selection" in text


def test_a_thread_pool_of_its_own_is_kept_only_if_the_network_runs_faster(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NNPACK and ONNX Runtime's MLAS run on pools of their own: when a selection puts layers on
    one, the network solved without it is measured against it end to end; the pool stays only if
    the network ran faster with it (whole CI above 1), and the decision holds for every table."""
    from types import SimpleNamespace

    import rooftune.bench
    from rooftune.selection.pools import (
        OPENMP,
        GroupCheck,
        check_group,
        solve_checking_groups,
        without_groups,
    )

    assert check_group("nnpack") == "pthreadpool" and check_group("onnxruntime-mlas") == "onnxruntime"
    assert check_group("onednn-prepacked-nhwc") == check_group("pytorch-default") == OPENMP
    prims = ["pytorch-default", "nnpack", "onnxruntime-mlas", "onednn-nhwc"]
    specs = [ConvSpec(1, 8, 12, 12, 8, 3, 3, padding=1)] * 3
    g = ConvGraph(["a", "b", "c"], specs, [(0, 1), (1, 2)], [0])
    times = np.array([[1.0, 0.8, 0.9, 0.95], [1.0, 0.95, 2.0, 1.2], [1.0, 2.0, 0.85, 1.2]])
    table = CostTable(g, prims, times, np.zeros(3), np.zeros(3, bool))
    assert np.isinf(without_groups(table, {"pthreadpool"}).times[:, 1]).all() and table.times[0, 1] == 0.8
    seen: list[tuple[str, list[str], list[str]]] = []

    def decide(keep: set[str]):
        def check(pool: str, with_pool: Selection, without: Selection) -> GroupCheck:
            seen.append((pool, [c.primitive for c in with_pool.choices], [c.primitive for c in without.choices]))
            n = sum(check_group(c.primitive) == pool for c in with_pool.choices)
            return GroupCheck(pool, ("x",), n, 1.1 if pool in keep else 0.95, (1.05, 1.15) if pool in keep else (0.9, 1.0),
                             pool in keep)
        return check

    checks: dict[str, GroupCheck] = {}
    sel = solve_checking_groups(table, per_layer, checks, decide(set()))
    assert [c.primitive for c in sel.choices] == ["onednn-nhwc", "pytorch-default", "pytorch-default"]
    assert seen[0] == ("pthreadpool", ["nnpack", "nnpack", "onnxruntime-mlas"], ["onnxruntime-mlas", "pytorch-default", "onnxruntime-mlas"])
    assert seen[1][0] == "onnxruntime" and set(checks) == {"pthreadpool", "onnxruntime"}
    # the decisions hold for later tables of the same network: nothing measured again
    again = solve_checking_groups(table, best_uniform, checks, decide({"pthreadpool"}))
    assert len(seen) == 2 and again.strategy == "uniform:pytorch-default"
    kept = solve_checking_groups(table, per_layer, {}, decide({"pthreadpool", "onnxruntime"}))
    assert [c.primitive for c in kept.choices] == ["nnpack", "nnpack", "onnxruntime-mlas"]
    assert "kept" in GroupCheck("pthreadpool", ("nnpack",), 2, 1.1, (1.05, 1.15), True).describe()
    assert "left out" in GroupCheck("pthreadpool", ("nnpack",), 2, 0.95, (0.9, 1.0), False).describe()

    # select: a model that predicts NNPACK fastest everywhere; the network with it ran slower
    from rooftune.profiling import sample_specs

    train = sample_specs(60, seed=0)
    rate = {"pytorch-default": 30e9, "onednn-prepacked-nhwc": 40e9, "nnpack": 80e9}
    fit = PerfModel("rf", n_estimators=20).fit(train, np.asarray([[s.flops / rate[p] + 1e-5 for p in rate] for s in train]),
                                               list(rate), conversions=[(s, 1e-6) for s in train])
    labels: list[str] = []

    def fake_compare(fn_a: object, fn_b: object, *, label_a: str, label_b: str, **_: object) -> SimpleNamespace:
        labels.append(label_a)
        ratio, ci = (0.93, (0.9, 0.96)) if label_a.startswith("without") else (1.2, (1.1, 1.3))
        return SimpleNamespace(ratio=ratio, ci=ci, a=SimpleNamespace(median=ratio * 1e-3), b=SimpleNamespace(median=1e-3),
                               warnings=())

    monkeypatch.setattr(rooftune.bench, "compare", fake_compare)
    r = select("resnet18", perfmodel=fit, db=str(tmp_path / "r.db"), measure_s=1.0)
    assert labels[0] == "without pthreadpool" and labels.count("without pthreadpool") == 1
    assert "nnpack" not in {c.primitive for c in r.selection.choices}
    assert any("nnpack" in n and "left out" in n and "0.930x" in n for n in r.notes)
    assert [(c.group, c.primitives, c.kept) for c in r.checks] == [("pthreadpool", ("nnpack",), False)]
    assert r.to_dict()["checks"][0]["speedup"] == 0.93 and r.checks[0].describe() in r.notes
    unmeasured = select("resnet18", perfmodel=fit, db=str(tmp_path / "r.db"), measure_s=None)
    assert "nnpack" in {c.primitive for c in unmeasured.selection.choices}
    assert any("not measured inside the network" in n for n in unmeasured.notes)


def test_a_rewritten_models_integer_output_is_held_to_agreement_as_a_tuned_configurations_is() -> None:
    """The end-to-end check is the tuning's (rooftune.tuning.verify.compare_outputs) with the
    rewrite's bounds: an integer output agrees on >= 99 % of its elements or fails, with the reason."""
    from tests.analysis.tiny_models import small_cnn

    m, x = small_cnn()
    m.eval()

    class WithClasses(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module, flip: bool = False) -> None:
            super().__init__()
            self.inner, self.flip = inner, flip

        def forward(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            y = self.inner(t)
            classes = y.flatten(1).argmax(-1)
            return y, (classes + 1 if self.flip else classes)

    g = conv_graph(m, (x,))
    sel = Selection("cls", [Choice(n, s, "im2col-gemm", 1.0) for n, s in zip(g.names, g.specs, strict=True)])
    new = rewrite(m, sel)
    v = verify(WithClasses(m), WithClasses(new), (x,))
    assert v.ok and v.outputs == 2 and v.why == ""
    wrong = verify(WithClasses(m), WithClasses(new, flip=True), (x,))
    assert not wrong.ok and "integer values agree on 0.0% of the elements" in wrong.why
    assert wrong.to_dict()["why"] == wrong.why

"""Model files: every estimator kind saved and loaded as data, the header and its checks, the
refusal of pickles and of files naming a type no rooftune model holds, before anything runs, of
state no fitted model has (a tree's node indices out of range), before anything predicts, and of
archives past the bounds of reading, before they are read."""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rooftune.errors import InvalidArgument
from rooftune.perfmodel import (
    MethodClassifier,
    PerfModel,
    ProfileData,
    TransferModel,
    convert_pickle,
    featurize,
    fit_transfer,
    load_model,
    read_header,
    save_model,
)
from rooftune.perfmodel.features import FEATURES, SCHEMA_FEATURES
from rooftune.perfmodel.persist import HEADER_MEMBER, MAGIC, MODEL_MEMBER, TRUSTED_TYPES, stored_types
from rooftune.primitives.spec import ConvSpec
from rooftune.profiling import sample_specs
from tests.test_cli import assert_one_line_error, rooftune, rooftune_in_process

PRIMS = ["pytorch-default", "im2col-gemm", "winograd-f4x4"]


def profiled(n: int = 40, seed: int = 0, speed: float = 1.0) -> ProfileData:
    """Rows with a roofline-like cost per primitive; Winograd only on 3x3 stride 1."""
    specs = sample_specs(n, seed=seed)
    rate = {"pytorch-default": 40e9, "im2col-gemm": 25e9, "winograd-f4x4": 70e9}
    times = np.asarray([[np.nan if p == "winograd-f4x4" and ((s.R, s.S) != (3, 3) or s.stride != (1, 1))
                         else speed * (s.flops / rate[p] + 20e-6) for p in PRIMS] for s in specs])
    return ProfileData(f"p{seed}", 2, specs, list(PRIMS), times, [[f"net{i % 3}"] for i in range(n)])


def rewrite(src: Path, dest: Path, header: dict[str, Any] | None = None, body: bytes | None = None) -> Path:
    """A copy of the model file ``src`` with its header's keys updated by ``header`` and its model
    member replaced by ``body``."""
    with zipfile.ZipFile(src) as z:
        h, b = json.loads(z.read(HEADER_MEMBER)), z.read(MODEL_MEMBER)
    with zipfile.ZipFile(dest, "w") as z:
        z.writestr(HEADER_MEMBER, json.dumps({**h, **(header or {})}))
        z.writestr(MODEL_MEMBER, b if body is None else body)
    return dest


def old_pickle(model: Any, path: Path, **header: Any) -> Path:
    """``model`` pickled the way earlier rooftune releases saved one."""
    payload = {"magic": MAGIC, "feature_schema": 3, "features": list(FEATURES),
               "versions": {"rooftune": "0.1.0", **{k: v for k, v in _versions().items() if k != "rooftune"}},
               "pickled_libraries": [], "kind": type(model).__name__,
               "provenance": getattr(model, "provenance_", {}), "model": model, **header}
    path.write_bytes(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))
    return path


def _versions() -> dict[str, str]:
    from rooftune.perfmodel.persist import versions

    return versions()


class _Marker:
    """Creates its marker file when unpickled or rebuilt from its state: what a crafted file would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.marker, "w"))

    def __getstate__(self) -> dict[str, Any]:
        return {"marker": self.marker}

    def __setstate__(self, state: dict[str, Any]) -> None:
        Path(state["marker"]).touch()


@pytest.fixture(scope="module")
def fitted() -> dict[str, Any]:
    data, b = profiled(40), profiled(24, seed=7, speed=1.6)
    gbr = data.fit(PerfModel("gbr", n_estimators=5))
    mlp = data.fit(PerfModel("mlp", epochs=20, n_nets=2, hidden=8))
    other = profiled(40, seed=3, speed=0.7).fit(PerfModel("mlp", epochs=20, n_nets=1, hidden=8))
    labels = [data.primitives[int(np.nanargmin(row))] for row in data.times]
    args = (b.specs, b.times, b.primitives)
    return {
        "gbr": gbr, "rf": data.fit(PerfModel("rf", n_estimators=5)), "mlp": mlp,
        "mlp-time": data.fit(PerfModel("mlp", epochs=20, n_nets=1, hidden=8, target="time")),
        "residual": fit_transfer([gbr], "residual", *args),
        "finetune": fit_transfer([mlp], "finetune", *args),
        "scratch": fit_transfer([None], "scratch", *args), "shift": TransferModel(gbr, "shift").fit(*args),
        "ensemble": fit_transfer([mlp, other], "ensemble", *args),
        "tree": MethodClassifier("tree").fit(data.specs, labels),
        "nb": MethodClassifier("nb").fit(data.specs, labels),
        "specs": data.specs[:8],
    }


@pytest.mark.parametrize("kind,libraries", [
    ("gbr", ["scikit-learn"]), ("rf", ["scikit-learn"]), ("mlp", []), ("mlp-time", []),
    ("residual", ["scikit-learn"]), ("finetune", []), ("scratch", ["scikit-learn"]),
    ("shift", ["scikit-learn"]),
    ("ensemble", []),
    ("tree", ["scikit-learn"]), ("nb", ["scikit-learn"]),
])
def test_every_estimator_kind_round_trips_as_data(fitted: dict[str, Any], kind: str, libraries: list[str],
                                                  tmp_path: Path) -> None:
    model, specs = fitted[kind], fitted["specs"]
    path = save_model(model, tmp_path / "m.rtmodel")
    with zipfile.ZipFile(path) as z:
        assert z.namelist() == [HEADER_MEMBER, MODEL_MEMBER]
        body = z.read(MODEL_MEMBER)
    assert stored_types(body) <= set(TRUSTED_TYPES)
    assert not any(t.startswith("torch") for t in stored_types(body))  # an mlp's weights are numpy arrays
    header = read_header(path)
    assert header["kind"] == type(model).__name__ and header["versioned_libraries"] == libraries
    assert header["feature_schema"] == 3 and header["features"] == list(FEATURES)
    back = load_model(path)
    assert type(back) is type(model)
    want, got = model.predict(specs), back.predict(specs)
    assert np.array_equal(got, want) if want.dtype == object else np.array_equal(got, want, equal_nan=True)


def test_the_header_is_checked_before_the_model_is_built(fitted: dict[str, Any], tmp_path: Path) -> None:
    data = profiled(40)
    m = fitted["gbr"]
    path = save_model(m, tmp_path / "m.rtmodel")
    assert load_model(path).provenance_ == read_header(path)["provenance"] == m.provenance_
    provenance = read_header(path)["provenance"]
    assert provenance["specs"] == 40 and provenance["platforms"] == ["p0"]
    for header, fragment in (
        ({"feature_schema": 999}, "feature schema 999"),
        # today's columns under schema 1's number
        ({"feature_schema": 1}, "feature schema 1, this rooftune reads 1, 2, 3"),
        ({"versions": {**read_header(path)["versions"], "scikit-learn": "0.20.0"}}, "scikit-learn 0.20.0"),
        ({"format": 2}, "model file format 2, this rooftune reads 1"),
        ({"magic": "x"}, "is not a saved rooftune model"),
    ):
        with pytest.raises(InvalidArgument, match=fragment):
            load_model(rewrite(path, tmp_path / "bad.rtmodel", header))
    # a model holding no scikit-learn object loads under another scikit-learn, an mlp under any torch
    import torch

    mlp = save_model(fitted["mlp"], tmp_path / "mlp.rtmodel")
    versions = {**read_header(mlp)["versions"], "scikit-learn": "0.20.0", "torch": "1.0.0"}
    state = torch.random.get_rng_state()
    back = load_model(rewrite(mlp, tmp_path / "old.rtmodel", {"versions": versions}))
    assert torch.equal(state, torch.random.get_rng_state())  # loading leaves the caller's RNG alone
    assert np.array_equal(back.predict(data.specs[:3]), fitted["mlp"].predict(data.specs[:3]))
    (tmp_path / "junk.rtmodel").write_bytes(b"not a model")
    with pytest.raises(InvalidArgument, match="not a saved rooftune model"):
        load_model(tmp_path / "junk.rtmodel")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as z:
        z.writestr("schema.json", "{}")
    with pytest.raises(InvalidArgument, match="no header.json"):
        read_header(tmp_path / "other.zip")
    with pytest.raises(InvalidArgument, match="does not exist"):
        load_model(tmp_path / "missing.rtmodel")
    with pytest.raises(InvalidArgument, match="is a directory"):
        load_model(tmp_path)
    # a damaged model member: refused in one line, not a skops traceback
    with pytest.raises(InvalidArgument, match="is not a saved rooftune model"):
        load_model(rewrite(path, tmp_path / "cut.rtmodel", body=b"PK\x03\x04cut"))


def test_a_previous_schema_model_still_loads_and_predicts(tmp_path: Path) -> None:
    """A schema-2 model (the shipped Xeon base before schema 3) reads the first 32 of today's columns."""
    data = profiled(40)
    F2 = featurize(data.specs)[:, :len(SCHEMA_FEATURES[2])]
    m = PerfModel("gbr", n_estimators=5).fit(F2, data.times, data.primitives)
    path = rewrite(save_model(m, tmp_path / "m.rtmodel"), tmp_path / "s2.rtmodel",
                   {"feature_schema": 2, "features": list(SCHEMA_FEATURES[2])})
    back = load_model(path)
    assert back.n_features_in_ == 32 < len(FEATURES)
    assert np.array_equal(back.predict(data.specs[:5]), m.predict(F2[:5]))


def test_a_pickle_is_refused_without_being_unpickled(fitted: dict[str, Any], tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    crafted = old_pickle(_Marker(marker), tmp_path / "crafted.pkl")
    assert pickle.loads(crafted.read_bytes())  # the file does run code when unpickled ...
    assert marker.exists()
    marker.unlink()
    for read in (load_model, read_header):  # ... and rooftune does not unpickle it
        with pytest.raises(InvalidArgument) as e:
            read(crafted)
        assert "\n" not in str(e.value)
        assert "pickled model" in str(e.value)
        convert = f"rooftune model-convert {crafted} {tmp_path / 'crafted.rtmodel'} --trust-pickle"
        assert convert in str(e.value)
    with pytest.raises(InvalidArgument, match="trust"):
        convert_pickle(crafted, tmp_path / "new.rtmodel")
    assert not marker.exists() and not (tmp_path / "new.rtmodel").exists()
    # a genuine old model is refused alike: by its first byte, whatever its name
    plain = old_pickle(fitted["gbr"], tmp_path / "model.rtmodel")
    with pytest.raises(InvalidArgument, match="pickled model"):
        load_model(plain)


def test_a_model_naming_a_type_rooftune_never_saves_is_refused_unbuilt(fitted: dict[str, Any],
                                                                        tmp_path: Path) -> None:
    import skops.io

    good = save_model(fitted["mlp"], tmp_path / "good.rtmodel")
    marker = tmp_path / "ran"
    # an object whose state, once set, would run code (skops rebuilds objects from their state)
    crafted = rewrite(good, tmp_path / "object.rtmodel", body=skops.io.dumps(_Marker(marker)))
    with pytest.raises(InvalidArgument) as e:
        load_model(crafted)
    assert "\n" not in str(e.value) and f"type {__name__}._Marker" in str(e.value)
    assert not marker.exists()
    # a function named in the file (os.system), and one hidden inside a trusted estimator's state
    for name, body in (("system", skops.io.dumps({"run": os.system})),
                       ("getcwd", skops.io.dumps({"model": fitted["gbr"], "x": [os.getcwd]}))):
        with pytest.raises(InvalidArgument, match=f"holds .*{name}.*refused unloaded"):
            load_model(rewrite(good, tmp_path / f"{name}.rtmodel", body=body))
    # and nothing rooftune saves can hold one: refused at save time, no file left
    model = fitted["gbr"]
    try:
        model.provenance_["hook"] = os.getcwd
        with pytest.raises(InvalidArgument, match="getcwd"):
            save_model(model, tmp_path / "hook.rtmodel")
    finally:
        del model.provenance_["hook"]
    assert not (tmp_path / "hook.rtmodel").exists() and not list(tmp_path.glob(".perfmodel-*"))


def test_convert_pickle_keeps_the_model_and_its_header(fitted: dict[str, Any], tmp_path: Path) -> None:
    specs = fitted["specs"]
    m = fitted["gbr"]
    old = old_pickle(m, tmp_path / "old.pkl", feature_schema=3)
    for trust in (False, 1, "yes"):  # only True itself vouches for the file
        with pytest.raises(InvalidArgument, match="runs any code"):
            convert_pickle(old, tmp_path / "new.rtmodel", trust=trust)  # type: ignore[arg-type]
    new = convert_pickle(old, tmp_path / "sub" / "new.rtmodel", trust=True)
    back = load_model(new)
    assert np.array_equal(back.predict(specs), m.predict(specs), equal_nan=True)
    header = read_header(new)
    assert header["feature_schema"] == 3 and header["converted_from"]["format"] == "pickle"
    assert header["versioned_libraries"] == ["scikit-learn"] and header["provenance"] == m.provenance_
    with pytest.raises(InvalidArgument, match="is not a pickle"):
        convert_pickle(new, tmp_path / "again.rtmodel", trust=True)
    # the old file's checks still hold: a pickle of trees from another scikit-learn is not converted
    stale = old_pickle(m, tmp_path / "stale.pkl", pickled_libraries=["scikit-learn"],
                       versions={"scikit-learn": "0.20.0", "torch": "2.0.0"})
    with pytest.raises(InvalidArgument, match="scikit-learn 0.20.0"):
        convert_pickle(stale, tmp_path / "stale.rtmodel", trust=True)
    (tmp_path / "other.pkl").write_bytes(pickle.dumps({"magic": "x"}, protocol=pickle.HIGHEST_PROTOCOL))
    with pytest.raises(InvalidArgument, match="not a saved rooftune model"):
        convert_pickle(tmp_path / "other.pkl", tmp_path / "other.rtmodel", trust=True)


def test_the_cli_refuses_a_pickle_and_converts_one_it_is_told_to_trust(fitted: dict[str, Any],
                                                                        tmp_path: Path) -> None:
    old = old_pickle(fitted["mlp"], tmp_path / "m.pkl")
    for args in (["select", "resnet18", "--model", str(old)], ["transfer", "--base", str(old)]):
        proc = rooftune_in_process(*args, db=tmp_path / "t.db")
        assert_one_line_error(proc, f"invalid model file '{old}'", "pickled model", "--trust-pickle")
        assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "t.db").exists()  # refused before anything was measured
    new = tmp_path / "m.rtmodel"
    proc = rooftune_in_process("model-convert", str(old), str(new))
    assert_one_line_error(proc, "--trust-pickle", "runs any code")
    assert not new.exists()
    proc = rooftune_in_process("model-convert", str(old), str(new), "--trust-pickle")
    assert proc.returncode == 0, proc.stderr
    assert f"converted {old} (PerfModel, feature schema 3) to {new}" in " ".join(proc.stdout.split())
    assert np.array_equal(load_model(new).predict(fitted["specs"]), fitted["mlp"].predict(fitted["specs"]))


def test_an_earlier_releases_transferred_pickle_is_refused_not_passed_over(
        monkeypatch: pytest.MonkeyPatch, fitted: dict[str, Any], tmp_path: Path) -> None:
    import rooftune.perfmodel as pm

    monkeypatch.setattr("rooftune.perfmodel.adapt.transferred_model_path", lambda pid: tmp_path / f"perfmodel-{pid}.rtmodel")
    old_pickle(fitted["mlp"], tmp_path / "perfmodel-x.pkl")
    with pytest.raises(InvalidArgument, match=f"model-convert {tmp_path / 'perfmodel-x.pkl'} "
                                              f"{tmp_path / 'perfmodel-x.rtmodel'} --trust-pickle"):
        pm.default_model("x")
    convert_pickle(tmp_path / "perfmodel-x.pkl", tmp_path / "perfmodel-x.rtmodel", trust=True)
    model, source = pm.default_model("x")
    assert source == str(tmp_path / "perfmodel-x.rtmodel") and isinstance(model, PerfModel)


#: What the shipped base models predicted for three convolutions (seconds of their first three
#: primitives) when they were pickles, before their conversion to model files.
PICKLED_PREDICTIONS = {
    "base_model.rtmodel": [[0.0010758588658429788, 0.0009004677935816348, 0.0027029210928161507],
                           [0.0005172752846859485, 0.0005292051397980626, 0.001027426344585831],
                           [0.00037297614129953513, 0.00017564254582168383, 0.0060518585476731935]],
    "base_model_xeon.rtmodel": [[0.0008924225936344562, 0.0007632151402843579, 0.0016623591078833682],
                                [0.00031752174420655757, 0.0003236967399396237, 0.0007672566848485896],
                                [0.00038981393497514486, 0.00016443464835087714, 0.003377162518055272]],
    "base_model_zen4.rtmodel": [[0.002124385186629149, 0.0017252156840951547, 0.0034421743266225993],
                                [0.0005622158826239562, 0.0005471654910368315, 0.0010794336647026853],
                                [0.000668096407928988, 0.0006237380892892674, 0.00665503953785299]],
}
#: float32 MLP arithmetic may round differently on another CPU's vector units
PREDICTION_RTOL = 1e-5


def test_the_shipped_models_predict_what_their_pickles_did() -> None:
    from importlib import resources

    from rooftune.perfmodel import BASE_MODELS, base_model_paths

    specs = [ConvSpec(1, 64, 56, 56, 64, 3, 3, padding=1), ConvSpec(1, 256, 14, 14, 1024, 1, 1),
             ConvSpec(1, 32, 112, 112, 32, 3, 3, padding=1, groups=32)]
    assert sorted(PICKLED_PREDICTIONS) == sorted(BASE_MODELS)
    for path in base_model_paths():
        with resources.as_file(path) as p:
            m = load_model(p)
            assert read_header(p)["converted_from"]["format"] == "pickle"
        assert m.primitives_[:3] == ["gemm-1x1-nchw", "gemm-1x1-nhwc", "winograd-f2x2"]
        np.testing.assert_allclose(m.predict(specs)[:, :3], PICKLED_PREDICTIONS[path.name],
                                   rtol=PREDICTION_RTOL)


# ------------------------------------------------------------------ damaged state, bounds of reading
def edit_body(src: Path, dest: Path, edit: Callable[[dict[str, Any], dict[str, bytes]], bytes | None]) -> Path:
    """A copy of the model file ``src`` whose skops body ``edit`` changed: it is given the body's
    schema and its members by name (arrays as .npy bytes) to change in place, and may return the
    schema's text to write instead of the changed schema."""
    with zipfile.ZipFile(src) as z:
        header, body = z.read(HEADER_MEMBER), z.read(MODEL_MEMBER)
    with zipfile.ZipFile(io.BytesIO(body)) as inner:
        members = {i.filename: inner.read(i) for i in inner.infolist()}
    schema = json.loads(members["schema.json"])
    text = edit(schema, members)
    members["schema.json"] = text if text is not None else json.dumps(schema).encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as inner:
        for name, data in members.items():
            inner.writestr(name, data)
    with zipfile.ZipFile(dest, "w") as z:
        z.writestr(HEADER_MEMBER, header)
        z.writestr(MODEL_MEMBER, out.getvalue())
    return dest


def skops_nodes(schema: Any, cls: str) -> Iterator[dict[str, Any]]:
    """The nodes of a skops schema of objects of class ``cls``, in the order of the document."""
    if isinstance(schema, dict):
        if schema.get("__class__") == cls and "__loader__" in schema:
            yield schema
        for v in schema.values():
            yield from skops_nodes(v, cls)
    elif isinstance(schema, list):
        for v in schema:
            yield from skops_nodes(v, cls)


def get_array(members: dict[str, bytes], node: dict[str, Any]) -> np.ndarray:
    return np.load(io.BytesIO(members[node["file"]]), allow_pickle=False)


def set_array(members: dict[str, bytes], node: dict[str, Any], value: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, value, allow_pickle=False)
    members[node["file"]] = buf.getvalue()


def state(node: dict[str, Any]) -> dict[str, Any]:
    """An object's (or a tree's) stored state: its attributes' nodes by name."""
    return node["content"]["content"]


def nodes_set(field: str, value: Any, leaf: bool = False) -> Callable[[dict[str, Any], dict[str, bytes]], None]:
    """Set ``field`` of the first tree's root (or first leaf) in its node array."""
    def edit(schema: dict[str, Any], members: dict[str, bytes]) -> None:
        at = state(next(skops_nodes(schema, "Tree")))["nodes"]
        nodes = get_array(members, at)
        row = int(np.flatnonzero(nodes["left_child"] == -1)[0]) if leaf else 0
        nodes[field][row] = value
        set_array(members, at, nodes)
    return edit


def set_json(node: dict[str, Any], value: str) -> None:
    """Set a JSON value's node, under an id of its own: skops builds one object per id, and the
    small numbers of a schema share theirs."""
    node["content"], node["__id__"] = value, 1


def tree_json(key: str, value: str) -> Callable[[dict[str, Any], dict[str, bytes]], None]:
    """Set a number of the first tree's state (node_count, max_depth)."""
    def edit(schema: dict[str, Any], members: dict[str, bytes]) -> None:
        set_json(state(next(skops_nodes(schema, "Tree")))[key], value)
    return edit


def two_classes(schema: dict[str, Any], members: dict[str, bytes]) -> None:
    """The first regression tree made one of two classes, its values widened to match (which
    scikit-learn's own check of the values' shape passes)."""
    tree = next(skops_nodes(schema, "Tree"))
    set_array(members, tree["__reduce__"]["args"]["content"][1], np.asarray([2], dtype=np.intp))
    values = get_array(members, state(tree)["values"])
    set_array(members, state(tree)["values"], np.repeat(values, 2, axis=2))


def nan_value(schema: dict[str, Any], members: dict[str, bytes]) -> None:
    at = state(next(skops_nodes(schema, "Tree")))["values"]
    values = get_array(members, at)
    values[-1, 0, 0] = np.nan
    set_array(members, at, values)


def attribute(cls: str, name: str, change: Callable[[np.ndarray], np.ndarray]) -> Callable[..., None]:
    """Change the array attribute ``name`` of the first object of class ``cls``."""
    def edit(schema: dict[str, Any], members: dict[str, bytes]) -> None:
        at = state(next(skops_nodes(schema, cls)))[name]
        set_array(members, at, change(get_array(members, at)))
    return edit


def json_attribute(cls: str, name: str, value: str) -> Callable[..., None]:
    def edit(schema: dict[str, Any], members: dict[str, bytes]) -> None:
        set_json(state(next(skops_nodes(schema, cls)))[name], value)
    return edit


def mlp_weight(schema: dict[str, Any], members: dict[str, bytes]) -> None:
    weights = state(next(skops_nodes(schema, "MLP")))["weights"]["content"]
    set_array(members, weights["trunk.2.weight"], get_array(members, weights["trunk.2.weight"])[:, :3])


@pytest.fixture(scope="module")
def saved(fitted: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The fitted models of each kind the damage tests change, saved once."""
    root = tmp_path_factory.mktemp("saved")
    return {kind: save_model(fitted[kind], root / f"{kind}.rtmodel") for kind in ("rf", "gbr", "tree", "nb", "mlp")}


@pytest.mark.parametrize("kind,edit,fragment", [
    # a random forest's trees: each index a prediction follows, the counts and the values' shape
    ("rf", nodes_set("left_child", 10**9), "tree_: node 0 left child 1000000000 is not a later node"),
    ("rf", nodes_set("left_child", 0), "node 0 left child 0 is not a later node"),  # a loop
    ("rf", nodes_set("right_child", -5), "node 0 right child -5 is not a later node"),
    ("rf", nodes_set("right_child", 7, leaf=True), "right child 7 is not -1 at a leaf"),
    ("rf", nodes_set("feature", 10**6), "node 0 feature 1000000 is not a feature index in 0..34"),
    ("rf", nodes_set("feature", -7), "node 0 feature -7 is not a feature index"),
    ("rf", nodes_set("feature", 3, leaf=True), "feature 3 is not -2 at a leaf"),
    ("rf", nodes_set("threshold", np.nan), "node 0 threshold nan is not a finite number"),
    ("rf", nodes_set("threshold", np.inf), "node 0 threshold inf is not a finite number"),
    ("rf", tree_json("node_count", "5"), "node count 5 is not the"),
    ("rf", tree_json("max_depth", "99"), "max depth 99 is not its nodes'"),
    ("rf", two_classes, "has 1 outputs of [2] classes, not 1 of 1"),
    ("rf", nan_value, "tree_ values: holds a value that is not finite"),
    # gradient boosting: its trees, and the first prediction its stages add to (one column)
    ("gbr", nodes_set("left_child", 10**9), "estimators_[0, 0].tree_: node 0 left child 1000000000"),
    ("gbr", nodes_set("feature", 35), "node 0 feature 35 is not a feature index in 0..34"),
    ("gbr", json_attribute("DummyRegressor", "n_outputs_", "0"), "init_.n_outputs_: 0 is not an integer in 1..1"),
    # the classifiers
    ("tree", nodes_set("left_child", 10**9), "models_['fp32'].tree_: node 0 left child 1000000000"),
    ("nb", attribute("GaussianNB", "var_", lambda v: -v), "var_: holds a value <= 0"),
    ("nb", attribute("GaussianNB", "theta_", lambda v: v[:, :1]), "theta_: has shape"),
    # rooftune's own arrays: a wrong shape would broadcast
    ("rf", attribute("PerfModel", "x_mean_", lambda v: v[:1]), "PerfModel.x_mean_: has shape (1,), not (35,)"),
    ("mlp", mlp_weight, "an MLP's weights are not float arrays of shapes"),
])
def test_a_model_of_damaged_state_is_refused_before_anything_predicts(saved: dict[str, Path], kind: str,
                                                                     edit: Any, fragment: str,
                                                                     tmp_path: Path) -> None:
    bad = edit_body(saved[kind], tmp_path / "bad.rtmodel", edit)
    with pytest.raises(InvalidArgument) as e:
        load_model(bad)
    assert "\n" not in str(e.value)
    assert f"invalid model file '{bad}': is damaged" in str(e.value) and fragment in str(e.value)


def test_a_damaged_tree_is_refused_by_the_command_line_in_one_line_not_a_crash(saved: dict[str, Path],
                                                                               tmp_path: Path) -> None:
    """scikit-learn follows the indices unchecked: the model's first prediction would crash the process."""
    bad = edit_body(saved["rf"], tmp_path / "bad.rtmodel", nodes_set("left_child", 10**9))
    proc = rooftune("select", "resnet18", "--model", str(bad), "--no-measure", db=tmp_path / "t.db")
    assert_one_line_error(proc, f"invalid model file '{bad}': is damaged", "node 0 left child 1000000000")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_model_file_holding_no_estimator_or_another_than_its_header_says_is_refused(
        fitted: dict[str, Any], saved: dict[str, Path], tmp_path: Path) -> None:
    import skops.io

    bare = rewrite(saved["rf"], tmp_path / "list.rtmodel", body=skops.io.dumps([np.zeros(3)]))
    with pytest.raises(InvalidArgument, match="is damaged: holds a list at its root, not one of PerfModel"):
        load_model(bare)
    other = rewrite(saved["rf"], tmp_path / "other.rtmodel", {"kind": "MethodClassifier"})
    with pytest.raises(InvalidArgument, match="holds a PerfModel, its header says MethodClassifier"):
        load_model(other)
    # nothing rooftune saves is refused later: an unfitted model is not written
    with pytest.raises(InvalidArgument, match="PerfModel: has no primitives_"):
        save_model(PerfModel("rf"), tmp_path / "unfitted.rtmodel")
    assert not (tmp_path / "unfitted.rtmodel").exists()


def test_a_header_of_the_wrong_types_is_refused_in_one_line(saved: dict[str, Path], tmp_path: Path) -> None:
    for header, fragment in (
        ({"versions": ["scikit-learn"]}, "header.json's versions is a list, not a dict"),
        ({"versioned_libraries": "scikit-learn"}, "header.json's versioned_libraries is a str, not a list"),
        ({"versioned_libraries": ["numpy"]}, "versioned libraries are not among scikit-learn, torch"),
        ({"versioned_libraries": [["scikit-learn"]]}, "versioned libraries are not among"),
        ({"feature_schema": [3]}, "feature schema [3], this rooftune reads 1, 2, 3"),
        ({"feature_schema": True}, "feature schema True"),
        ({"provenance": 5}, "header.json's provenance is a int, not a dict"),
    ):
        for read in (load_model, read_header) if "header.json's" in fragment else (load_model,):
            with pytest.raises(InvalidArgument) as e:
                read(rewrite(saved["rf"], tmp_path / "bad.rtmodel", header))
            assert fragment in str(e.value) and "\n" not in str(e.value)


def padded_schema(pad: int) -> Callable[[dict[str, Any], dict[str, bytes]], bytes]:
    """The schema followed by ``pad`` spaces: still the same JSON, many times its packed size."""
    return lambda schema, members: json.dumps(schema).encode() + b" " * pad


def test_a_member_past_the_bounds_is_refused_before_it_is_read(saved: dict[str, Path], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from rooftune.perfmodel import persist

    # 2 MiB of spaces pack into ~2 KB: over the bound on the ratio at any size bound
    airy = edit_body(saved["rf"], tmp_path / "airy.rtmodel", padded_schema(2 << 20))
    assert airy.stat().st_size < 100_000
    with pytest.raises(InvalidArgument, match=r"member model.skops/schema.json unpack \d+ times over, over the "
                                              r"limit of 100 \(rooftune.perfmodel.persist.MAX_RATIO\)"):
        load_model(airy)
    # each bound, made small enough for a small file to cross
    with zipfile.ZipFile(saved["rf"]) as z:
        packed = sum(i.file_size for i in z.infolist())  # the model member is stored
        with zipfile.ZipFile(io.BytesIO(z.read(MODEL_MEMBER))) as inner:
            assert sum(i.file_size for i in inner.infolist()) > packed
    for name, value, fragment in (
        ("MAX_MEMBER_BYTES", 1 << 20, "member model.skops/schema.json of 2"),
        ("MAX_MEMBER_BYTES", 5000, "member model.skops of"),
        ("MAX_MODEL_BYTES", packed, "model.skops has members of"),
        ("MAX_DIRECTORY_BYTES", 100, "has a directory of"),
        ("MAX_DIRECTORY_BYTES", 1000, "model.skops has a directory of"),
        ("MAX_SCHEMA_VALUES", 100, "member model.skops/schema.json holds ~"),
    ):
        with monkeypatch.context() as m:
            m.setattr(persist, name, value)
            with pytest.raises(InvalidArgument) as e:
                load_model(airy if name == "MAX_MEMBER_BYTES" and value > 5000 else saved["rf"])
        assert fragment in str(e.value) and f"over the limit of {value} (rooftune.perfmodel.persist.{name})" \
            in str(e.value), str(e.value)
    # the shipped models load within the bounds (test_the_shipped_models_predict_what_their_pickles_did)


def test_a_directory_that_understates_a_members_size_gains_nothing(saved: dict[str, Path], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """schema.json says it is 100 bytes where it unpacks to 2 MiB: at most its stated size is
    read, and that fails its checksum."""
    from rooftune.perfmodel import persist

    monkeypatch.setattr(persist, "MAX_MEMBER_BYTES", 1 << 20)
    padded = edit_body(saved["rf"], tmp_path / "padded.rtmodel", padded_schema(2 << 20))
    with zipfile.ZipFile(padded) as z:
        header, body = z.read(HEADER_MEMBER), bytearray(z.read(MODEL_MEMBER))
    # the unpacked size, in the member's local header and in the directory's entry
    for signature, at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        start = body.find(signature + b"", 0)
        while body[start + (30 if signature == b"PK\x03\x04" else 46):].find(b"schema.json") != 0:
            start = body.find(signature, start + 1)
        struct.pack_into("<I", body, start + at, 100)
    with zipfile.ZipFile(tmp_path / "lying.rtmodel", "w") as z:
        z.writestr(HEADER_MEMBER, header)
        z.writestr(MODEL_MEMBER, bytes(body))
    with pytest.raises(InvalidArgument) as e:
        load_model(tmp_path / "lying.rtmodel")
    assert "is not a saved rooftune model (BadZipFile in model.skops)" in str(e.value)

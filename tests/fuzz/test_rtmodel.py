"""rooftune.perfmodel.load_model: whatever a model file holds (random bytes, a saved model with
bytes flipped or cut, any header, any damage to the skops body: its schema's values, its arrays,
a tree's node indices, members added or dropped), loading returns a model that predicts, or
refuses the file with a one-line RooftuneError; no other exception, no crash."""

from __future__ import annotations

import atexit
import io
import json
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from rooftune.errors import RooftuneError
from rooftune.perfmodel import MethodClassifier, PerfModel, load_model, save_model
from rooftune.perfmodel.persist import HEADER_MEMBER, MODEL_MEMBER
from rooftune.primitives.spec import ConvSpec
from tests.perfmodel.test_persist import profiled

SPECS = [ConvSpec(1, 64, 56, 56, 64, 3, 3, padding=1), ConvSpec(1, 256, 14, 14, 1024, 1, 1)]
_BASES: dict[str, Any] = {}


def _base() -> dict[str, Any]:
    """What the examples share, made once: a folder, and two tiny fitted models (a random forest
    and a decision tree classifier) saved, as their files' bytes, headers and skops members."""
    if not _BASES:
        folder = Path(tempfile.mkdtemp(prefix="rooftune-fuzz-"))
        atexit.register(shutil.rmtree, folder, True)
        data = profiled(12)
        labels = [data.primitives[int(np.nanargmin(row))] for row in data.times]
        models = {"rf": data.fit(PerfModel("rf", n_estimators=2, max_depth=3)),
                  "tree": MethodClassifier("tree", max_depth=3).fit(data.specs, labels)}
        files = {}
        for kind, model in models.items():
            raw = save_model(model, folder / f"{kind}.rtmodel").read_bytes()
            with zipfile.ZipFile(io.BytesIO(raw)) as z:
                header, body = json.loads(z.read(HEADER_MEMBER)), z.read(MODEL_MEMBER)
            with zipfile.ZipFile(io.BytesIO(body)) as inner:
                members = {i.filename: inner.read(i) for i in inner.infolist()}
            files[kind] = {"raw": raw, "header": header, "members": members,
                           "schema": json.loads(members["schema.json"])}
        _BASES.update(folder=folder, files=files)
    return _BASES


def _loads_or_refuses(raw: bytes) -> None:
    """The property: the file loads into a model that predicts, or is refused in one line."""
    path = _base()["folder"] / "example.rtmodel"
    path.write_bytes(raw)
    try:
        model = load_model(path)
    except RooftuneError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    with np.errstate(all="ignore"):  # a leaf may hold any finite value, exp() of it overflow
        out = model.predict(SPECS)  # the trees it follows are whole: this neither crashes nor raises
    assert len(out) == len(SPECS)


def _archive(header: Any, members: dict[str, bytes], extra: dict[str, bytes] | None = None) -> bytes:
    body = io.BytesIO()
    with zipfile.ZipFile(body, "w", zipfile.ZIP_DEFLATED) as inner:
        for name, data in members.items():
            inner.writestr(name, data)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(HEADER_MEMBER, header if isinstance(header, bytes) else json.dumps(header))
        z.writestr(MODEL_MEMBER, body.getvalue())
        for name, data in (extra or {}).items():
            z.writestr(name, data)
    return out.getvalue()


_KINDS = st.sampled_from(["rf", "tree"])
_LEAVES = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8)
_JSON = st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                            max_size=3), max_leaves=8)
#: The text of a skops JSON value's node: numbers near the edges a tree's counts and indices have.
_NUMBER_TEXT = st.sampled_from(["-2", "-1", "0", "1", "2", "3", "35", "1e308", "-1e308", "NaN", "Infinity", "null",
                                "2147483648", "9223372036854775807", "true", '"1"', "[]"]) \
    | st.integers(-2**64, 2**64).map(str)


@given(st.binary(max_size=300) | st.binary(max_size=300).map(lambda b: b"PK\x03\x04" + b))
def test_any_bytes_are_refused_in_one_line(raw: bytes) -> None:
    _loads_or_refuses(raw)


@given(_KINDS, st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=6),
       st.none() | st.floats(0, 1))
def test_a_saved_model_with_bytes_flipped_or_cut_loads_or_is_refused(kind: str, flips: list[tuple[float, int]],
                                                                     cut: float | None) -> None:
    raw = bytearray(_base()["files"][kind]["raw"])
    for at, value in flips:
        raw[int(at * len(raw))] = value
    _loads_or_refuses(bytes(raw[:int(cut * len(raw))] if cut is not None else raw))


@given(_KINDS, st.dictionaries(st.sampled_from(["magic", "format", "feature_schema", "features", "versions",
                                                "versioned_libraries", "kind", "provenance", "converted_from",
                                                "other"]), _JSON, max_size=3)
       | st.builds(lambda v: {"__whole__": v}, _JSON))
def test_any_header_loads_or_is_refused(kind: str, changes: dict[str, Any]) -> None:
    base = _base()["files"][kind]
    header = changes["__whole__"] if "__whole__" in changes else {**base["header"], **changes}
    _loads_or_refuses(_archive(header, base["members"]))


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value in a JSON document."""
    out = [at]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*at, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*at, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    doc[path[0]] = _set(doc[path[0]], path[1:], value)
    return doc


def _tree_arrays(schema: Any) -> list[str]:
    """The members holding a tree's node array."""
    return [p for path in _paths(schema) if path[-2:] == ("nodes", "file")
            for p in [_get(schema, path)]]


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for k in path:
        doc = doc[k]
    return doc


@given(_KINDS, st.data())
def test_any_damage_to_the_skops_body_loads_or_is_refused(kind: str, data: st.DataObject) -> None:
    base = _base()["files"][kind]
    schema, members = json.loads(json.dumps(base["schema"])), dict(base["members"])
    damage = data.draw(st.sampled_from(["value", "number", "node", "array", "member", "schema"]))
    if damage == "value":  # any value of the schema, anything JSON
        path = data.draw(st.sampled_from(_paths(schema)))
        schema = _set(schema, path, data.draw(_JSON))
    elif damage == "number":  # a JSON value's text (counts, indices, flags), under an id of its own
        paths = [p for p in _paths(schema) if p and p[-1] == "content" and _get(schema, p[:-1]).get("is_json")]
        path = data.draw(st.sampled_from(paths))
        _set(schema, path, data.draw(_NUMBER_TEXT))
        _set(schema, (*path[:-1], "__id__"), 1)
    elif damage == "node":  # one field of one node of a tree, near the values a tree holds
        name = data.draw(st.sampled_from(_tree_arrays(schema)))
        nodes = np.load(io.BytesIO(members[name]), allow_pickle=False)
        row = data.draw(st.integers(0, len(nodes) - 1))
        field = data.draw(st.sampled_from(["left_child", "right_child", "feature", "threshold"]))
        nodes[field][row] = data.draw(st.integers(-3, len(nodes) + 2) if field != "threshold"
                                      else st.floats(allow_nan=True, allow_infinity=True))
        buf = io.BytesIO()
        np.save(buf, nodes, allow_pickle=False)
        members[name] = buf.getvalue()
    elif damage == "array":  # bytes of any array, its header included
        name = data.draw(st.sampled_from(sorted(n for n in members if n.endswith(".npy"))))
        raw = bytearray(members[name])
        for at, value in data.draw(st.lists(st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 255)),
                                            min_size=1, max_size=4)):
            raw[at] = value
        members[name] = bytes(raw)
    elif damage == "member":  # a member dropped, or one added
        if data.draw(st.booleans()):
            del members[data.draw(st.sampled_from(sorted(members)))]
        else:
            name = data.draw(st.text(st.characters(codec="utf-8", exclude_characters="\x00/"), min_size=1, max_size=12))
            members[name] = data.draw(st.binary(max_size=64))
    else:  # the schema's text, anything
        members["schema.json"] = data.draw(st.binary(max_size=200))
    if damage != "schema":
        members["schema.json"] = json.dumps(schema).encode()
    extra = {"other": b"x"} if data.draw(st.booleans()) else None
    _loads_or_refuses(_archive(base["header"], members, extra))

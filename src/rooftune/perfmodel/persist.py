"""Saving and loading fitted models as data, with what they need to be trusted elsewhere: the
library versions, the feature schema and the training data's provenance (platforms, row counts).

A model file (``.rtmodel``, :data:`SUFFIX`) is a zip archive of two members::

    header.json   magic, format, feature schema and features, library versions, the versioned
                  libraries whose objects the model holds, kind, provenance: read_header reads
                  this member alone
    model.skops   the estimator in skops's format: a JSON tree of every object's type and state,
                  its arrays as .npy (written and read without pickle)

Loading checks the header, then walks the skops tree and refuses the file, naming the type, when a
node is of a type outside :data:`TRUSTED_TYPES` (rooftune's estimators and exactly the
scikit-learn, numpy and builtin types they hold) or is rebuilt by a skops loader outside
:data:`TRUSTED_LOADERS` (those that would look up a function, a method or an operator). Only then
does skops build the objects, each from its type and stored state: nothing the file holds is run.
The state itself is still the file's: before the model is returned, :mod:`rooftune.perfmodel.integrity`
checks every tree and array it predicts with (scikit-learn follows a tree's node indices in native
code, unchecked), so a damaged file is refused, never crashes the process.

Reading is bounded (:data:`MAX_MEMBER_BYTES` and the bounds beside it): the sizes and compression
ratios of both archives' members are checked from their directories before a member is read, and
each member is read through a reader that stops one byte past its bound.

Pickled models, the format of earlier rooftune releases, are refused from their leading bytes,
before anything is unpickled (unpickling runs whatever code the file names).
:func:`convert_pickle` converts one whose source is trusted.
"""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from rooftune.errors import InvalidArgument, RooftuneError, is_int, one_line
from rooftune.fileio import atomic_open, json_text
from rooftune.perfmodel.features import FEATURE_SCHEMA_VERSION, FEATURES, SCHEMA_FEATURES
from rooftune.perfmodel.integrity import DamagedModel, check_model

MAGIC = "rooftune-perfmodel"
#: The file suffix rooftune writes model files with (it reads them by content, whatever the name).
SUFFIX = ".rtmodel"
#: The layout of the archive; a file of a later format is refused with a request to upgrade.
FORMAT = 1
HEADER_MEMBER = "header.json"
MODEL_MEMBER = "model.skops"
#: A header is a few kilobytes (its provenance lists networks and platforms); one far larger is
#: not rooftune's, and is refused before it is read into memory.
MAX_HEADER_BYTES = 1 << 20
#: The bounds of reading a model file. The shipped models' largest member is a 90 KB skops schema,
#: and each is under 1 MB unpacked; a model trained here is larger: skops writes ~26 KB of schema
#: per gradient-boosted tree, 83 MB for the default 200 stages of each of the 16 primitives, and a
#: random forest's node arrays grow with the profiled specs (50 MB for 600 trees on 1,000 specs).
#: Each bound leaves several times that. Any one member (``header.json`` has its own bound):
MAX_MEMBER_BYTES = 256 << 20
#: All the members of either archive together, unpacked.
MAX_MODEL_BYTES = 1 << 30
#: Unpacked over packed size, for a member of :data:`RATIO_FLOOR_BYTES` or more and for all of an
#: archive's members together: skops's JSON schema packs 20-55 to 1 and arrays far less, where
#: deflate reaches ~1000 to 1 on filler; a small file cannot unpack to a bound's worth of memory.
MAX_RATIO = 100
RATIO_FLOOR_BYTES = 1 << 20
#: An archive's directory (zipfile builds an object of a few hundred bytes per ~50-byte entry): a
#: model holds a few entries per tree, 160 KB of directory for 600 trees.
MAX_DIRECTORY_BYTES = 16 << 20
#: The JSON values of a skops schema, counted by the separators and brackets before them: parsed,
#: each costs up to ~80 bytes (an empty dict and its slot) whatever its text's length, and the
#: schemas skops writes spend ~30 bytes of text per value (the 83 MB above: ~2.8 million).
MAX_SCHEMA_VALUES = 8_000_000
#: How much of a member is read at once while checking it.
_CHUNK = 1 << 20
#: Pickle's PROTO opcode, the first byte of every pickle of protocol 2 or later: the pickled
#: model files of earlier rooftune releases were written with the highest protocol.
PICKLE_PROTO = 0x80

#: Every type a saved rooftune model holds, by module and name: rooftune's estimators, the
#: scikit-learn estimators and internals they are fitted with, and the numpy and builtin types
#: of their state. A file naming any other type is refused before an object is built.
TRUSTED_TYPES = (
    "rooftune.perfmodel.regressors.PerfModel",
    "rooftune.perfmodel.regressors.MLP",
    "rooftune.perfmodel.classifiers.MethodClassifier",
    "rooftune.perfmodel.transfer.TransferModel",
    "rooftune.perfmodel.transfer.TransferEnsemble",
    "rooftune.perfmodel.transfer.LocalCorrection",
    "sklearn.ensemble._gb.GradientBoostingRegressor",
    "sklearn.ensemble._forest.RandomForestRegressor",
    "sklearn.tree._classes.DecisionTreeRegressor",
    "sklearn.tree._classes.DecisionTreeClassifier",
    "sklearn.tree._tree.Tree",
    "sklearn.naive_bayes.GaussianNB",
    "sklearn.dummy.DummyRegressor",
    "sklearn._loss.loss.HuberLoss",
    "sklearn._loss._loss.CyHuberLoss",
    "sklearn._loss.link.IdentityLink",
    "sklearn._loss.link.Interval",
    "numpy.ndarray",
    "numpy.float64",
    "numpy.int64",
    "numpy.random.mtrand.RandomState",
    "builtins.dict",
    "builtins.list",
    "builtins.tuple",
    "builtins.str",
)
#: The skops loaders of those types' nodes: containers, JSON values, arrays, objects rebuilt from
#: their state, scikit-learn's trees and losses. Left out are those that look up a function,
#: method, operator or partial by name.
TRUSTED_LOADERS = frozenset({
    "ObjectNode", "DictNode", "ListNode", "TupleNode", "JsonNode", "TypeNode", "NdArrayNode",
    "RandomStateNode", "TreeNode", "LossNode",
})

#: Libraries whose objects do not promise to load under another minor release, by the top-level
#: module their classes live in. A model that holds none of their objects (an MLP keeps its
#: weights as numpy arrays) loads under any release of them.
VERSIONED_LIBRARIES = {"sklearn": "scikit-learn", "torch": "torch"}


def versions() -> dict[str, str]:
    import numpy
    import sklearn
    import skops
    import torch

    import rooftune

    return {"rooftune": getattr(rooftune, "__version__", "0"), "scikit-learn": sklearn.__version__,
            "torch": torch.__version__.split("+")[0], "numpy": numpy.__version__, "skops": skops.__version__}


def _minor(v: str) -> str:
    return ".".join(v.split(".")[:2])


def _nodes(tree: Any) -> Iterator[Mapping[str, Any]]:
    """Every node of a skops schema (a dict naming its loader), depth first."""
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            if "__loader__" in item:
                yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _whose(where: str) -> str:
    """How a message starts on the archive ``where`` names: the file's ("") or its model member's."""
    return f"{where.rstrip('/')} " if where else ""


def _bounded_directory(f: IO[bytes], path: str | Path, where: str) -> None:
    """Refuse an archive whose directory is over :data:`MAX_DIRECTORY_BYTES`, read from its end
    record as zipfile reads it (zipfile then builds an object per entry); one that is no archive
    is left to zipfile to refuse."""
    end = zipfile._EndRecData(f)  # the record ZipFile's own reading trusts
    if end and end[zipfile._ECD_SIZE] > MAX_DIRECTORY_BYTES:
        raise _refused(path, f"{_whose(where)}has a directory of {end[zipfile._ECD_SIZE]} bytes, over the "
                       f"limit of {MAX_DIRECTORY_BYTES} ({__name__}.MAX_DIRECTORY_BYTES)")


def _bounded_members(z: zipfile.ZipFile, path: str | Path, where: str) -> None:
    """Refuse an archive any of whose members, or all together, unpack to more than the bounds
    (see :data:`MAX_MEMBER_BYTES`) by the sizes its directory gives; ``where`` prefixes their
    names ("" for the file's own members)."""
    total = packed = 0
    for info in z.infolist():
        name = where + info.filename
        if info.file_size > MAX_MEMBER_BYTES:
            raise _refused(path, f"member {name} of {info.file_size} bytes is over the limit of "
                           f"{MAX_MEMBER_BYTES} ({__name__}.MAX_MEMBER_BYTES)")
        _bounded_ratio(info.file_size, info.compress_size, f"member {name}", path)
        total, packed = total + info.file_size, packed + info.compress_size
    if total > MAX_MODEL_BYTES:
        raise _refused(path, f"{_whose(where)}has members of {total} bytes in all, over the limit of "
                       f"{MAX_MODEL_BYTES} ({__name__}.MAX_MODEL_BYTES)")
    _bounded_ratio(total, packed, f"{_whose(where)}has members that", path)


def _bounded_ratio(size: int, packed: int, what: str, path: str | Path) -> None:
    if size >= RATIO_FLOOR_BYTES and size > MAX_RATIO * packed:
        raise _refused(path, f"{what} unpack {size / max(packed, 1):.0f} times over, over the limit of {MAX_RATIO} "
                       f"({__name__}.MAX_RATIO)")


def _read(z: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int, name: str, path: str | Path,
          keep: bool = True) -> bytes:
    """A member read through a reader that stops one byte past ``limit``, whatever size the
    directory gives (its checksum checked at its end); not kept where ``keep`` is False."""
    data, size = [], 0
    with z.open(info) as f:
        while size <= limit:
            chunk = f.read(min(_CHUNK, limit + 1 - size))
            if not chunk:
                break
            size += len(chunk)
            if keep:
                data.append(chunk)
    if size > limit:
        raise _refused(path, f"member {name} holds more than {limit} bytes, its limit")
    return b"".join(data)


def _schema(skops_bytes: bytes, path: str | Path = MODEL_MEMBER) -> Any:
    """The schema of a skops file, after checking every member of its archive against the bounds
    (see :data:`MAX_MEMBER_BYTES`) by its directory and by reading it: skops reads them later."""
    where = f"{MODEL_MEMBER}/"
    f = io.BytesIO(skops_bytes)
    _bounded_directory(f, path, where)
    with zipfile.ZipFile(f) as z:
        _bounded_members(z, path, where)
        for info in z.infolist():
            if info.filename != "schema.json":
                _read(z, info, MAX_MEMBER_BYTES, where + info.filename, path, keep=False)
        text = _read(z, z.getinfo("schema.json"), MAX_MEMBER_BYTES, f"{where}schema.json", path)
    values = sum(text.count(c) for c in (b",", b":", b"{", b"["))
    if values > MAX_SCHEMA_VALUES:
        raise _refused(path, f"member {where}schema.json holds ~{values} JSON values, over the limit of "
                       f"{MAX_SCHEMA_VALUES} ({__name__}.MAX_SCHEMA_VALUES)")
    return json.loads(text)


def stored_types(skops_bytes: bytes) -> set[str]:
    """The types (``module.name``) of every object a skops file holds, read from its schema."""
    return _types(_schema(skops_bytes))


def _types(schema: Any) -> set[str]:
    return {f"{n.get('__module__')}.{n.get('__class__')}" for n in _nodes(schema)}


def _untrusted(schema: Any) -> str | None:
    """The first type or loader of a skops file's schema that is not trusted, in words; None when
    all are."""
    for node in _nodes(schema):
        name, loader = f"{node.get('__module__')}.{node.get('__class__')}", node.get("__loader__")
        content = node.get("content")
        if isinstance(content, Mapping) and "function" in content:  # a function's node names it here
            name = f"{content.get('module_path')}.{content.get('function')}"
        if not isinstance(loader, str) or loader not in TRUSTED_LOADERS:
            return f"{name} (skops loader {loader})"
        if name not in TRUSTED_TYPES:
            return f"type {name}"
    return None


def _json_default(value: Any) -> Any:
    """numpy scalars in a provenance as the numbers they are."""
    item = getattr(value, "item", None)
    if callable(item):
        return item()
    raise TypeError(f"{type(value).__name__} is not JSON")


def save_model(model: Any, path: str | Path) -> Path:
    """Write ``model`` (any fitted rooftune estimator) as a model file (:data:`SUFFIX`; see the
    module's docstring), atomically: a crash leaves the old file."""
    return _write(model, Path(path), {"feature_schema": FEATURE_SCHEMA_VERSION, "features": list(FEATURES)})


def _write(model: Any, path: Path, header: Mapping[str, Any]) -> Path:
    import skops.io

    body = skops.io.dumps(model, compression=zipfile.ZIP_DEFLATED)
    schema = _schema(body, path)  # a model over the bounds of reading is refused here, unwritten
    bad = _untrusted(schema)
    if bad is None:
        try:
            check_model(model)
        except DamagedModel as exc:
            bad = str(exc)
    if bad is not None:  # refused here, not by the load that would fail later
        raise InvalidArgument("model", type(model).__name__, f"holds {bad}, which a model file may not hold",
                              f"save a fitted rooftune estimator; its types are {__name__}.TRUSTED_TYPES")
    types = _types(schema)
    full = {"magic": MAGIC, "format": FORMAT, **header, "versions": versions(),
            "versioned_libraries": sorted(lib for mod, lib in VERSIONED_LIBRARIES.items()
                                          if any(t.split(".")[0] == mod for t in types)),
            "kind": type(model).__name__, "provenance": getattr(model, "provenance_", {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "wb") as f, zipfile.ZipFile(f, "w") as z:
        z.writestr(HEADER_MEMBER, json_text(full, indent=1, default=_json_default),
                   compress_type=zipfile.ZIP_DEFLATED)
        z.writestr(MODEL_MEMBER, body)  # stored: skops has deflated its members
    return path


_RETRAIN = "retrain it with `rooftune train --save FILE`"


def _refused(path: str | Path, allowed: str, hint: str | None = None) -> InvalidArgument:
    return InvalidArgument("model file", str(path), allowed, hint)


def _existing(path: str | Path) -> Path:
    if not str(path).strip():
        raise _refused(path, "give a file name (or leave the option out for the default model)")
    p = Path(path)
    if p.is_dir():
        raise _refused(p, "is a directory, not a file")
    if not p.is_file():
        raise _refused(p, "does not exist", "train one with `rooftune train --save FILE`")
    return p


def is_pickle(path: str | Path) -> bool:
    """Whether ``path`` starts as a pickle does (protocol 2 or later), read without unpickling."""
    with Path(path).open("rb") as f:
        return f.read(1) == bytes([PICKLE_PROTO])


def _open(path: Path) -> zipfile.ZipFile:
    """The model file's archive; a pickle or any other file is refused with what it is."""
    if is_pickle(path):
        raise _refused(path, "is a pickled model of an earlier rooftune (unpickling can run any code a file "
                       "holds, so rooftune no longer loads pickles)",
                       f"if it comes from a trusted source, convert it with "
                       f"`rooftune model-convert {path} {path.with_suffix(SUFFIX)} --trust-pickle`")
    try:
        with path.open("rb") as f:
            _bounded_directory(f, path, "")
        z = zipfile.ZipFile(path)
    except RooftuneError:
        raise
    except Exception as exc:  # zipfile's errors on a damaged directory are of many types
        raise _refused(path, f"is not a saved rooftune model ({type(exc).__name__})") from None
    try:
        _bounded_members(z, path, "")
    except RooftuneError:
        z.close()
        raise
    return z


def read_header(path: str | Path) -> dict[str, Any]:
    """The header of a model file (magic, format, feature schema, features, versions, kind,
    provenance), read without building the model."""
    path = _existing(path)
    with _open(path) as z:
        return _header(z, path)


def _header(z: zipfile.ZipFile, path: Path) -> dict[str, Any]:
    try:
        info = z.getinfo(HEADER_MEMBER)
    except KeyError:
        raise _refused(path, f"is not a saved rooftune model (no {HEADER_MEMBER})") from None
    if info.file_size > MAX_HEADER_BYTES:
        raise _refused(path, f"is not a saved rooftune model ({HEADER_MEMBER} of {info.file_size} bytes, "
                       f"more than {MAX_HEADER_BYTES})")
    try:
        header = json.loads(_read(z, info, MAX_HEADER_BYTES, HEADER_MEMBER, path))
    except RooftuneError:
        raise
    except Exception as exc:  # zipfile's, its decompressors' or json's, of many types
        raise _refused(path, f"is not a saved rooftune model ({type(exc).__name__} in "
                       f"{HEADER_MEMBER})") from None
    if not isinstance(header, dict) or header.get("magic") != MAGIC:
        raise _refused(path, "is not a saved rooftune model")
    if header.get("format") != FORMAT:
        raise _refused(path, f"is of model file format {header.get('format')!r}, this rooftune reads "
                       f"{FORMAT}",
                       f"upgrade rooftune, or {_RETRAIN}")
    for key, kind in _HEADER_TYPES.items():
        if key in header and not isinstance(header[key], kind):
            raise _refused(path, f"is not a saved rooftune model ({HEADER_MEMBER}'s {key} is a "
                           f"{type(header[key]).__name__}, not a {kind.__name__})")
    return header


#: The types of a header's entries, where present.
_HEADER_TYPES: dict[str, type] = {"features": list, "versions": dict, "versioned_libraries": list, "kind": str,
                                  "provenance": dict, "converted_from": dict}


def _check(header: Mapping[str, Any], path: Path, libraries: Any) -> None:
    """Refuse a model of a feature schema this rooftune does not read, or one holding objects of
    ``libraries`` saved under another minor release of them."""
    schema = header.get("feature_schema")
    # an older schema's features are the first columns of today's: such a model still predicts
    if not is_int(schema) or schema not in SCHEMA_FEATURES or header.get("features") != list(SCHEMA_FEATURES[schema]):
        raise _refused(path, f"uses feature schema {schema}, this rooftune reads "
                       f"{', '.join(map(str, SCHEMA_FEATURES))}", _RETRAIN)
    saved, here = header.get("versions", {}), versions()
    known = sorted(VERSIONED_LIBRARIES.values())
    if not isinstance(saved, Mapping) or not isinstance(libraries, list) or \
            not all(isinstance(lib, str) and lib in known for lib in libraries):
        raise _refused(path, f"is not a saved rooftune model (its versioned libraries are not among "
                       f"{', '.join(known)})")
    for lib in libraries:
        if _minor(str(saved.get(lib, "?"))) != _minor(here[lib]):
            raise _refused(path, f"was saved with {lib} {saved.get(lib)}, this install has {here[lib]}",
                           _RETRAIN)


def load_model(path: str | Path) -> Any:
    """The saved model, after checking its feature schema and library versions match this install
    and that it holds only :data:`TRUSTED_TYPES` (see the module's docstring)."""
    import skops.io

    path = _existing(path)
    with _open(path) as z:
        header = _header(z, path)
        _check(header, path, header.get("versioned_libraries", sorted(VERSIONED_LIBRARIES.values())))
        try:
            body = _read(z, z.getinfo(MODEL_MEMBER), MAX_MEMBER_BYTES, MODEL_MEMBER, path)
            bad = _untrusted(_schema(body, path))
        except RooftuneError:
            raise
        # zipfile, its decompressors and json raise many types on a damaged archive (BadZipFile,
        # zlib.error, EOFError, NotImplementedError for an unknown method, RecursionError...)
        except Exception as exc:
            raise _refused(path, f"is not a saved rooftune model ({type(exc).__name__} in "
                           f"{MODEL_MEMBER})") from None
    if bad is not None:
        raise _refused(path, f"holds {bad}, which no rooftune model holds: refused unloaded",
                       f"use a model file rooftune saved, or {_RETRAIN}")
    try:
        model = skops.io.loads(body, trusted=list(TRUSTED_TYPES))
    except Exception as exc:  # skops's, numpy's or a state's own error: the file is damaged, not code
        raise _refused(path, f"is damaged ({type(exc).__name__} while building the model: {one_line(exc, 160)})",
                       f"save it again, or {_RETRAIN}") from None
    try:
        check_model(model)  # before anything can predict with it
    except DamagedModel as exc:
        raise _refused(path, f"is damaged: {one_line(exc, 300)}", f"save it again, or {_RETRAIN}") from None
    except Exception as exc:  # state odd enough to upset a check is damaged too
        raise _refused(path, f"is damaged ({type(exc).__name__} while checking the model)",
                       f"save it again, or {_RETRAIN}") from None
    if header.get("kind", type(model).__name__) != type(model).__name__:
        raise _refused(path, f"holds a {type(model).__name__}, its header says {header['kind']}",
                       f"save it again, or {_RETRAIN}")
    return model


def convert_pickle(old: str | Path, new: str | Path, trust: bool = False) -> Path:
    """Convert ``old``, a pickled model of an earlier rooftune, to a model file at ``new``
    (:data:`SUFFIX`). Converting unpickles ``old``, which runs any code it holds: refused unless
    ``trust`` is True, to be given only for a file from a trusted source. The feature schema and
    features of the old header are kept, and the release the pickle came from is recorded under
    ``converted_from``."""
    if trust is not True:
        raise InvalidArgument("trust", trust, "converting unpickles the file, which runs any code it holds",
                              "pass trust=True (`--trust-pickle`) only for a file from a trusted source")
    path = _existing(old)
    if not is_pickle(path):
        raise _refused(path, "is not a pickle (a file rooftune saves now needs no conversion)",
                       "pass a pickled model of an earlier rooftune")
    try:
        with path.open("rb") as f:
            payload = pickle.load(f)  # the caller vouched for the file (trust=True)
    except Exception as exc:
        raise _refused(path, f"is not a saved rooftune model ({type(exc).__name__})") from None
    if not isinstance(payload, dict) or payload.get("magic") != MAGIC:
        raise _refused(path, "is not a saved rooftune model")
    # Pickles written before the record of pickled libraries are checked against both.
    _check(payload, path, payload.get("pickled_libraries", sorted(VERSIONED_LIBRARIES.values())))
    return _write(payload["model"], Path(new),
                  {"feature_schema": payload["feature_schema"], "features": payload["features"],
                   "converted_from": {"format": "pickle", "versions": payload.get("versions", {})}})

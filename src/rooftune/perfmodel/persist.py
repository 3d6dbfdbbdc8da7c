"""Saving and loading fitted models with what they need to be trusted elsewhere: the library
versions, the feature schema and the training data's provenance (platforms, row counts)."""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

from rooftune.errors import InvalidArgument
from rooftune.perfmodel.features import FEATURE_SCHEMA_VERSION, FEATURES, SCHEMA_FEATURES

MAGIC = "rooftune-perfmodel"


def versions() -> dict[str, str]:
    import numpy
    import sklearn
    import torch

    import rooftune

    return {"rooftune": getattr(rooftune, "__version__", "0"), "scikit-learn": sklearn.__version__,
            "torch": torch.__version__.split("+")[0], "numpy": numpy.__version__}


def _minor(v: str) -> str:
    return ".".join(v.split(".")[:2])


#: Libraries whose pickled objects do not promise to load under another minor release, by the
#: top-level module their classes live in. A model that holds none of their objects (an MLP keeps
#: its weights as numpy arrays) loads under any release of them.
VERSIONED_LIBRARIES = {"sklearn": "scikit-learn", "torch": "torch"}


class _RecordingPickler(pickle.Pickler):
    """Notes the top-level module of every object it writes."""

    def __init__(self, file: Any) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.modules: set[str] = set()

    def persistent_id(self, obj: Any) -> None:
        self.modules.add(type(obj).__module__.split(".")[0])
        return None


def pickled_libraries(model: Any) -> list[str]:
    """The versioned libraries (:data:`VERSIONED_LIBRARIES`) whose objects pickling ``model`` writes."""
    import io

    pickler = _RecordingPickler(io.BytesIO())
    pickler.dump(model)
    return sorted(lib for mod, lib in VERSIONED_LIBRARIES.items() if mod in pickler.modules)


def save_model(model: Any, path: str | Path) -> Path:
    """Write ``model`` (any fitted rooftune estimator) atomically: a crash leaves the old file."""
    path = Path(path)
    payload = {"magic": MAGIC, "feature_schema": FEATURE_SCHEMA_VERSION, "features": list(FEATURES),
               "versions": versions(), "pickled_libraries": pickled_libraries(model),
               "kind": type(model).__name__, "provenance": getattr(model, "provenance_", {}), "model": model}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".perfmodel-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would hide a shared model from other users
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_header(path: str | Path) -> dict[str, Any]:
    return {k: v for k, v in _read(Path(path)).items() if k != "model"}


def _read(path: Path) -> dict[str, Any]:
    if path.is_dir():
        raise InvalidArgument("model file", str(path), "is a directory, not a file")
    if not path.is_file():
        raise InvalidArgument("model file", str(path), "does not exist", "train one with `rooftune train --save FILE`")
    try:
        with path.open("rb") as f:
            payload = pickle.load(f)
    except Exception as exc:
        raise InvalidArgument("model file", str(path), f"is not a saved rooftune model ({type(exc).__name__})") from None
    if not isinstance(payload, dict) or payload.get("magic") != MAGIC:
        raise InvalidArgument("model file", str(path), "is not a saved rooftune model")
    return payload


def load_model(path: str | Path) -> Any:
    """The saved model, after checking its feature schema and library versions match this install."""
    if not str(path).strip():
        raise InvalidArgument("model file", str(path), "give a file name (or leave the option out for the default model)")
    payload = _read(Path(path))
    schema = payload.get("feature_schema")
    # an older schema's features are the first columns of today's: such a model still predicts
    if schema not in SCHEMA_FEATURES or payload.get("features") != list(SCHEMA_FEATURES[schema]):
        raise InvalidArgument("model file", str(path),
                              f"uses feature schema {schema}, this rooftune reads "
                              f"{', '.join(map(str, SCHEMA_FEATURES))}", "retrain it with `rooftune train --save FILE`")
    saved, here = payload.get("versions", {}), versions()
    # Files written before the record of pickled libraries are checked against both.
    for lib in payload.get("pickled_libraries", sorted(VERSIONED_LIBRARIES.values())):
        if _minor(str(saved.get(lib, "?"))) != _minor(here[lib]):
            raise InvalidArgument("model file", str(path),
                                  f"was saved with {lib} {saved.get(lib)}, this install has {here[lib]}",
                                  "retrain it with `rooftune train --save FILE`")
    return payload["model"]

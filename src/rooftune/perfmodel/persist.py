"""Saving and loading fitted models with what they need to be trusted elsewhere: the library
versions, the feature schema and the training data's provenance (platforms, row counts)."""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

from rooftune.errors import InvalidArgument
from rooftune.perfmodel.features import FEATURE_SCHEMA_VERSION, FEATURES

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


def save_model(model: Any, path: str | Path) -> Path:
    """Write ``model`` (any fitted rooftune estimator) atomically: a crash leaves the old file."""
    path = Path(path)
    payload = {"magic": MAGIC, "feature_schema": FEATURE_SCHEMA_VERSION, "features": list(FEATURES),
               "versions": versions(), "kind": type(model).__name__,
               "provenance": getattr(model, "provenance_", {}), "model": model}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".perfmodel-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_header(path: str | Path) -> dict[str, Any]:
    return {k: v for k, v in _read(Path(path)).items() if k != "model"}


def _read(path: Path) -> dict[str, Any]:
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
    payload = _read(Path(path))
    if payload.get("feature_schema") != FEATURE_SCHEMA_VERSION or payload.get("features") != list(FEATURES):
        raise InvalidArgument("model file", str(path),
                              f"uses feature schema {payload.get('feature_schema')}, this rooftune uses "
                              f"{FEATURE_SCHEMA_VERSION}", "retrain it with `rooftune train --save FILE`")
    saved, here = payload.get("versions", {}), versions()
    for lib in ("scikit-learn", "torch"):
        if _minor(str(saved.get(lib, "?"))) != _minor(here[lib]):
            raise InvalidArgument("model file", str(path),
                                  f"was saved with {lib} {saved.get(lib)}, this install has {here[lib]}",
                                  "retrain it with `rooftune train --save FILE`")
    return payload["model"]

"""The user's own data: samples read from a folder of images, a ``.npz`` or a ``MODULE:CALLABLE``,
split into a calibration part and an evaluation part that never overlap.

    folder/CLASS/*.png    images in class subfolders (torchvision's ImageFolder layout): labels are
                          the subfolders' indices in sorted order
    folder/*.png          images without labels
    file.npz              ``inputs`` (N, *sample shape) and optionally ``labels`` (N,), integers;
                          read without pickles
    MODULE:CALLABLE       code (as a ``module:callable`` model is): returns an iterable of
                          ``(inputs, labels)`` or ``inputs`` batches

An image is decoded to RGB, resized to the example input's height and width and scaled to float32
in [0, 1] with no normalization; ``transform`` (``MODULE:CALLABLE``, taking the RGB ``PIL.Image``)
replaces that. Every refusal is one line naming the path or value and what is allowed.
"""

from __future__ import annotations

import math
import os
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rooftune.errors import InvalidArgument, is_int, is_real

#: Image files read from a folder (what Pillow decodes and ImageFolder lists).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm")
#: Samples read at most: an evaluation's interval narrows as 1/sqrt(n), and at 20,000 samples a
#: 95 % interval on a top-1 accuracy is already +-0.7 points; more only costs time in every trial.
MAX_SAMPLES = 20_000
#: Pixels per image at most before decoding (Pillow's own bomb limit is a warning at 89 M): a
#: classifier's input is at most a few megapixels.
MAX_IMAGE_PIXELS = 50_000_000
#: A ``.npz`` member's uncompressed bytes at most, and its ratio to its compressed bytes: the
#: arrays are read whole, so a small file that inflates to gigabytes is refused before it is.
MAX_NPZ_BYTES = 4 << 30
MAX_NPZ_RATIO = 1000
#: The evaluation part holds at least this many samples: with fewer, a bootstrap interval on a
#: top-1 metric spans tens of points and no budget of one point can be judged.
MIN_EVALUATION = 20
#: The calibration part, unless the caller sizes it: a quarter of the data, at most this many
#: samples (activation ranges from min-max or histogram observers settle within a few dozen).
DEFAULT_CALIBRATION = 64
#: Bootstrap resamples of the evaluation part for each 95 % interval.
BOOTSTRAP_RESAMPLES = 1000
#: The seed of the split and of the bootstrap, recorded with every result.
DEFAULT_SEED = 0
METRICS = ("accuracy", "agreement")


@dataclass(frozen=True)
class DataSpec:
    """What the user's data and accuracy budget are: checked once, here, for the Python API and the
    command line alike. ``data``: a folder, a ``.npz``, or ``MODULE:CALLABLE``; ``metric``:
    ``accuracy``, ``agreement``, ``MODULE:CALLABLE(outputs, labels) -> float``, or None (accuracy
    where the data has labels, else agreement); ``max_drop``: the largest drop of the metric
    against the fp32 model accepted, in the metric's points (accuracy and agreement in percent);
    ``calibration``: the calibration part's size (None: a quarter of the data, at most
    :data:`DEFAULT_CALIBRATION`); ``seed``: the split's and the bootstrap's."""

    data: str
    metric: str | None = None
    max_drop: float = 1.0
    transform: str | None = None
    calibration: int | None = None
    seed: int = DEFAULT_SEED

    def __post_init__(self) -> None:
        if not isinstance(self.data, str | os.PathLike) or not str(self.data):
            raise InvalidArgument("--data", self.data, "allowed a folder of images, a .npz file or MODULE:CALLABLE")
        object.__setattr__(self, "data", str(self.data))
        if self.metric is not None and self.metric not in METRICS and not _is_callable_spec(self.metric):
            raise InvalidArgument("--metric", self.metric, "allowed accuracy, agreement or MODULE:CALLABLE")
        if not is_real(self.max_drop) or not math.isfinite(self.max_drop) or self.max_drop < 0:
            raise InvalidArgument("--max-drop", self.max_drop, "allowed a number >= 0 (points of the metric)")
        if self.transform is not None and not _is_callable_spec(self.transform):
            raise InvalidArgument("--transform", self.transform, "allowed MODULE:CALLABLE")
        if self.calibration is not None and (not is_int(self.calibration) or self.calibration < 1):
            raise InvalidArgument("--calibration", self.calibration, "allowed an integer >= 1")
        if not is_int(self.seed) or self.seed < 0:
            raise InvalidArgument("seed", self.seed, "allowed an integer >= 0")
        if not _is_callable_spec(self.data) and not Path(self.data).exists():  # refused before any model loads
            raise InvalidArgument("--data", self.data, "no such file or folder (allowed a folder of images, a .npz "
                                  "file or MODULE:CALLABLE)")

    def with_calibration(self, n: int) -> DataSpec:
        """This spec with its calibration part sized ``n`` (``--calibration`` beside ``--data``),
        unless it names a size of its own."""
        from dataclasses import replace

        return self if self.calibration is not None else replace(self, calibration=n)

    def as_dict(self) -> dict[str, Any]:
        return {"data": self.data, "metric": self.metric, "max_drop": float(self.max_drop),
                "transform": self.transform, "calibration": self.calibration, "seed": self.seed}


def data_spec(value: DataSpec | str | os.PathLike[str] | None, **kw: Any) -> DataSpec | None:
    """A :class:`DataSpec` from the API's ``data`` argument (a spec, or the data's path or
    ``MODULE:CALLABLE`` with ``kw`` the rest); None without data, where ``kw`` must be unset."""
    if value is None:
        for name, v in kw.items():
            if v is not None:
                raise InvalidArgument(f"--{name.replace('_', '-')}", v, "allowed only with --data (the user's data)")
        return None
    if isinstance(value, DataSpec):
        return value
    return DataSpec(str(value), **{k: v for k, v in kw.items() if v is not None})


def _is_callable_spec(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    mod, sep, name = value.partition(":")
    return bool(sep and mod and name) and all(p.isidentifier() for p in (*mod.split("."), *name.split(".")))


@dataclass
class Samples:
    """Samples of the user's data: ``inputs`` one tuple of tensors per sample (no batch axis),
    ``labels`` an int64 tensor (N,) or None, and where they came from."""

    inputs: list[tuple[Any, ...]]
    labels: Any | None
    source: str
    classes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.inputs)

    def subset(self, idx: Sequence[int]) -> Samples:
        return Samples([self.inputs[i] for i in idx], None if self.labels is None else self.labels[list(idx)],
                       self.source, self.classes)


def load_samples(spec: DataSpec, example: Sequence[Any]) -> Samples:
    """The samples of ``spec.data``, each shaped as one item of the ``example`` inputs (their first
    axis is the batch) and of their dtype."""
    import torch

    data = spec.data
    if _is_callable_spec(data) and not Path(data).exists():
        samples = _from_callable(data, example)
    else:
        path = Path(data)
        if not path.exists():
            raise InvalidArgument("--data", data, "no such file or folder (allowed a folder of images, a .npz "
                                  "file or MODULE:CALLABLE)")
        if path.is_dir():
            samples = _from_folder(path, example, spec.transform)
        elif path.suffix.lower() == ".npz" and path.is_file():
            samples = _from_npz(path, example)
        else:
            raise InvalidArgument("--data", data, "allowed a folder of images, a .npz file or MODULE:CALLABLE")
    if not samples.inputs:
        raise InvalidArgument("--data", data, "holds no samples")
    want = [tuple(x.shape[1:]) for x in example]
    for i, xs in enumerate(samples.inputs):
        got = [tuple(x.shape) for x in xs]
        if got != want:
            raise InvalidArgument("--data", data, f"sample {i} has shape {_shapes(got)}; the model takes {_shapes(want)} "
                                  "per sample (the example input without its batch axis)")
        for x in xs:
            if x.is_floating_point() and not bool(torch.isfinite(x).all()):
                raise InvalidArgument("--data", data, f"sample {i} holds a value that is not finite")
    samples.inputs = [tuple(x.to(e.dtype) for x, e in zip(xs, example, strict=True)) for xs in samples.inputs]
    return samples


def _shapes(shapes: list[tuple[int, ...]]) -> str:
    return ", ".join("(" + ", ".join(map(str, s)) + ")" for s in shapes)


def _image_size(example: Sequence[Any], data: str) -> tuple[int, int]:
    x = example[0] if len(example) == 1 else None
    if x is None or x.dim() != 4 or x.shape[1] != 3:
        shape = _shapes([tuple(e.shape) for e in example])
        raise InvalidArgument("--data", data, f"images need a model of one input shaped (N, 3, H, W); this one takes "
                              f"{shape} (give a .npz or MODULE:CALLABLE instead)")
    return int(x.shape[2]), int(x.shape[3])


def _from_folder(path: Path, example: Sequence[Any], transform: str | None) -> Samples:
    data = str(path)
    subdirs = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    if subdirs:
        files = [(f, k) for k, d in enumerate(subdirs) for f in _images(d)]
        classes = [d.name for d in subdirs]
    else:
        files = [(f, None) for f in _images(path)]
        classes = []
    if not files:
        raise InvalidArgument("--data", data, f"holds no images ({', '.join(IMAGE_SUFFIXES)})")
    if len(files) > MAX_SAMPLES:
        raise InvalidArgument("--data", data, f"holds {len(files)} images; allowed at most {MAX_SAMPLES}")
    h, w = _image_size(example, data)
    fn = user_callable(transform, "--transform") if transform else None
    inputs = [(_image(f, h, w, fn),) for f, _ in files]
    import torch

    labels = torch.tensor([k for _, k in files], dtype=torch.int64) if classes else None
    return Samples(inputs, labels, data, classes)


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir()
                  if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file() and not p.name.startswith("."))


def _image(path: Path, h: int, w: int, transform: Callable[..., Any] | None) -> Any:
    import torch
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            if im.width * im.height > MAX_IMAGE_PIXELS:
                raise InvalidArgument("--data", str(path), f"an image of {im.width}x{im.height} pixels; allowed at most "
                                      f"{MAX_IMAGE_PIXELS} pixels")
            rgb = im.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise InvalidArgument("--data", str(path), f"not a readable image ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:120] if str(exc) else 'empty'})") from None
    if transform is not None:
        out = call_user(transform, "--transform", rgb)
        return torch.as_tensor(np.asarray(out) if not isinstance(out, torch.Tensor) else out)
    arr = np.asarray(rgb.resize((w, h), Image.BILINEAR), dtype=np.float32) / 255.0
    return torch.from_numpy(arr.transpose(2, 0, 1).copy())


def _from_npz(path: Path, example: Sequence[Any]) -> Samples:
    import torch

    data = str(path)
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                ratio = info.file_size / max(info.compress_size, 1)
                if info.file_size > MAX_NPZ_BYTES or ratio > MAX_NPZ_RATIO:
                    raise InvalidArgument("--data", data, f"member {info.filename!r} inflates to {info.file_size} bytes "
                                          f"({ratio:.0f}x); allowed at most {MAX_NPZ_BYTES} bytes and {MAX_NPZ_RATIO}x")
        with np.load(path, allow_pickle=False) as f:
            if "inputs" not in f.files:
                raise InvalidArgument("--data", data, f"has no array 'inputs' (it has {', '.join(f.files) or 'none'})")
            xs = f["inputs"]
            ys = f["labels"] if "labels" in f.files else None
    except InvalidArgument:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise InvalidArgument("--data", data, f"not a readable .npz without pickles ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:120] if str(exc) else 'empty'})") from None
    if xs.dtype.kind not in "fiub" or xs.ndim < 1:
        raise InvalidArgument("--data", data, f"'inputs' is {xs.dtype} of {xs.ndim} axes; allowed numbers, the first "
                              "axis the samples")
    if len(xs) > MAX_SAMPLES:
        raise InvalidArgument("--data", data, f"holds {len(xs)} samples; allowed at most {MAX_SAMPLES}")
    labels = None
    if ys is not None:
        if ys.dtype.kind not in "iu" or ys.shape != (len(xs),):
            raise InvalidArgument("--data", data, f"'labels' is {ys.dtype} shaped {ys.shape}; allowed integers shaped "
                                  f"({len(xs)},), one per sample")
        labels = torch.from_numpy(ys.astype(np.int64))
    inputs = [(torch.from_numpy(np.ascontiguousarray(x)),) for x in xs]
    if len(example) != 1:
        raise InvalidArgument("--data", data, f"a .npz gives one input per sample; the model takes {len(example)} "
                              "(give MODULE:CALLABLE returning tuples)")
    return Samples(inputs, labels, data)


def user_callable(spec: str, name: str) -> Callable[..., Any]:
    from rooftune.platform.processes import import_user_module

    mod, _, attr = spec.partition(":")
    try:
        module = import_user_module(mod)
    except Exception as exc:  # an import runs the user's code: any failure is theirs
        why = f"No module named {exc.name!r}" if isinstance(exc, ModuleNotFoundError) else f"{type(exc).__name__}: {exc}"
        raise InvalidArgument(name, spec, f"cannot import {mod!r} ({why.splitlines()[0][:200]})") from None
    fn: Any = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
    if not callable(fn):
        raise InvalidArgument(name, spec, f"module {mod!r} has no callable {attr!r}")
    return fn


def call_user(fn: Callable[..., Any], name: str, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # the user's code: any failure is theirs, said in one line
        raise InvalidArgument(name, getattr(fn, "__qualname__", repr(fn)),
                              f"raised {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}") from None


def _from_callable(spec: str, example: Sequence[Any]) -> Samples:
    import torch

    batches = call_user(user_callable(spec, "--data"), "--data")
    if not isinstance(batches, Iterable):
        raise InvalidArgument("--data", spec, f"returned {type(batches).__name__}; allowed an iterable of (inputs, labels) "
                              "or inputs batches")
    inputs: list[tuple[Any, ...]] = []
    labels: list[Any] = []
    has_labels: bool | None = None
    n_in = len(example)
    for k, batch in enumerate(batches):
        pair = isinstance(batch, tuple | list) and len(batch) == 2 and n_in == 1 or (
            isinstance(batch, tuple | list) and len(batch) == 2 and isinstance(batch[0], tuple | list))
        xs, ys = (batch[0], batch[1]) if pair else (batch, None)
        xs = tuple(xs) if isinstance(xs, tuple | list) else (xs,)
        try:
            xs = tuple(torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x) for x in xs)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise InvalidArgument("--data", spec, f"batch {k}: inputs are not arrays ({type(exc).__name__})") from None
        if len(xs) != n_in or any(x.dim() == 0 for x in xs) or len({len(x) for x in xs}) != 1:
            raise InvalidArgument("--data", spec, f"batch {k}: {len(xs)} inputs of shapes {_shapes([tuple(x.shape) for x in xs])}; "
                                  f"allowed {n_in} arrays sharing their first (batch) axis")
        if has_labels is None:
            has_labels = ys is not None
        if (ys is not None) != has_labels:
            raise InvalidArgument("--data", spec, f"batch {k}: labels given for some batches only")
        if ys is not None:
            y = torch.as_tensor(np.asarray(ys) if not isinstance(ys, torch.Tensor) else ys)
            if y.dtype.is_floating_point or y.dtype == torch.bool or tuple(y.shape) != (len(xs[0]),):
                raise InvalidArgument("--data", spec, f"batch {k}: labels of {y.dtype} shaped {tuple(y.shape)}; allowed "
                                      f"integers shaped ({len(xs[0])},)")
            labels.append(y.to(torch.int64))
        inputs += [tuple(x[i] for x in xs) for i in range(len(xs[0]))]
        if len(inputs) > MAX_SAMPLES:
            raise InvalidArgument("--data", spec, f"gave more than {MAX_SAMPLES} samples; allowed at most {MAX_SAMPLES}")
    return Samples(inputs, torch.cat(labels) if has_labels and labels else None, spec)


@dataclass(frozen=True)
class Split:
    """The calibration and evaluation parts of the user's data (disjoint, drawn with ``seed``)."""

    calibration: Samples
    evaluation: Samples
    seed: int

    def describe(self) -> str:
        labels = "labelled" if self.evaluation.labels is not None else "unlabelled"
        return (f"{len(self.calibration)} calibration and {len(self.evaluation)} evaluation samples of "
                f"{self.evaluation.source} ({labels}; split seed {self.seed}, disjoint)")


def split(samples: Samples, spec: DataSpec) -> Split:
    """Shuffle ``samples`` with ``spec.seed`` and cut them into a calibration part and an evaluation
    part that never overlap; refuse data too small for both."""
    n = len(samples)
    n_cal = spec.calibration if spec.calibration is not None else max(1, min(DEFAULT_CALIBRATION, n // 4))
    if n - n_cal < MIN_EVALUATION:
        raise InvalidArgument("--data", samples.source, f"holds {n} samples; the split needs {n_cal} for calibration "
                              f"and at least {MIN_EVALUATION} for evaluation ({n_cal + MIN_EVALUATION} in all)")
    order = np.random.default_rng(spec.seed).permutation(n).tolist()
    return Split(samples.subset(order[:n_cal]), samples.subset(order[n_cal:]), spec.seed)


def batches(inputs: Sequence[tuple[Any, ...]], batch: int) -> list[tuple[Any, ...]]:
    """The samples stacked into batches of ``batch`` (the size the model was prepared at); the last
    one filled up with repeats of its first sample, whose outputs :func:`unbatch` drops."""
    import torch

    out = []
    for i in range(0, len(inputs), batch):
        chunk = list(inputs[i:i + batch])
        chunk += [chunk[0]] * (batch - len(chunk))
        out.append(tuple(torch.stack([s[j] for s in chunk]) for j in range(len(chunk[0]))))
    return out


def unbatch(outputs: Sequence[Any], n: int) -> Any:
    """The first output tensor of each batch, concatenated and cut to the ``n`` real samples."""
    import torch

    return torch.cat([o[0] if isinstance(o, tuple | list) else o for o in outputs])[:n]

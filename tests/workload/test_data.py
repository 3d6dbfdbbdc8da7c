"""The user's data: each layout read, refused in one line when it cannot be, split without overlap;
the metric and its drop with their bootstrap intervals."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from rooftune.errors import InvalidArgument
from rooftune.workload.data import MIN_EVALUATION, DataSpec, batches, data_spec, load_samples, split, unbatch
from rooftune.workload.metrics import check_labels, describe, evaluate, metric_name

IMAGE = (torch.zeros(1, 3, 16, 12),)


def _png(path: Path, colour: tuple[int, int, int], size: tuple[int, int] = (20, 30)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path)


def test_an_image_folder_with_class_subfolders_gives_labels_in_sorted_order(tmp_path: Path) -> None:
    for k, cls in enumerate(("cat", "ant", "bee")):
        for i in range(3):
            _png(tmp_path / cls / f"{i}.png", (k * 100, 0, 255))
    (tmp_path / "notes.txt").write_text("not an image")
    s = load_samples(DataSpec(str(tmp_path)), IMAGE)
    assert len(s) == 9 and s.classes == ["ant", "bee", "cat"]
    assert sorted(s.labels.tolist()) == [0] * 3 + [1] * 3 + [2] * 3
    x = s.inputs[0][0]
    assert x.shape == (3, 16, 12) and x.dtype == torch.float32  # resized to the example's height and width
    red = {int(lab): float(xs[0][0, 0, 0]) for xs, lab in zip(s.inputs, s.labels, strict=True)}
    assert red == {0: pytest.approx(100 / 255), 1: pytest.approx(200 / 255), 2: 0.0}  # scaled to [0, 1], no normalization
    assert float(s.inputs[0][0][2].max()) == pytest.approx(1.0)


def test_a_folder_of_images_alone_has_no_labels_and_a_transform_replaces_the_decoding(tmp_path: Path,
                                                                                         monkeypatch) -> None:
    for i in range(2):
        _png(tmp_path / f"{i}.jpg", (10, 20, 30))
    assert load_samples(DataSpec(str(tmp_path)), IMAGE).labels is None
    (tmp_path / "mytransform.py").write_text(
        "import torch\ndef t(im):\n    return torch.full((3, 16, 12), float(im.size[0]))\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    s = load_samples(DataSpec(str(tmp_path), transform="mytransform:t"), IMAGE)
    assert float(s.inputs[0][0][0, 0, 0]) == 20.0


def test_an_npz_and_a_callable_give_samples_of_the_examples_shape(tmp_path: Path, monkeypatch) -> None:
    np.savez(tmp_path / "d.npz", inputs=np.ones((30, 4), np.float64), labels=np.arange(30) % 3)
    s = load_samples(DataSpec(str(tmp_path / "d.npz")), (torch.zeros(2, 4),))
    assert len(s) == 30 and s.inputs[0][0].dtype == torch.float32 and s.labels.tolist()[:4] == [0, 1, 2, 0]
    (tmp_path / "mydata.py").write_text(
        "import numpy as np\n"
        "def labelled():\n    return [(np.zeros((5, 4)), np.arange(5)) for _ in range(3)]\n"
        "def bare():\n    return iter([np.zeros((5, 4))] * 2)\n")
    monkeypatch.chdir(tmp_path)
    s = load_samples(DataSpec("mydata:labelled"), (torch.zeros(1, 4),))
    assert len(s) == 15 and s.labels.tolist()[:6] == [0, 1, 2, 3, 4, 0]
    s = load_samples(DataSpec("mydata:bare"), (torch.zeros(1, 4),))
    assert len(s) == 10 and s.labels is None


@pytest.mark.parametrize(("make", "match"), [
    (lambda p: p.mkdir(), "holds no images"),
    (lambda p: (p.mkdir(), (p / "a.png").write_bytes(b"not a png")), "not a readable image"),
    (lambda p: None, "no such file or folder"),
    (lambda p: p.write_text("x"), "allowed a folder of images, a .npz file"),
])
def test_bad_data_is_refused_in_one_line(tmp_path: Path, make, match: str) -> None:
    path = tmp_path / "d"
    make(path)
    with pytest.raises(InvalidArgument, match=match) as e:
        load_samples(DataSpec(str(path)), IMAGE)
    assert "\n" not in str(e.value) and "--data" in str(e.value)


def test_bad_npz_files_are_refused_in_one_line(tmp_path: Path) -> None:
    cases = {
        "pickled.npz": ({"inputs": np.array([{"a": 1}], dtype=object)}, "without pickles"),
        "noinputs.npz": ({"x": np.zeros(3)}, "has no array 'inputs'"),
        "shape.npz": ({"inputs": np.zeros((25, 5))}, r"sample 0 has shape \(5\); the model takes \(4\)"),
        "labels.npz": ({"inputs": np.zeros((25, 4)), "labels": np.zeros(25)}, "'labels' is float64"),
        "nan.npz": ({"inputs": np.full((25, 4), np.nan)}, "not finite"),
    }
    for name, (arrays, match) in cases.items():
        np.savez(tmp_path / name, **arrays)
        with pytest.raises(InvalidArgument, match=match) as e:
            load_samples(DataSpec(str(tmp_path / name)), (torch.zeros(1, 4),))
        assert "\n" not in str(e.value)
    (tmp_path / "broken.npz").write_bytes(b"PK\x03\x04garbage")
    with pytest.raises(InvalidArgument, match="not a readable .npz"):
        load_samples(DataSpec(str(tmp_path / "broken.npz")), (torch.zeros(1, 4),))


def test_the_spec_refuses_bad_values_with_the_options_name(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("x.npz").write_bytes(b"")
    for kw, name in [({"max_drop": -1}, "--max-drop"), ({"max_drop": float("nan")}, "--max-drop"),
                     ({"metric": "f1"}, "--metric"), ({"transform": "nocolon"}, "--transform"),
                     ({"calibration": 0}, "--calibration")]:
        with pytest.raises(InvalidArgument, match=name):
            DataSpec("x.npz", **kw)
    with pytest.raises(InvalidArgument, match="--metric 'accuracy': allowed only with --data"):
        data_spec(None, metric="accuracy")
    assert data_spec(None, metric=None) is None
    assert data_spec("x.npz", max_drop=None).max_drop == 1.0
    with pytest.raises(InvalidArgument, match="--data 'y.npz': no such file or folder"):
        DataSpec("y.npz")
    assert DataSpec("some.module:make").data == "some.module:make"  # code: imported when read


def test_the_split_never_overlaps_is_seeded_and_refuses_too_few_samples(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", inputs=np.arange(100, dtype=np.float32)[:, None], labels=np.arange(100) % 2)
    spec = DataSpec(str(tmp_path / "d.npz"))
    s = load_samples(spec, (torch.zeros(1, 1),))
    a, b = split(s, spec), split(s, spec)
    cal = {float(x[0]) for (x,) in a.calibration.inputs}
    ev = {float(x[0]) for (x,) in a.evaluation.inputs}
    assert len(cal) == 25 and len(ev) == 75 and not cal & ev and cal | ev == set(range(100))
    assert [float(x[0]) for (x,) in b.evaluation.inputs] == [float(x[0]) for (x,) in a.evaluation.inputs]
    assert "25 calibration and 75 evaluation samples" in a.describe() and "seed 0" in a.describe()
    other = split(s, DataSpec(spec.data, seed=1))
    assert [float(x[0]) for (x,) in other.evaluation.inputs] != [float(x[0]) for (x,) in a.evaluation.inputs]
    with pytest.raises(InvalidArgument, match=f"at least {MIN_EVALUATION} for evaluation"):
        split(s.subset(range(20)), spec)


def test_batches_fill_the_last_one_and_unbatch_drops_the_fill() -> None:
    xs = [(torch.full((2,), float(i)),) for i in range(5)]
    bs = batches(xs, 2)
    assert len(bs) == 3 and bs[-1][0].tolist() == [[4.0, 4.0], [4.0, 4.0]]
    assert unbatch([(b[0] * 10,) for b in bs], 5)[:, 0].tolist() == [0, 10, 20, 30, 40]


def test_the_metric_its_drop_and_their_intervals() -> None:
    labels = torch.arange(200) % 4
    ref = torch.nn.functional.one_hot(labels, 4).float()  # fp32: every sample right
    out = ref.clone()
    out[:6] = torch.nn.functional.one_hot((labels[:6] + 1) % 4, 4).float()  # 6 of 200 wrong: 3 points
    acc = evaluate(out, ref, labels, "accuracy", max_drop=1.0)
    assert acc["value"] == pytest.approx(97.0) and acc["fp32"] == 100.0 and acc["drop"] == pytest.approx(3.0)
    lo, hi = acc["drop_interval"]
    assert 0 < lo <= 3.0 <= hi < 7 and not acc["ok"] and acc["samples"] == 200
    assert evaluate(out, ref, labels, "accuracy", max_drop=3.0)["ok"]
    agree = evaluate(out, ref, None, "agreement", max_drop=5.0)
    assert agree["fp32"] == 100.0 and agree["value"] == pytest.approx(97.0) and agree["ok"]
    assert "accuracy 97.00% [" in describe(acc) and "drop +3.00" in describe(acc)
    assert evaluate(out, ref, labels, "accuracy", 1.0)["drop_interval"] == acc["drop_interval"]  # seeded


def test_a_callable_metric_and_the_checks_of_labels_and_metric(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "mymetric.py").write_text("def mean(outputs, labels):\n    return float(outputs.mean())\n"
                                          "def bad(outputs, labels):\n    return 'high'\n")
    monkeypatch.chdir(tmp_path)
    ref = torch.ones(30, 2)
    r = evaluate(ref * 0.5, ref, None, "mymetric:mean", max_drop=0.6, resamples=50)
    assert r["value"] == 0.5 and r["fp32"] == 1.0 and r["drop"] == 0.5 and r["ok"]
    with pytest.raises(InvalidArgument, match="returned str; allowed a number"):
        evaluate(ref, ref, None, "mymetric:bad", max_drop=1, resamples=5)
    assert metric_name(None, True) == "accuracy" and metric_name(None, False) == "agreement"
    with pytest.raises(InvalidArgument, match="needs labels"):
        metric_name("accuracy", False)
    with pytest.raises(InvalidArgument, match="labels span 0..9; the model's output has 4 classes"):
        check_labels(torch.zeros(10, 4), torch.arange(10), "accuracy", "d.npz")
    with pytest.raises(InvalidArgument, match=r"first output shaped \(N, classes\)"):
        check_labels(torch.zeros(10, 4, 4), None, "agreement", "d.npz")

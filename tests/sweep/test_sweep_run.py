"""A small sweep end to end on made-up ceilings: every point checked against fp32, timed, placed
and stored; run again it resumes from the store; its export carries the platform; its report
holds the figures; the command line prints it and refuses bad input in one line, storing nothing."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

import rooftune
from rooftune.store import Store
from rooftune.sweep import SweepPoint, export
from tests.test_cli import assert_one_line_error, rooftune_in_process

#: Timing kept short: the tests check what is stored and said, not speed.
FAST = 0.02
CONV = {"batch": "1,2", "channels": "4", "size": "6"}


def test_conv2d_sweep_checks_times_places_stores_and_resumes(ceilings_db: Path, tmp_path: Path) -> None:
    r = rooftune.sweep.sweep("conv2d", CONV, passes=["fwd", "bwd", "step"], precisions=["fp32", "bf16", "int8"],
                       layouts=["NCHW", "NHWC"], threads=1, db=str(ceilings_db), point_budget_s=FAST, confirm=False)
    assert r.added == len(r.points) and r.resumed == 0
    by = {(p.params["batch"], p.pass_, p.precision, p.variant.layout, p.variant.algorithm): p for p in r.points}
    ref = by[(1, "fwd", "fp32", "NCHW", "default")]
    assert ref.ok and ref.error is None and ref.verified.startswith("reference")
    # FLOPs: 2 * N * K * P * Q * C * R * S, the backward twice that
    assert ref.flops == 2 * 1 * 4 * 6 * 6 * 4 * 9
    assert by[(1, "bwd", "fp32", "NCHW", "default")].flops == 2 * ref.flops
    assert by[(1, "step", "fp32", "NCHW", "default")].flops > 3 * ref.flops  # and the update
    for p in r.points:
        assert p.ok, p.reason
        assert p.median_s and p.median_s > 0 and p.attained_flops == pytest.approx(p.flops / p.median_s)
        assert p.bound in ("overhead", "compute") or p.bound.startswith("memory-")
        assert set(p.fits) == {"L1", "L2", "L3"} and p.fits["L3"]  # a tiny point fits every level
        if p is not ref and p.error is not None:
            assert p.error <= (p.tolerance or 0)
    bf16 = by[(2, "fwd", "bf16", "NHWC", "default")]
    assert 0 <= bf16.error <= 0.05 and "<= 0.05" in bf16.verified  # type: ignore[operator]
    assert any(k[2] == "int8" and k[1] == "fwd" for k in by)
    assert any("int8 runs the forward pass only" in s.reason for s in r.skipped)
    assert r.findings and any(f.startswith("bounds:") for f in r.findings)
    with Store(ceilings_db) as s:
        assert s.count("sweep_points") == r.added

    again = rooftune.sweep.sweep("conv2d", CONV, passes=["fwd", "bwd", "step"], precisions=["fp32", "bf16", "int8"],
                           layouts=["NCHW", "NHWC"], threads=1, db=str(ceilings_db), point_budget_s=FAST, confirm=False)
    assert again.added == 0 and again.resumed == r.added
    assert [p.median_s for p in again.points] == [p.median_s for p in r.points]

    with Store(ceilings_db) as s:
        stored = [SweepPoint.from_dict(d) for d in s.sweep_points(r.platform_id, "conv2d")]
        path = export(stored, s.fingerprints(), tmp_path / "points.csv")
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == r.added
    assert {row["platform_id"] for row in rows} == {r.platform_id}
    assert json.loads(rows[0]["platform_fingerprint"])["id"] == r.platform_id
    assert {"param_batch", "variant_layout", "median_s", "ci_low_s", "bound", "flops"} <= set(rows[0])

    from rooftune.report import write_sweep_report

    page = write_sweep_report(r, tmp_path / "report")
    text = page.read_text()
    assert "data:image/png;base64," in text and "Findings" in text
    for name in ("time_flops", "time_bytes", "attained", "speedup"):
        assert (tmp_path / "report" / f"{name}.png").stat().st_size > 0
        assert (tmp_path / "report" / f"{name}.svg").read_text().lstrip().startswith("<?xml")


def test_a_stated_speedup_is_measured_again_interleaved(ceilings_db: Path) -> None:
    from rooftune.bench import Policy
    from rooftune.sweep import get_family
    from rooftune.sweep.findings import to_confirm
    from rooftune.sweep.point import interleaved

    r = rooftune.sweep.sweep("conv2d", CONV, precisions=["fp32", "bf16"], layouts=["NCHW"], threads=1,
                       db=str(ceilings_db), point_budget_s=FAST, confirm=False)
    pairs = to_confirm(r.points)
    assert pairs and all((a.precision, b.precision) == ("fp32", "bf16") for a, b in pairs)
    a, b = pairs[0]
    ratio, lo, hi = interleaved(get_family("conv2d"), a, b, policy=Policy(
        min_sample_time_s=0.001, warmup_s=0.0, budget_s=2.0, min_samples=6))  # type: ignore[misc]
    assert 0 < lo <= ratio <= hi


def test_lstm_sweep_in_every_pass(ceilings_db: Path) -> None:
    r = rooftune.sweep.sweep("lstm", {"batch": "1,2", "hidden": 8, "input_size": 4, "seq_len": 3},
                       passes=["fwd", "bwd", "step"], precisions=["fp32", "bf16", "int8"], threads=1,
                       db=str(ceilings_db), point_budget_s=FAST, confirm=False)
    assert {(p.pass_, p.precision) for p in r.points} == {(a, b) for a in ("fwd", "bwd", "step")
                                                          for b in ("fp32", "bf16")}
    assert all(p.ok for p in r.points), [p.reason for p in r.points]
    assert all(p.variant.layout == "-" for p in r.points)
    assert {s.reason for s in r.skipped} == {"lstm has no int8 kernel in this build",
                                              "int8 runs the forward pass only: there are no int8 training kernels"}
    fwd = next(p for p in r.points if p.pass_ == "fwd" and p.precision == "fp32" and p.params["batch"] == 1)
    assert fwd.traffic is not None and fwd.bytes is not None and fwd.traffic > fwd.bytes  # W_hh re-read per step


def test_cli_sweep_prints_points_and_findings_and_exports(ceilings_db: Path, tmp_path: Path) -> None:
    csv_path = tmp_path / "out.csv"
    proc = rooftune_in_process("sweep", "conv2d", "--batch", "1", "--channels", "4", "-p", "size=6",
                               "--precision", "fp32", "--layout", "NCHW,NHWC", "--point-budget", str(FAST), "--no-confirm",
                               "--export", str(csv_path), "--report", str(tmp_path / "rep"), db=ceilings_db)
    assert proc.returncode == 0, proc.stderr
    assert "conv2d N1 C4->K4 6x6 k3 pad 1" in proc.stdout and "NHWC over NCHW" in proc.stdout
    assert "2 points run" in proc.stdout
    assert len(list(csv.DictReader(open(csv_path)))) == 2
    assert (tmp_path / "rep" / "report.html").is_file()


@pytest.mark.parametrize("args,fragments", [
    (["conv2d", "--channels", "16:1024:*0"], ["invalid channels '16:1024:*0'", "factor >= 2"]),
    (["conv2d", "--batch", "a,b"], ["invalid batch 'a,b'"]),
    (["conv3d"], ["invalid family 'conv3d': allowed conv2d, lstm"]),
    (["lstm", "--channels", "8"], ["invalid parameter 'channels': lstm takes"]),
    (["conv2d", "--pass", "forward"], ["invalid pass 'forward'"]),
    (["conv2d", "--precision", "fp64"], ["invalid precision 'fp64'"]),
    (["conv2d", "-p", "size=2", "--kernel", "5", "-p", "padding=0"], ["its output is empty"]),
    (["conv2d", "--batch", "100000", "--channels", "1024"], ["above the cap"]),
    (["conv2d", "--param", "stride"], ["invalid --param 'stride'"]),
    (["conv2d", "--export", "/proc/x.csv"], ["--export", "cannot write in /proc"]),
    (["conv2d", "--export", "x.txt"], ["--export", "allowed extensions .csv, .parquet"]),
])
def test_cli_bad_input_is_one_line_and_stores_nothing(tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    db = tmp_path / "s.db"
    assert_one_line_error(rooftune_in_process("sweep", *args, db=db), *fragments)
    assert not db.exists()


def test_cli_cuda_without_a_gpu_is_one_line(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    db = tmp_path / "s.db"
    assert_one_line_error(rooftune_in_process("sweep", "conv2d", "--device", "cuda", db=db), "invalid --device 'cuda'")
    assert not db.exists()

"""`rooftune train` and `rooftune transfer` on a shared store holding two platforms' rows (this
machine's and another's, as a fleet's profile campaign leaves them): each reads the platform it is
given, not only this machine's, and names the platforms with data when asked for one without."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from rooftune.perfmodel import PerfModel, ProfileData, save_model
from rooftune.platform import Platform, current_platform
from rooftune.store import Store
from tests.perfmodel.test_perfmodel import synthetic
from tests.test_cli import assert_one_line_error, rooftune_in_process


def rows(data: ProfileData) -> list[dict[str, Any]]:
    out = []
    for i, s in enumerate(data.specs):
        for j, p in enumerate(data.primitives):
            t = float(data.times[i, j])
            if not np.isnan(t):
                out.append({"spec_key": s.key(), "spec": s.to_dict(), "primitive": p, "threads": 2, "status": "ok",
                            "median_s": t, "iqr_s": 0.0, "repetitions": 3, "reason": "", "warnings": [],
                            "sources": data.sources[i], "pass_medians": [t, t]})
    return out


def two_platforms(db: str) -> tuple[Platform, Platform]:
    here = current_platform()
    other = dataclasses.replace(here, cpu_model="Another CPU of the fleet", physical_cores=here.physical_cores + 8)
    assert other.id != here.id
    with Store(db) as s:
        s.save_profiles(here, rows(synthetic(30, seed=1)))
        s.save_profiles(other, rows(synthetic(40, seed=3, speed=1.7)))
    return here, other


def test_train_and_transfer_read_any_platform_of_the_shared_store(shared_db: str, tmp_path: Path) -> None:
    here, other = two_platforms(shared_db)
    fitted = {}
    for platform in (other, None):
        args = ["--platform", other.id] if platform else []
        proc = rooftune_in_process("train", "--estimator", "gbr", *args, "--json", "--db", shared_db)
        assert proc.returncode == 0, proc.stderr
        fitted[platform.id if platform else "default"] = json.loads(proc.stdout)["model"]
    assert fitted[other.id]["specs"] == 40 and fitted[other.id]["provenance"]["platforms"] == [other.id]
    assert fitted["default"]["specs"] == 30 and fitted["default"]["provenance"]["platforms"] == [here.id]

    base = save_model(synthetic(60).fit(PerfModel("gbr", n_estimators=20)), tmp_path / "b.rtmodel")
    proc = rooftune_in_process("transfer", "--eval", "--target", other.id, "--base", str(base), "--json",
                               "--db", shared_db)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["target"] == other.id

    proc = rooftune_in_process("train", "--platform", "0123456789abcdef", "--db", shared_db)
    assert_one_line_error(proc, "has no profiled convolutions", "platforms with data:", here.id, other.id)

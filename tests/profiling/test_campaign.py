"""Specs from models and sampling, a resumable campaign, datasets across machines, the CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from rooftune.cli import main
from rooftune.errors import InvalidArgument
from rooftune.primitives import PRIMITIVES, ConvSpec, Kernel, Primitive
from rooftune.profiling import (
    export_profiles,
    import_profiles,
    model_layers,
    run_campaign,
    sample_specs,
    summarize,
)
from rooftune.store import Store

FAST = ["pytorch-default", "im2col-gemm", "winograd-f2x2", "nnpack"]
SPECS = [(ConvSpec(1, 8, 12, 12, 16, 3, 3, padding=1), ["t"]), (ConvSpec(1, 16, 8, 8, 8, 1, 1), ["t"])]


def test_model_layers_are_every_conv_in_order() -> None:
    layers = model_layers("resnet50")
    assert len(layers) == 53 and layers[0].name == "conv1"
    first = layers[0].spec
    assert (first.C, first.H, first.K, first.R, first.stride, first.padding) == (3, 224, 64, 7, (2, 2), (3, 3))
    mb = model_layers("mobilenet_v2", batch=2)
    assert all(layer.spec.N == 2 for layer in mb) and any(layer.spec.depthwise for layer in mb)


def test_sampled_specs_are_seeded_valid_and_varied() -> None:
    a, b = sample_specs(40, batches=[1, 8], seed=3), sample_specs(40, batches=[1, 8], seed=3)
    assert a == b and len(a) == 40 and sample_specs(40, seed=4) != a
    assert {s.N for s in a} == {1, 8} and len({(s.R, s.S) for s in a}) >= 4
    assert any(s.depthwise for s in a) and any(s.stride == (2, 2) for s in a)
    with pytest.raises(InvalidArgument, match="sample"):
        sample_specs(-1)


def test_a_campaign_stores_every_row_once_and_resumes(tmp_path: Path) -> None:
    with Store(tmp_path / "p.db") as store:
        first = run_campaign(SPECS[:1], store=store, primitives=FAST, threads=[1], budget_s=1e-9)
        assert first.stopped_by_budget and first.added == 0  # the budget was spent before the first spec
        r = run_campaign(SPECS, store=store, primitives=FAST, threads=[1])
        rows = store.profiles()
        assert r.added == len(rows) and not r.stopped_by_budget
        by = {(row["spec_key"], row["primitive"]): row for row in rows}
        k3, k1 = SPECS[0][0].key(), SPECS[1][0].key()
        assert by[(k3, "winograd-f2x2")]["status"] == "ok" and by[(k3, "winograd-f2x2")]["median_s"] > 0
        assert by[(k1, "winograd-f2x2")]["status"] == "unsupported" and "1x1 kernel" in by[(k1, "winograd-f2x2")]["reason"]
        assert by[(k3, "transform:nchw-to-nhwc")]["status"] == "ok"
        assert all(row["repetitions"] >= 6 for row in rows if row["status"] == "ok")
        again = run_campaign(SPECS, store=store, primitives=FAST, threads=[1])
        assert again.added == 0 and again.skipped == len(rows) and store.count("profiles") == len(rows)


def test_a_layer_profiled_for_one_network_is_credited_to_the_next(tmp_path: Path) -> None:
    """A second campaign whose network shares a stored layer times nothing again, but the layer's
    rows name both networks: splitting by network must hold it out with either."""
    from rooftune.perfmodel import load_profile_data

    with Store(tmp_path / "p.db") as store:
        run_campaign(SPECS[:1], store=store, primitives=FAST[:2], threads=[1], transforms=False)
        again = run_campaign([(SPECS[0][0], ["u"]), (SPECS[1][0], ["u"])], store=store, primitives=FAST[:2],
                             threads=[1], transforms=False)
        rows = store.profiles()
        data = load_profile_data(store, rows[0]["platform_id"])
    assert again.skipped == 2 and again.added == 2  # the shared layer's two rows skipped, the new layer's added
    by_spec = {r["spec_key"]: r["sources"] for r in rows}
    assert by_spec[SPECS[0][0].key()] == ["t", "u"] and by_spec[SPECS[1][0].key()] == ["u"]
    _, held_u = data.split_by_network(["u"])
    assert len(held_u) == 2 and data.networks == ["t", "u"]


class Broken(Primitive):
    name = "broken"
    library = "test"

    def prepare(self, spec: ConvSpec, weight: torch.Tensor, bias: torch.Tensor | None) -> Kernel:
        return Kernel(spec, lambda x: torch.zeros(spec.output_shape))


def test_a_wrong_primitive_is_stored_failed_never_timed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PRIMITIVES, "broken", Broken)
    with Store(tmp_path / "p.db") as store:
        run_campaign(SPECS[:1], store=store, primitives=["broken"], threads=[1], transforms=False, isolate=False)
        [row] = store.profiles()
    assert row["status"] == "failed" and row["median_s"] is None and "max error" in row["reason"]


class SlowFirst(Primitive):
    """Correct, but slowed by 4 ms per call during the first round (as when another tenant holds a core)."""

    name = "slow-first"
    library = "test"

    def prepare(self, spec: ConvSpec, weight: torch.Tensor, bias: torch.Tensor | None) -> Kernel:
        import time

        state = {"slow": False}

        def run(x: torch.Tensor) -> torch.Tensor:
            if state["slow"]:
                time.sleep(0.004)
            return torch.nn.functional.conv2d(x, weight, bias, spec.stride, spec.padding)

        kernel = Kernel(spec, run)
        SlowFirst.state = state
        return kernel


def fake_canary(monkeypatch: pytest.MonkeyPatch, *script: float) -> list[float]:
    """Puts a stand-in for the machine-speed probe in the campaign: it reads ``script`` in turn,
    then its last value for ever (1 ms when none is given: a machine quiet throughout). Returns the
    readings taken."""
    from rooftune.bench import canary
    from rooftune.profiling import campaign

    left, reads = list(script or [1e-3]), []

    class Probe:
        def read(self) -> float:
            reads.append(left.pop(0) if len(left) > 1 else left[0])
            return reads[-1]

    monkeypatch.setattr(campaign, "Canary", Probe)
    monkeypatch.setattr(canary, "POLL_S", 0.001)
    return reads


def slow_first_pass(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Registers SlowFirst, slowed in its first timed pass only, on a quiet machine; returns the
    labels timed (in this process: the campaigns that use it run with isolate=False)."""
    from rooftune.profiling import work

    fake_canary(monkeypatch)
    monkeypatch.setitem(PRIMITIVES, "slow-first", SlowFirst)
    real = work.measure
    calls: list[str] = []

    def measure(fn, **kw):  # the first pass of the primitive is slow, every later one is not
        calls.append(kw["label"])
        SlowFirst.state["slow"] = calls.count("conv.slow-first") == 1
        return real(fn, **kw)

    monkeypatch.setattr(work, "measure", measure)
    return calls


def test_passes_keep_the_fastest_and_say_when_they_disagree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = slow_first_pass(monkeypatch)
    with Store(tmp_path / "p.db") as store:
        r = run_campaign(SPECS[:1], store=store, primitives=["slow-first"], threads=[1], transforms=False, passes=2,
                         extra_passes=0, isolate=False)
        [row] = store.profiles()
    assert calls == ["conv.slow-first", "conv.slow-first"] and (r.added, r.retimed, r.passes) == (1, 1, 2)
    # the fast pass was timed while the probe read quiet: it confirms itself
    assert r.unconfirmed == 0 and r.extra_run == 0 and r.quiet_rows == 1 and row["pass_canary"] == [1e-3, 1e-3]
    assert row["status"] == "ok" and row["median_s"] < 0.002 and len(row["pass_medians"]) == 2
    assert row["median_s"] == min(row["pass_medians"]) and max(row["pass_medians"]) > 0.004
    assert any("passes disagree" in w for w in row["warnings"])


def test_later_passes_resume_and_time_each_row_once_per_pass(tmp_path: Path) -> None:
    with Store(tmp_path / "p.db") as store:
        # One pass is what a campaign killed during its second pass has left.
        first = run_campaign(SPECS, store=store, primitives=FAST[:2], threads=[1], passes=1)
        before = {(x["spec_key"], x["primitive"]): x for x in store.profiles()}
        assert first.retimed == 0 and all(len(x["pass_medians"]) == 1 for x in before.values() if x["status"] == "ok")
        again = run_campaign(SPECS, store=store, primitives=FAST[:2], threads=[1], passes=2, extra_passes=0)
        after = {(x["spec_key"], x["primitive"]): x for x in store.profiles()}
        ok = [k for k, x in before.items() if x["status"] == "ok"]
        assert again.added == 0 and again.retimed == len(ok) and store.count("profiles") == len(before)
        for k in ok:
            assert after[k]["pass_medians"][0] == before[k]["median_s"] and len(after[k]["pass_medians"]) == 2
            assert after[k]["median_s"] == min(after[k]["pass_medians"])
            assert after[k]["repetitions"] > before[k]["repetitions"]
            # the fastest sample of both passes: no slower than the first's, nor than either median
            assert 0 < after[k]["fastest_s"] <= min(before[k]["fastest_s"], after[k]["median_s"])
        assert run_campaign(SPECS, store=store, primitives=FAST[:2], threads=[1], passes=2, extra_passes=0).retimed == 0
    with pytest.raises(InvalidArgument, match="passes"):
        run_campaign(SPECS, store=None, passes=0)
    with pytest.raises(InvalidArgument, match="extra passes -1"):
        run_campaign(SPECS, store=None, extra_passes=-1)


def test_what_is_due_for_confirmation_follows_the_stored_passes_and_readings() -> None:
    from rooftune.profiling import campaign

    # rows stored without probe readings: confirmed by a second pass within CONFIRM
    assert campaign.confirmed([1.0, 1.02, 2.0]) and not campaign.confirmed([1.0, 1.2, 1.5])
    assert not campaign.confirmed([1.0]) and not campaign.confirmed([])
    # with readings: by a quiet pass within CONFIRM of the fastest, and only so
    assert campaign.confirmed([1.0], [1.0], ref=1.0) and campaign.confirmed([1.0, 1.02], [1.6, 1.05], ref=1.0)
    assert not campaign.confirmed([1.0, 1.01], [1.5, 1.5], ref=1.0)  # agreeing in a slow stretch
    assert not campaign.confirmed([1.0, 1.2], [1.5, 1.0], ref=1.0)  # the quiet pass was slower
    # a row unconfirmed after 4 passes is due in pass 5 only
    spec = SPECS[0][0]
    stored = {(spec.key(), "p", 1): {"status": "ok", "pass_medians": [1.0, 1.2, 1.5, 1.4]},
              (spec.key(), "q", 1): {"status": "ok", "pass_medians": [1.0, 1.01, 1.5, 1.4]},
              (spec.key(), "r", 1): {"status": "ok", "pass_medians": [1.0, 1.01, 1.5, 1.4], "pass_canary": [2.0] * 4},
              (spec.key(), "s", 1): {"status": "ok", "pass_medians": [1.0, 1.2, 1.5, 1.4], "pass_canary": [1.0, 2, 2, 2]}}
    assert campaign._due(stored, 4, 1, spec, ["p", "q", "r", "s"], confirming=True, ref=1.0) == set()
    assert campaign._due(stored, 5, 1, spec, ["p", "q", "r", "s"], confirming=True, ref=1.0) == {"p", "r"}


def test_passes_agreeing_in_a_slow_stretch_are_confirmed_by_one_timed_once_it_is_quiet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two rows of one spec, every pass reading the same time. The probe reads 1.0 around the
    first row in pass 1 (quiet), then 1.5 (a slow stretch) through the rest of both fixed passes:
    the first row is confirmed by its quiet pass, the second, whose passes agree, is not. The
    confirmation pass waits, reading 1.5 twice more, then 1.0, and times the second row only:
    confirmed. A second run of the campaign times nothing."""
    from rooftune.bench import Measurement, Method, Policy
    from rooftune.profiling import campaign, work

    reads = fake_canary(monkeypatch, 1.0, 1.0, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.0)
    calls: list[str] = []

    def measure(fn, *, label, params=None, policy=None):  # every pass reads the same time
        calls.append(label)
        return Measurement(label, (1e-3,) * 6, 1, Method(Policy()))

    monkeypatch.setattr(work, "measure", measure)
    monkeypatch.setattr(campaign, "QUIET_WAIT_SHARE", 1e6)  # (the fixed passes here take milliseconds)
    two = ["pytorch-default", "im2col-gemm"]
    with Store(tmp_path / "p.db") as store:
        r = run_campaign(SPECS[:1], store=store, primitives=two, threads=[1], transforms=False, passes=2,
                         extra_passes=3, isolate=False)
        first, second = sorted(store.profiles(), key=lambda x: calls.index(f"conv.{x['primitive']}"))
        assert reads == [1.0, 1.0, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.0, 1.0, 1.0]
        assert len(calls) == 5 and calls[-1] == f"conv.{second['primitive']}"
        assert (r.retimed, r.extra_run, r.unconfirmed, r.quiet_rows) == (3, 1, 0, 2) and r.waited_s > 0
        assert first["pass_canary"] == [1.0, 1.5] and second["pass_canary"] == [1.5, 1.5, 1.0]
        # the stored readings against the fastest: 1.0, 1.5, 1.5, 1.5, 1.0
        assert r.probe_median == 1.5 and r.probe_quiet_share == pytest.approx(0.4)
        assert r.to_dict()["probe_median"] == 1.5
        assert second["pass_medians"] == [1e-3] * 3
        assert run_campaign(SPECS[:1], store=store, primitives=two, threads=[1], transforms=False, passes=2,
                            extra_passes=3, isolate=False).retimed == 0
    assert len(calls) == 5


class WrongLater(Primitive):
    """Right when first prepared, wrong from the second preparation on."""

    name = "wrong-later"
    library = "test"
    prepared = 0

    def prepare(self, spec: ConvSpec, weight: torch.Tensor, bias: torch.Tensor | None) -> Kernel:
        WrongLater.prepared += 1
        if WrongLater.prepared > 1:
            return Kernel(spec, lambda x: torch.zeros(spec.output_shape))
        return Kernel(spec, lambda x: torch.nn.functional.conv2d(x, weight, bias, spec.stride, spec.padding))


def test_a_kernel_wrong_in_a_later_pass_makes_the_row_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PRIMITIVES, "wrong-later", WrongLater)
    monkeypatch.setattr(WrongLater, "prepared", 0)
    with Store(tmp_path / "p.db") as store:
        r = run_campaign(SPECS[:1], store=store, primitives=["wrong-later"], threads=[1], transforms=False, passes=3,
                         isolate=False)
        [row] = store.profiles()
    assert row["status"] == "failed" and row["median_s"] is None and row["reason"].startswith("pass 2: max error")
    assert r.retimed == 1 and r.counts["failed"] == 1  # not timed in pass 3 once failed


def test_export_import_carries_rows_and_platform(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as a:
        run_campaign(SPECS, store=a, primitives=FAST[:2], threads=[1])
        n = export_profiles(a, tmp_path / "d.csv")
        rows_a = a.profiles()
    assert n == len(rows_a)
    with Store(tmp_path / "b.db") as b:
        r = import_profiles(b, tmp_path / "d.csv")
        assert r == {"rows": n, "added": n, "platforms": 1}
        rows_b = b.profiles()
        assert [(x["spec_key"], x["primitive"], x["median_s"], x["pass_canary"], x["fastest_s"]) for x in rows_b] == \
            [(x["spec_key"], x["primitive"], x["median_s"], x["pass_canary"], x["fastest_s"]) for x in rows_a]
        assert all(0 < x["fastest_s"] <= x["median_s"] for x in rows_b if x["status"] == "ok")
        assert all(len(x["pass_canary"]) == len(x["pass_medians"]) >= 3 for x in rows_b if x["status"] == "ok")
        assert import_profiles(b, tmp_path / "d.csv")["added"] == 0
    # the same rows credited to another network: importing them adds no row, only the network
    with (tmp_path / "u.csv").open("w", newline="") as f:
        rows = list(csv.DictReader((tmp_path / "d.csv").open()))
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows([{**x, "sources": json.dumps(["u"])} for x in rows])
    with Store(tmp_path / "b.db") as b:
        assert import_profiles(b, tmp_path / "u.csv")["added"] == 0
        assert all(x["sources"] == ["t", "u"] for x in b.profiles())
    # A file exported before campaigns had passes has no pass_medians (nor pass_canary) column: each
    # ok row is one pass.
    lines = list(csv.DictReader((tmp_path / "d.csv").open()))
    with (tmp_path / "old.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[k for k in lines[0] if k not in ("pass_medians", "pass_canary", "fastest_s")],
                           extrasaction="ignore")
        w.writeheader()
        w.writerows(lines)
    with Store(tmp_path / "o.db") as o:
        assert import_profiles(o, tmp_path / "old.csv")["added"] == n
        assert all(x["pass_medians"] == [x["median_s"]] and x["pass_canary"] is None and x["fastest_s"] is None
                   for x in o.profiles() if x["status"] == "ok")
    pytest.importorskip("pyarrow")
    with Store(tmp_path / "a.db") as a:
        export_profiles(a, tmp_path / "d.parquet")
    with Store(tmp_path / "c.db") as c:
        assert import_profiles(c, tmp_path / "d.parquet")["added"] == n


def test_a_corrupt_or_foreign_file_imports_nothing(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as a:
        run_campaign(SPECS[:1], store=a, primitives=FAST[:1], threads=[1])
        export_profiles(a, tmp_path / "good.csv")
    lines = list(csv.DictReader((tmp_path / "good.csv").open()))
    cases = {}
    bad = [dict(r) for r in lines]
    bad[-1]["spec_key"] = "0" * 20
    cases["key.csv"] = (bad, "spec_key does not match")
    bad = [dict(r) for r in lines]
    bad[0]["spec"] = "{not json"
    cases["json.csv"] = (bad, "spec is not JSON")
    bad = [dict(r) for r in lines]
    bad[0]["status"] = "ok"
    bad[0]["median_s"] = "-1"
    cases["median.csv"] = (bad, "positive finite median_s")
    ok = next(i for i, r in enumerate(lines) if r["status"] == "ok")
    bad = [dict(r) for r in lines]
    bad[ok]["pass_medians"] = "[-1.0]"
    cases["passes.csv"] = (bad, "pass_medians is not a list")
    bad = [dict(r) for r in lines]
    bad[ok]["pass_medians"] = json.dumps([2 * float(bad[ok]["median_s"])])
    bad[ok]["pass_canary"] = "null"
    cases["fastest.csv"] = (bad, "median_s is not the fastest")
    bad = [dict(r) for r in lines]
    bad[ok]["pass_canary"] = "[0.001]"
    cases["probe.csv"] = (bad, "pass_canary is not one probe reading")
    for column, value, fragment in (
            ("threads", "1000000000000000000000000000000", "threads .* is not a whole number in 1..4096"),
            ("threads", "1.5", "threads .* is not a whole number"),
            ("repetitions", "-3", "repetitions .* is not a whole number >= 0"),
            ("iqr_s", "-0.1", "iqr_s .* is not a finite number >= 0"),
            ("created_at", "inf", "created_at .* is not a finite time"),
            ("warnings", "5", "warnings is not a list of strings"),
            ("sources", '"abc"', "sources is not a list of strings"),
            ("threads", "abc", "threads 'abc' is not a number"),
            ("created_at", "yesterday", "created_at 'yesterday' is not a number"),
            ("primitive", "nosuch", "primitive 'nosuch' is not one rooftune knows"),
            ("fastest_s", "1e9", "fastest_s '1e9' is not a positive time no slower than median_s")):
        bad = [dict(r) for r in lines]
        bad[ok][column] = value
        cases[f"{column}-{len(cases)}.csv"] = (bad, fragment)
    bad = [dict(r) for r in lines]
    for r in bad:
        r["platform"] = json.dumps({"id": r["platform_id"]})
    cases["bare-fingerprint.csv"] = (bad, "the platform fingerprint lacks cpu_model, usable_cores")
    for name, (rows, _) in cases.items():
        with (tmp_path / name).open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    with (tmp_path / "short-row.csv").open("w", newline="") as f:  # a row cut short, one too long
        w = csv.writer(f)
        w.writerow(list(lines[0]))
        w.writerow(list(lines[0].values())[:3])
    cases["short-row.csv"] = (None, "row 2: 3 fields where the header has")
    with (tmp_path / "long-row.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(list(lines[0]))
        w.writerows([list(r.values()) for r in lines[:2]])
        w.writerow([*lines[2].values(), "extra"])
    cases["long-row.csv"] = (None, f"row 4: {len(lines[0]) + 1} fields where the header has {len(lines[0])}")
    (tmp_path / "foreign.csv").write_text("a,b\n1,2\n")
    cases["foreign.csv"] = (None, "missing column")
    (tmp_path / "x.txt").write_text("")
    cases["x.txt"] = (None, "allowed a name ending in .csv or .parquet")
    from rooftune.cli import main

    for name in (next(n for n in cases if n.startswith("primitive-")), "foreign.csv"):  # refused before the store is made
        assert (tmp_path / name).is_file()
        assert main(["data", "import", str(tmp_path / name), "--db", str(tmp_path / "new.db")]) == 2
    assert not (tmp_path / "new.db").exists()
    with Store(tmp_path / "b.db") as b:
        for name, (_, fragment) in cases.items():
            with pytest.raises(InvalidArgument, match=fragment):
                import_profiles(b, tmp_path / name)
        assert b.count("profiles") == 0
    # Rows that borrow a stored platform's id for another machine (other cores, other caches).
    borrowed = [dict(r) for r in lines]
    for r in borrowed:
        fp = json.loads(r["platform"])
        r["platform"] = json.dumps({**fp, "usable_cores": fp["usable_cores"] + 62, "cpu_model": "Another CPU"})
    with (tmp_path / "borrowed.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(borrowed[0]))
        w.writeheader()
        w.writerows(borrowed)
    with Store(tmp_path / "a.db") as a:
        before = a.count("profiles")
        with pytest.raises(InvalidArgument, match="is stored with another cpu_model, usable_cores; nothing imported"):
            import_profiles(a, tmp_path / "borrowed.csv")
        assert a.count("profiles") == before
    with Store(tmp_path / "c.db") as c:  # a store that has not seen that platform takes it as it says
        assert import_profiles(c, tmp_path / "borrowed.csv")["added"] == len(lines)
    # The same machine type with its venv elsewhere: the OpenMP library's path is not part of the
    # platform's identity, and its rows are the platform's own.
    moved = [dict(r) for r in lines]
    for r in moved:
        fp = json.loads(r["platform"])
        if fp.get("openmp"):
            fp["openmp"] = {**fp["openmp"], "path": "/opt/elsewhere/libgomp.so.1"}
        r["platform"] = json.dumps(fp)
        r["created_at"] = str(float(r["created_at"]) + 1)
    with (tmp_path / "moved.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(moved[0]))
        w.writeheader()
        w.writerows(moved)
    with Store(tmp_path / "a.db") as a:
        assert import_profiles(a, tmp_path / "moved.csv")["rows"] == len(lines)


def test_summary_counts_winners_and_speedup() -> None:
    s1, s2 = SPECS[0][0], SPECS[1][0]
    rows = [{"spec_key": s.key(), "primitive": p, "threads": 1, "status": "ok", "median_s": t}
            for s, p, t in ((s1, "pytorch-default", 2.0), (s1, "fft", 1.0), (s2, "pytorch-default", 1.0),
                            (s2, "gemm-1x1-nhwc", 0.5))]
    [r] = summarize(rows, {"m@b1": [s1, s2]})
    assert r["wins"] == {"fft": 1, "gemm-1x1-nhwc": 1} and r["speedup"] == pytest.approx(3.0 / 1.5)


def test_profile_cli_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "c.db")
    code = main(["profile", "--sample", "2", "--primitives", "pytorch-default,im2col-gemm", "--threads", "1",
                 "--db", db, "--budget", "120"])
    assert code == 0 and "rows added" in capsys.readouterr().out
    for args, fragment in (
        (["profile", "--db", db], "give --models and/or --sample"),
        (["profile", "--sample", "1", "--threads", "99", "--db", db], "invalid threads 99"),
        (["profile", "--sample", "1", "--primitives", "nope", "--db", db], "invalid primitive 'nope'"),
        (["profile", "--sample", "1", "--isa-variant", "sse9", "--db", db], "--isa-variant"),
        (["profile", "--sample", "1", "--extra-passes", "11", "--db", db], "invalid extra passes 11"),
        (["data", "import", str(tmp_path / "missing.csv"), "--db", db], "no such file"),
    ):
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert fragment in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    with Store(db) as s:
        assert s.count("profiles") > 0


def test_an_isa_variant_is_a_platform_of_its_own(tmp_path: Path) -> None:
    db = str(tmp_path / "v.db")
    assert main(["profile", "--sample", "1", "--primitives", "pytorch-default", "--threads", "1", "--db", db]) == 0
    assert main(["profile", "--sample", "1", "--primitives", "pytorch-default", "--threads", "1", "--db", db,
                 "--isa-variant", "avx2"]) == 0
    with Store(db) as s:
        platforms = {r["platform_id"] for r in s.profiles()}
        fps = s.fingerprints()
    assert len(platforms) == 2
    capped = [fps[p] for p in platforms if fps[p].get("isa_cap")]
    assert capped and capped[0]["isa_cap"] == "avx2" and "avx512f" not in capped[0]["effective_isa"]


def test_profile_check_verifies_the_shipped_grid(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["profile", "--check", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["failed"] == [] and d["primitives"]["winograd-f4x4"]["ok"] > 0


def test_a_campaign_on_a_slow_host_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe slow on most readings (no steal time needed): the summary line says the rows will
    repeat poorly; a probe quiet on most readings adds nothing."""
    import io

    from rich.console import Console

    from rooftune.cli import profile as cli
    from rooftune.profiling.campaign import CampaignResult

    def printed(result: CampaignResult) -> str:
        buf = io.StringIO()
        monkeypatch.setattr(cli, "out", Console(file=buf, width=1000))
        cli._print_profile(result, [])
        return buf.getvalue()

    slow = CampaignResult("p", counts={"ok": 10, "unsupported": 0, "failed": 0}, probe_median=1.31,
                          probe_quiet_share=0.12)
    assert "the machine-speed probe read 1.31x its fastest on the median reading and quiet on 12% of them" in printed(slow)
    quiet = CampaignResult("p", counts={"ok": 10, "unsupported": 0, "failed": 0}, probe_median=1.02,
                           probe_quiet_share=0.9)
    assert "machine-speed probe" not in printed(quiet)
    assert "machine-speed probe" not in printed(CampaignResult("p"))

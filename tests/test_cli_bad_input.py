"""Bad input across the commands: a one-line error naming the value, exit 2, no traceback, and
nothing measured first when the input could be checked before (a file that cannot be written is
refused up front, not after minutes of work)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from rooftune.errors import InvalidArgument
from tests.test_cli import assert_one_line_error, rooftune, rooftune_in_process


def _paths(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "adir.png").mkdir()
    (tmp_path / "adir.csv").mkdir()
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "garbage.pt2").write_bytes(os.urandom(512))
    return {"TMP": str(tmp_path), "DIRPNG": str(tmp_path / "adir.png"), "DIRCSV": str(tmp_path / "adir.csv"),
            "FILE": str(tmp_path / "a-file"), "PT2": str(tmp_path / "garbage.pt2"), "CSV": str(tmp_path / "out.csv")}


CASES = [
    # model options and shapes that would allocate terabytes
    (["analyze", "lstm", "-o", "hidden=10000000", "--quick"], ["lstm options 'hidden=10000000'", "at most 1073741824"]),
    (["analyze", "lstm", "-o", "seq_len=100000000000", "--quick"], ["1x100000000000x128", "at most 1073741824 elements"]),
    (["analyze", "transformer-encoder", "-o", "layers=100000000000", "--quick"], ["layers=100000000000", "weights"]),
    (["analyze", "resnet18", "--input", "1x1000x1000x1000", "--batch", "4096", "--quick"],
     ["input shape with --batch '4096x1000x1000x1000'"]),
    # options a torchvision builder refuses in its own way
    (["analyze", "resnet18", "-o", "num_classes=-1", "--quick"], ["model 'resnet18': bad option: RuntimeError"]),
    (["analyze", "vgg11", "-o", "dropout=2", "--quick"], ["model 'vgg11': bad option: ValueError"]),
    (["analyze", "{PT2}", "--quick"], ["not a torch.export file"]),
    (["analyze", "resnet18", "-o", "hidden=3", "--quick"],
     ["model 'resnet18': no option 'hidden'; allowed num_classes, zero_init_residual, groups"]),
    # classes that take **kwargs and would drop the mistyped option without a word
    (["analyze", "mobilenet_v3_small", "-o", "width_mul=0.5", "--quick"],
     ["model 'mobilenet_v3_small': no option 'width_mul'", "width_mult, reduced_tail, dilated"]),
    (["analyze", "convnext_tiny", "-o", "layer_scal=1", "--quick"], ["no option 'layer_scal'", "layer_scale"]),
    # output files that cannot be written, refused before any work
    (["analyze", "resnet18", "--quick", "--csv", "{TMP}"], ["--csv", "is a directory"]),
    (["analyze", "resnet18", "--quick", "--csv", "/proc/x.csv"], ["--csv '/proc/x.csv'", "cannot write in /proc"]),
    (["machine", "--quick", "--plot", "{DIRPNG}"], ["--plot", "is a directory"]),
    (["machine", "--quick", "--plot-sweep", "/proc/x.svg"], ["--plot-sweep", "cannot write in /proc"]),
    (["train", "--save", "{TMP}"], ["--save", "is a directory"]),
    (["train", "--save", ""], ["--save ''", "give a file name"]),
    (["train", "--save", "{FILE}/m.pkl"], ["--save", "a-file is a file, not a directory"]),
    (["select", "resnet18", "--no-measure", "--save", "{FILE}"], ["--save", "exists and is not a directory"]),
    (["optimize", "--out", "/proc/foo"], ["--out '/proc/foo'", "cannot write in /proc"]),
    (["optimize", "--out", ""], ["--out ''", "give a directory name"]),
    (["transfer", "--eval", "--curve", "/proc/x.png"], ["--curve", "cannot write in /proc"]),
    # empty lists and values that used to mean something else
    (["machine", "--precision", ""], ["--precision ''", "names separated by commas"]),
    (["tune", "resnet18", "--runtime", ","], ["--runtime ','"]),
    (["optimize", "--runtime", " "], ["--runtime ' '"]),
    (["select", "resnet18", "--threads", "0", "--no-measure"], ["threads 0", "allowed 1.."]),
    (["profile", "--models", "lstm"], ["model 'lstm'", "has no 2-D convolution"]),
    (["profile", "--sample", "1000000000"], ["sample 1000000000", "allowed an integer in 0..100000"]),
    (["profile", "--models", "squeezenet1_0", "--threads", "0"], ["threads 0", "allowed 1.."]),
    (["profile", "--models", "squeezenet1_0", "--budget", "-1"], ["budget -1", "positive number of seconds"]),
    (["profile", "--models", "resnet50,,"], ["--models 'resnet50,,'", "none empty"]),
    (["profile", "--check", "--models", "nosuch"], ["--check 'with --models", "allowed alone or with --json"]),
    # an empty value is refused, not taken for the default
    (["machine", "--quick", "--plot", ""], ["--plot ''", "give a file name"]),
    (["select", "resnet18", "--no-measure", "--model", ""], ["model file ''"]),
    (["transfer", "--base", ""], ["model file ''"]),
    (["optimize", "--skip", ""], ["--skip ''"]),
    # options that mean nothing without another one
    (["train", "--held-out", "resnet50"], ["--held-out 'resnet50'", "allowed only with --eval"]),
    (["transfer", "--curve", "c.png"], ["--curve 'c.png'", "allowed only with --eval"]),
    (["tune", "resnet18", "--calibration", "8"], ["--calibration 8", "allowed only with --int8"]),
    (["transfer", "--method", "base"], ["--method 'base'", "allowed residual, finetune, ensemble, scratch"]),
    (["transfer", "--method", "ensemble", "--base", "m.pkl"], ["--method 'ensemble'", "leave out --base"]),
    (["transfer", "--method", "scratch", "--base", "m.pkl"], ["--method 'scratch'", "leave out --base"]),
    (["tune", "resnet18", "--guidelines-only", "--trials", "3"], ["trials 3", "allowed only without guidelines-only"]),
    # more samples than the candidate pool holds (checked before any is profiled)
    (["transfer", "--models", "squeezenet1_0", "--samples", "100000"], ["samples 100000", "allowed 5..",
                                                                         "distinct convolutions of squeezenet1_0"]),
    # seeds outside what the samplers take
    (["profile", "--models", "squeezenet1_0", "--seed", "18446744073709551616"],
     ["'--seed' '18446744073709551616'", "less than or equal to 4294967295"]),
    (["transfer", "--seed", "-1"], ["'--seed' '-1'", "greater than or equal to 0"]),
    # a store that only commands which read it would have created empty
    (["train"], ["no store at", "nothing was measured there yet"]),
    (["transfer", "--eval"], ["no store at"]),
    (["data", "export", "{CSV}"], ["no store at"]),
    # click's usage errors, in one line with the value
    (["analyze", "resnet18", "--budget", "abc"], ["invalid value for '--budget' 'abc'", "(see rooftune analyze --help)"]),
    (["select", "resnet18", "--batch=1.5"], ["'--batch' '1.5'"]),
    (["analyze", "resnet18", "--bogus"], ["no such option '--bogus'"]),
]


@pytest.mark.parametrize("args,fragments", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_input_is_refused_in_one_line_before_any_work(tmp_path: Path, args: list[str],
                                                          fragments: list[str]) -> None:
    if any("/proc" in a for a in args) and not os.path.isdir("/proc"):
        pytest.skip("no /proc on this system")
    paths = _paths(tmp_path)
    db = tmp_path / "r.db"
    proc = rooftune_in_process(*[a.format(**paths) for a in args], db=db)
    assert_one_line_error(proc, *fragments)
    assert not db.exists() or args[0] == "select"  # it opens the store to read it


@pytest.mark.parametrize("args,fragments", [
    (["data", "export", "{DIRCSV}"], ["dataset file", "is a directory"]),
    (["data", "export", "/proc/x.csv"], ["dataset file '/proc/x.csv'", "cannot write in /proc"]),
    (["data", "export", "{CSV}", "--platform", "nosuch"], ["--platform 'nosuch'", "has no profiled rows"]),
])
def test_an_export_that_cannot_be_written_writes_nothing(tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    from rooftune.store import Store

    paths = _paths(tmp_path)
    Store(tmp_path / "r.db").close()
    proc = rooftune_in_process(*[a.format(**paths) for a in args], db=tmp_path / "r.db")
    assert_one_line_error(proc, *fragments)
    assert not (tmp_path / "out.csv").exists()


def test_an_empty_or_directory_store_path_says_why(tmp_path: Path) -> None:
    assert_one_line_error(rooftune_in_process("data", "export", str(tmp_path / "o.csv"), "--db", ""), "--db is empty")
    assert_one_line_error(rooftune_in_process("data", "export", str(tmp_path / "o.csv"), "--db", str(tmp_path)),
                          f"database path '{tmp_path}' is a directory")


def test_a_saved_configuration_with_values_of_the_wrong_type_is_refused(tmp_path: Path) -> None:
    cases = [({"omp": {"OMP_PROC_BIND": 5}}, "omp OMP_PROC_BIND 5: allowed close, spread"),
             ({"omp": {"OMP_PROC_BIND": None}}, "omp OMP_PROC_BIND None"),
             ({"set_threads": "no"}, "set_threads 'no': allowed true or false"),
             ({"runtime_options": 5}, "runtime_options 5"), ({"name": 5}, "name 5")]
    for i, (cfg, fragment) in enumerate(cases):
        path = tmp_path / f"c{i}.json"
        path.write_text(json.dumps(cfg))
        assert_one_line_error(rooftune_in_process("exec", "--config", str(path), "--", "true"), fragment)


def test_a_command_exec_cannot_run_is_one_line(tmp_path: Path) -> None:
    """In its own process: exec replaces the process when the command starts."""
    (tmp_path / "c.json").write_text("{}")
    script = tmp_path / "not-executable.py"
    script.write_text("print('x')\n")
    if os.access(script, os.X_OK):
        pytest.skip("the file system makes every file executable")
    proc = rooftune("exec", "--config", str(tmp_path / "c.json"), "--", str(script))
    assert_one_line_error(proc, str(script), "Permission denied")


def test_an_output_path_in_directories_still_to_be_made_is_accepted(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from rooftune.paths import output_dir, output_file

    assert output_file(tmp_path / "new" / "deeper" / "m.pkl", "--save", parents=True).name == "m.pkl"
    assert output_dir(tmp_path / "new" / "sel", "--save", parents=True).name == "sel"
    assert not (tmp_path / "new").exists()  # checked, not created
    with pytest.raises(InvalidArgument, match="its directory does not exist"):
        output_file(tmp_path / "new" / "m.pkl", "--save")
    monkeypatch.chdir(tmp_path)
    assert output_file("out.csv", "--csv") == Path("out.csv")  # a bare name: the working directory


# ------------------------------------------------------------------ an option given more than once


def _leaf_commands() -> list[tuple[str, Any]]:
    import typer

    from rooftune.cli import app

    found: list[tuple[str, Any]] = []

    def walk(cmd: Any, path: list[str]) -> None:
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, [*path, name])
        if not getattr(cmd, "commands", None):
            found.append((" ".join(path), cmd))

    walk(typer.main.get_command(app), [])
    return found


def test_every_command_refuses_a_single_valued_option_given_twice() -> None:
    """Each command, each option that takes one value: given twice, refused in one line naming
    both values (click alone keeps the last without a word); so every command stays covered."""
    from rooftune.cli.options import OnceCommand

    commands = _leaf_commands()
    assert len(commands) >= 16
    for path, cmd in commands:
        assert isinstance(cmd, OnceCommand), path
        for p in cmd.params:
            if p.param_type_name != "option" or p.multiple or p.is_eager:
                continue
            name = max(p.opts, key=len)
            twice = [name, name] if p.is_flag else [name, "1", name, "2"]
            proc = rooftune_in_process(*path.split(), *twice)
            assert_one_line_error(proc, f"{name} given twice", "give it once")
            if not p.is_flag:
                assert "(1, 2)" in proc.stderr, (path, name, proc.stderr)


def test_a_repeated_option_never_shows_a_password() -> None:
    proc = rooftune_in_process("machine", "--db", "postgresql://u:hunter2@host/db", "--db=b.db")
    assert_one_line_error(proc, "--db given twice", "postgresql://u:***@host/db, b.db")
    assert "hunter2" not in proc.stderr


def test_list_options_take_every_value_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``--skip tune --skip select`` leaves out both (not tune alone, as click's last-wins did), the
    reproduce command says so, and ``--runtime`` given twice restricts to both."""
    import rooftune.pipeline
    from rooftune.pipeline import OptimizeResult, _commands

    seen: dict[str, Any] = {}

    def fake(model: str, **kw: Any) -> OptimizeResult:
        seen.update(kw)
        r = OptimizeResult(model=model, batch=1, objective="latency", budget_s=kw["budget_s"], out=tmp_path, steps={})
        r.commands = _commands(r, None, steps=kw["steps"])
        return r

    monkeypatch.setattr(rooftune.pipeline, "optimize", fake)
    proc = rooftune_in_process("optimize", "--skip", "tune", "--skip", "select", "--runtime", "eager",
                               "--runtime", "torchscript", "--json")
    assert proc.returncode == 0, proc.stderr
    assert seen["steps"] == ("machine", "analyze", "report") and seen["runtimes"] == ["eager", "torchscript"]
    assert "--skip tune,select" in json.loads(proc.stdout)["commands"][0]
    assert_one_line_error(rooftune_in_process("optimize", "--skip", "tune", "--skip", ""), "--skip 'tune,'")


def test_a_configuration_file_exec_cannot_read_is_one_line_naming_it(tmp_path: Path) -> None:
    """Another encoding, a directory, a FIFO (never waited on), a device, JSON nested too deep."""
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes('{"name": "caf\xe9"}'.encode("latin-1"))
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    cases = {latin1: "not UTF-8 text (byte 0xe9 at offset 13)", tmp_path: "a directory, not a file",
             fifo: "not a regular file", Path("/dev/zero"): "not a regular file", deep: "nested deeper than 64"}
    for path, why in cases.items():
        proc = rooftune_in_process("exec", "--config", str(path), "--", "true")
        assert_one_line_error(proc, f"--config {str(path)!r}: {why}", "allowed a configuration written by rooftune tune")

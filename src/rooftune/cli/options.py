"""The options several commands share, each declared once, and the parsing of comma-separated
values given on the command line.

An option whose name, type and help are the same everywhere is an ``Annotated`` type here
(``Db``, ``JsonOut``...). An option that every command spells the same but describes in its own
words (what ``--json`` prints, what ``--budget`` bounds) is a function of those words that
returns the ``typer.Option``, used as ``Annotated[bool, json_option("the ceilings")]``: the flag,
its short form and the shape of its help stay in one place.

Every command is an :class:`OnceCommand` (the app and its groups are :class:`App`): an option
that takes one value, given twice, is refused; one that takes a list (``--input``, ``--skip``,
``--runtime``, ``--threads``...) is declared as a list and takes every value given, each of them
one name or several separated by commas.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from rooftune.errors import InvalidArgument

DB_HELP = "Store: a file path or SQLAlchemy URL."


def db_option(help: str = DB_HELP) -> Any:
    return typer.Option("--db", help=help)


def json_option(what: str = "the result") -> Any:
    return typer.Option("--json", help=f"Print {what} as one JSON object.")


def input_option(help: str = "Input shape; repeatable.") -> Any:
    return typer.Option("--input", help=help)


def model_option(help: str = "Model option KEY=VALUE.") -> Any:
    return typer.Option("--option", "-o", help=help)


def batch_option(help: str = "Batch size.") -> Any:
    return typer.Option("--batch", help=help)


def budget_option(help: str) -> Any:
    return typer.Option("--budget", help=help)


def threads_option(help: str) -> Any:
    return typer.Option("--threads", help=help)


def device_option(help: str) -> Any:
    return typer.Option("--device", help=help)


def platform_option(help: str) -> Any:
    return typer.Option("--platform", help=help)


def runtime_option(what: str) -> Any:
    return typer.Option("--runtime", help=f"Restrict {what} to these runtimes, e.g. eager,onnxruntime.")


def save_option(help: str) -> Any:
    return typer.Option("--save", help=help)


def bf16_option(help: str) -> Any:
    return typer.Option("--bf16", help=help)


def int8_option(help: str) -> Any:
    return typer.Option("--int8", help=help)


def models_option(help: str) -> Any:
    return typer.Option("--models", help=help)


def eval_option(help: str) -> Any:
    return typer.Option("--eval", help=help)


def seed_option(help: str) -> Any:
    return typer.Option("--seed", min=0, max=2**32 - 1, help=help)


Db = Annotated[str | None, db_option()]
JsonOut = Annotated[bool, json_option()]
Inputs = Annotated[list[str] | None, input_option()]
ModelOptions = Annotated[list[str] | None, model_option()]
Batch = Annotated[int | None, batch_option()]
Objective = Annotated[str | None, typer.Option("--objective", help="latency (p50 per inference; with --train the "
                                               "step's time) or throughput (samples/s); default latency, throughput "
                                               "with --train.")]
Fp32 = Annotated[bool, typer.Option("--fp32", help="Search fp32 only (by default bf16 too where the CPU has it "
                                    "natively and a peer runs it by default).")]
Calibration = Annotated[int | None, typer.Option("--calibration", help="Inputs in the int8 calibration set (default 32).")]

# The user's data (rooftune.workload.data): reduced precisions judged on it against an accuracy budget.
DataOpt = Annotated[str | None, typer.Option("--data", help="Your samples: a folder of images (class subfolders give "
                                             "labels), a .npz (inputs, labels) or MODULE:CALLABLE; bf16 and int8 are "
                                             "then searched and accepted within --max-drop of fp32's metric.")]
Metric = Annotated[str | None, typer.Option("--metric", help="With --data: accuracy (top-1 against the labels; the "
                                            "default with labels), agreement (top-1 agreement with fp32; the default "
                                            "without) or MODULE:CALLABLE(outputs, labels) -> float.")]
MaxDrop = Annotated[float | None, typer.Option("--max-drop", help="With --data: the largest drop of the metric below "
                                               "fp32's accepted, in points (default 1).")]
Transform = Annotated[str | None, typer.Option("--transform", help="With --data: MODULE:CALLABLE taking an RGB "
                                               "PIL image, in place of resizing to the input and scaling to [0, 1].")]

# Serving scenarios (rooftune.tuning.serving): what is measured, and a server's latency target.
Scenario = Annotated[str | None, typer.Option("--scenario", help="single-stream (one request at a time: p50, p90, "
                                              "p99), server (the most requests/s, Poisson arrivals, within --slo-p99 "
                                              "or --slo-p90) or offline (every request queued at once).")]


def _slo(quantile: str) -> Any:
    return Annotated[float | None, typer.Option(f"--slo-{quantile}", help=f"With --scenario server: the {quantile} "
                                                "latency target in ms, queueing included.")]


SloP99 = _slo("p99")
SloP90 = _slo("p90")

#: A Ray cluster's head (rooftune.fleet): the work runs on its nodes, into the shared --db.
Cluster = Annotated[str | None, typer.Option("--cluster", help="Run on the nodes of this Ray cluster (HOST:PORT of "
                                             "its head, or auto), every node writing to the shared --db.")]

#: What ``--int8`` guards a quantized trial with, as the help of tune and optimize says it.
INT8_GUARD = "post-training static quantization; guard: cosine >= 0.99, top-1 >= 99%"


def parse_names(value: str | Sequence[str] | None, name: str, example: str, what: str = "names") -> list[str] | None:
    """A comma-separated list given on the command line, or a list option given several times
    (``--skip tune --skip select`` is ``--skip tune,select``); None when the option was not given,
    refused when it was given empty (``--precision ''`` must not mean "all of them")."""
    if value is not None and not isinstance(value, str):
        value = ",".join(value) if value else None
    if value is None:
        return None
    items = [v.strip() for v in value.split(",")]
    if not all(items):
        raise InvalidArgument(name, value, f"expected {what} separated by commas with none empty, e.g. {example}")
    return items


def parse_int_list(value: str | Sequence[str] | None, name: str) -> list[int] | None:
    items = parse_names(value, name, "1,2", what="integers")
    if items is None:
        return None
    bad = next((v for v in items if not v.lstrip("+-").isdecimal()), None)
    if bad is not None:
        raise InvalidArgument(name, bad, "expected integers separated by commas, e.g. 1,2")
    return [int(v) for v in items]


# Training workloads (--train): a training step instead of a forward pass.
Train = Annotated[bool, typer.Option("--train", help="A training step (forward, loss, backward, optimizer update) "
                                     "instead of a forward pass; batch 32 unless --batch says otherwise.")]
Optimizer = Annotated[str | None, typer.Option("--optimizer", help="With --train: sgd (momentum 0.9, the default) "
                                               "or adamw.")]
Loss = Annotated[str | None, typer.Option("--loss", help="With --train: auto (cross-entropy for a classifier, MSE "
                                          "otherwise), cross-entropy, mse or module:function.")]


def _shown(value: str) -> str:
    """A value as an error message may show it: a URL's password hidden, odd characters escaped."""
    from rooftune.store import redact_url

    value = redact_url(value)
    return value if value and value.isprintable() and value.strip() == value else repr(value)


def _values_given(param: Any, args: list[str]) -> list[str]:
    """The values ``args`` gives ``param`` (the option's name for a flag), in order, up to ``--``."""
    names = [*param.opts, *getattr(param, "secondary_opts", ())]
    flag = bool(getattr(param, "is_flag", False))
    found: list[str] = []
    i = 0
    while i < len(args) and args[i] != "--":
        tok = args[i]
        if tok in names:
            if flag:
                found.append(tok)
            elif i + 1 < len(args):
                found.append(args[i + 1])
                i += 1
        else:
            for n in names:
                if n.startswith("--") and tok.startswith(n + "="):
                    found.append(tok[len(n) + 1:])
                elif not n.startswith("--") and not flag and tok.startswith(n) and len(tok) > len(n):
                    found.append(tok[len(n):])  # a short option's value attached: -o3
        i += 1
    return found


class OnceCommand(TyperCommand):
    """A command whose single-valued options may be given once: click keeps the last of several
    without a word (``--budget 60 --budget 90`` would run with 90, ``--skip tune --skip select``
    would run tune), so a second is refused in one line naming both. An option that takes a list
    (``--input``, ``--skip``, ``--runtime``) is declared as one and takes every value given."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        _opts, _rest, order = self.make_parser(ctx).parse_args(args=list(args))
        times: dict[int, int] = {}
        for p in order:
            if (getattr(p, "param_type_name", "") == "option" and not getattr(p, "multiple", False)
                    and not getattr(p, "count", False) and not getattr(p, "is_eager", False)):
                times[id(p)] = times.get(id(p), 0) + 1
        for p in self.get_params(ctx):
            n = times.get(id(p), 0)
            if n > 1:
                name = max(p.opts, key=len)
                values = _values_given(p, list(args))
                shown = f" ({', '.join(_shown(v) for v in values)})" if len(values) == n and not p.is_flag else ""
                ctx.fail(f"{name} given {'twice' if n == 2 else f'{n} times'}{shown}: give it once")
        return super().parse_args(ctx, args)


class App(typer.Typer):
    """The Typer app of rooftune and of its groups of commands (``data``, ``fleet``): each
    command an :class:`OnceCommand`."""

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", OnceCommand)
        return super().command(*args, **kwargs)

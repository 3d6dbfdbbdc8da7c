"""The options several commands share, each declared once, and the parsing of comma-separated
values given on the command line.

An option whose name, type and help are the same everywhere is an ``Annotated`` type here
(``Db``, ``JsonOut``...). An option that every command spells the same but describes in its own
words (what ``--json`` prints, what ``--budget`` bounds) is a function of those words that
returns the ``typer.Option``, used as ``Annotated[bool, json_option("the ceilings")]``: the flag,
its short form and the shape of its help stay in one place.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

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

#: A Ray cluster's head (rooftune.fleet): the work runs on its nodes, into the shared --db.
Cluster = Annotated[str | None, typer.Option("--cluster", help="Run on the nodes of this Ray cluster (HOST:PORT of "
                                             "its head, or auto), every node writing to the shared --db.")]

#: What ``--int8`` guards a quantized trial with, as the help of tune and optimize says it.
INT8_GUARD = "post-training static quantization; guard: cosine >= 0.99, top-1 >= 99%"


def _parse_names(value: str | None, name: str, example: str, what: str = "names") -> list[str] | None:
    """A comma-separated list given on the command line; None when the option was not given,
    refused when it was given empty (``--precision ''`` must not mean "all of them")."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",")]
    if not all(items):
        raise InvalidArgument(name, value, f"expected {what} separated by commas with none empty, e.g. {example}")
    return items


def _parse_int_list(value: str | None, name: str) -> list[int] | None:
    items = _parse_names(value, name, "1,2", what="integers")
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

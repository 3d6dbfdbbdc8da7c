"""Built-in workloads that are not CNNs: a recurrent network and a transformer encoder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rooftune.errors import InvalidArgument

#: A built-in with more weights than this (4 GiB of fp32) is a typo in its options, not a workload.
MAX_PARAMETERS = 2**30


class RecurrentModel(nn.Module):
    """An LSTM or GRU over a batch-first sequence, returning the output sequence."""

    def __init__(self, cell: str, input_size: int, hidden: int, layers: int, bidirectional: bool) -> None:
        super().__init__()
        rnn = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = rnn(input_size, hidden, num_layers=layers, batch_first=True, bidirectional=bidirectional)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return out


@dataclass(frozen=True)
class Builtin:
    """A built-in workload: its options with defaults, and how the input is shaped from them."""

    name: str
    description: str
    defaults: dict[str, Any]

    def options(self, given: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(given) - set(self.defaults))
        if unknown:
            allowed = ", ".join(f"{k} (default {v})" for k, v in self.defaults.items())
            raise InvalidArgument(f"option of {self.name}", unknown[0], f"allowed {allowed}")
        opts = {**self.defaults, **given}
        for key, value in opts.items():
            default = self.defaults[key]
            if isinstance(default, bool):
                if not isinstance(value, bool):
                    raise InvalidArgument(f"{self.name} option {key}", value, "allowed true or false")
            elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidArgument(f"{self.name} option {key}", value, "allowed a positive integer")
        n = self.parameters(opts)
        if n > MAX_PARAMETERS:
            given_keys = ", ".join(f"{k}={opts[k]}" for k in sorted(given)) or "the defaults"
            raise InvalidArgument(f"{self.name} options", given_keys,
                                  f"they make {n:.3g} weights; at most {MAX_PARAMETERS} (4 GiB of fp32)")
        return opts

    def parameters(self, opts: dict[str, Any]) -> int:
        """How many weights the model built from ``opts`` has (biases included)."""
        if self.name in ("lstm", "gru"):
            gates = 4 if self.name == "lstm" else 3
            dirs = 2 if opts["bidirectional"] else 1
            h = opts["hidden"]

            def layer(width: int) -> int:
                return dirs * gates * h * (width + h + 2)

            return layer(opts["input_size"]) + (opts["layers"] - 1) * layer(h * dirs)
        d, ff = opts["d_model"], opts["ff"]
        return opts["layers"] * (4 * d * d + 4 * d + 2 * d * ff + ff + d + 4 * d)

    def build(self, opts: dict[str, Any]) -> nn.Module:
        if self.name in ("lstm", "gru"):
            return RecurrentModel(
                self.name, opts["input_size"], opts["hidden"], opts["layers"], opts["bidirectional"]
            )
        if opts["d_model"] % opts["heads"]:
            raise InvalidArgument(
                "transformer-encoder option d_model", opts["d_model"], f"must be divisible by heads={opts['heads']}"
            )
        layer = nn.TransformerEncoderLayer(
            opts["d_model"], opts["heads"], opts["ff"], dropout=0.0, batch_first=True
        )
        return nn.TransformerEncoder(layer, opts["layers"], enable_nested_tensor=False)

    def input_shape(self, opts: dict[str, Any], batch: int) -> tuple[int, ...]:
        width = opts["input_size"] if self.name in ("lstm", "gru") else opts["d_model"]
        return (batch, opts["seq_len"], width)


_RNN = {"layers": 2, "hidden": 256, "input_size": 128, "seq_len": 64, "bidirectional": False}
BUILTINS: dict[str, Builtin] = {
    "lstm": Builtin("lstm", "LSTM over a batch-first sequence", dict(_RNN)),
    "gru": Builtin("gru", "GRU over a batch-first sequence", dict(_RNN)),
    "transformer-encoder": Builtin(
        "transformer-encoder",
        "nn.TransformerEncoder, batch-first",
        {"layers": 4, "d_model": 512, "heads": 8, "ff": 2048, "seq_len": 128},
    ),
}

"""A command's options given any number of times: an option that takes one value given twice is
refused in one line naming its values (no password among them); a list option takes them all."""

from __future__ import annotations

import typer
from hypothesis import given
from hypothesis import strategies as st

from rooftune.cli import app

_COMMAND = typer.main.get_command(app).commands["optimize"]  # type: ignore[attr-defined]
_SECRET = "hunter2"
_SINGLE = {"--budget": ["60", "90"], "--db": [f"postgresql://u:{_SECRET}@h/db", "r.db"], "--out": ["o", "p q"],
           "--calibration": ["8"], "--json": [], "--fp32": []}
_LISTS = {"--skip": ("skip", ["tune", "select"]), "--runtime": ("runtime", ["eager", "torchscript"]),
          "--input": ("input_shape", ["1x3x8x8"]), "-o": ("option", ["a=1", "b=2"])}
_PAIRS = st.one_of(
    *(st.sampled_from(values or [None]).map(lambda v, n=name: [n] if v is None else [n, v])
      for name, values in _SINGLE.items()),
    *(st.sampled_from(values).map(lambda v, n=name: [n, v]) for name, (_, values) in _LISTS.items()),
    *(st.sampled_from(values).map(lambda v, n=name: [f"{n}={v}"]) for name, values in _SINGLE.items()
      if values),
)


def _name(group: list[str]) -> str:
    return group[0].split("=", 1)[0]


@given(st.lists(_PAIRS, max_size=8))
def test_a_repeated_single_valued_option_is_refused_and_a_list_takes_all(groups: list[list[str]]) -> None:
    args = [t for g in groups for t in g]
    names = [_name(g) for g in groups]
    repeated = sorted({n for n in names if n in _SINGLE and names.count(n) > 1})
    try:
        ctx = _COMMAND.make_context("optimize", list(args))
    except Exception as exc:  # click's UsageError, however typer vendors it
        message = exc.format_message()  # type: ignore[attr-defined]
        assert repeated, message
        assert "\n" not in message and _SECRET not in message
        assert any(message.startswith(f"{n} given ") and message.endswith("give it once") for n in repeated)
        return
    assert not repeated
    for flag, (param, _) in _LISTS.items():
        given_values = [g[1] for g in groups if g[0] == flag]
        assert (ctx.params[param] or []) == given_values

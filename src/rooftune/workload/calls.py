"""Models called otherwise than with their tensors in order: keyword arguments, nested tuples,
lists or dicts of tensors, arguments that are not tensors (a flag, a scale).

Every runtime rooftune prepares (an ONNX export, an OpenVINO conversion, a TorchScript trace, the
trials' processes) takes a model's input tensors in order. :class:`CallStructure` remembers how one
example call was made, the tensors taken out of it in torch's pytree order and every other
argument kept as it was, and :func:`flat_module` gives a module whose ``forward(*tensors)`` makes
that call. The module is the model itself with its class swapped for a subclass: its layers keep
their names (``layer1.0.conv1``, not ``model.layer1.0.conv1``) in the analysis and in a saved
selection, and it shares the model's weights.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import TreeSpec, keystr, tree_flatten_with_path, tree_unflatten

from rooftune.errors import InvalidArgument


@dataclass(frozen=True)
class CallStructure:
    """How a model is called: ``spec`` rebuilds ``(args, kwargs)`` from its leaves, of which the
    tensors (at ``slots``) are the inputs and the rest (``leaves`` elsewhere) stay fixed."""

    spec: TreeSpec
    leaves: tuple[Any, ...]
    slots: tuple[int, ...]
    #: Each input tensor's place in the call: ``x``, ``mask``, ``extra['bias']``, ``args[1][0]``.
    names: tuple[str, ...]
    #: The names of forward's positional parameters, where known.
    params: tuple[str, ...] = ()

    @classmethod
    def of(cls, args: Sequence[Any], kwargs: dict[str, Any], params: Sequence[str] = ()) -> CallStructure:
        """The structure of ``model(*args, **kwargs)``; ``params``: the names of forward's
        positional parameters, for the inputs' names."""
        paths, spec = tree_flatten_with_path((tuple(args), dict(kwargs)))
        leaves = tuple(v for _, v in paths)
        slots = tuple(i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor))
        return cls(spec, tuple(None if i in slots else v for i, v in enumerate(leaves)), slots,
                   tuple(_name(paths[i][0], params) for i in slots), tuple(params))

    def tensors(self, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[torch.Tensor, ...]:
        """The input tensors of a call made like the example (the same arguments, nested alike,
        the same values where they are not tensors), in order; InvalidArgument otherwise."""
        paths, spec = tree_flatten_with_path((tuple(args), dict(kwargs)))
        if spec != self.spec:
            raise InvalidArgument("call", _signature(tuple(args), kwargs), f"the model was tuned called as {self.describe()}")
        out = []
        for i, (path, v) in enumerate(paths):
            if i in self.slots:
                if not isinstance(v, torch.Tensor):
                    raise InvalidArgument(f"input {_name(path, self.params)}", type(v).__name__, "a torch tensor")
                out.append(v)
            elif not _same(v, self.leaves[i]):
                raise InvalidArgument(f"argument {_name(path, self.params)}", repr(v)[:80],
                                      f"the value it was tuned with, {self.leaves[i]!r}"[:120])
        return tuple(out)

    def describe(self) -> str:
        """The example call as text, each tensor as ``tensor``: ``model(tensor, extra={'bias':
        tensor}, scale=0.5)``."""
        args, kwargs = self.call([_Shown("tensor")] * len(self.slots))
        return "model(" + ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]) + ")"

    def constants(self) -> list[tuple[str, Any]]:
        """The arguments that are not tensors (None aside), by name, with their values."""
        paths, _ = tree_flatten_with_path(tree_unflatten(list(self.leaves), self.spec))
        return [(_name(path, self.params), v) for i, (path, v) in enumerate(paths)
                if i not in self.slots and v is not None]

    def call(self, tensors: Sequence[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(args, kwargs)`` of the example call with ``tensors`` in the tensors' places."""
        leaves = list(self.leaves)
        for i, t in zip(self.slots, tensors, strict=True):
            leaves[i] = t
        args, kwargs = tree_unflatten(leaves, self.spec)
        return tuple(args), dict(kwargs)


def _name(path: Sequence[Any], params: Sequence[str]) -> str:
    """A leaf's path in ``(args, kwargs)`` as the call reads: ``x`` or ``xs[1]`` for a positional
    argument (``args[0]`` where forward's parameters are not known), ``extra['bias']`` for a
    keyword one."""
    where, rest = path[0], path[1:]
    if getattr(where, "idx", None) == 0:  # the positional arguments
        i = rest[0].idx
        return (params[i] if i < len(params) else f"args[{i}]") + keystr(rest[1:])
    return str(rest[0].key) + keystr(rest[1:])


class _Shown:
    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """A call as text, each argument by its type: ``model(Tensor, extra=dict)``."""
    parts = [type(a).__name__ for a in args] + [f"{k}={type(v).__name__}" for k, v in kwargs.items()]
    return f"model({', '.join(parts)})"


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:  # values that do not compare to one truth value
        return a is b


def needs_structure(args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    """Whether a call is other than tensors in order."""
    return bool(kwargs) or not all(isinstance(a, torch.Tensor) for a in args)


def flat_module(model: nn.Module, call: CallStructure) -> nn.Module:
    """``model`` (a shallow copy sharing its layers and weights) whose ``forward(*tensors)``
    calls the model's own forward as ``call`` says."""
    cls = type(model)
    rebuild = call.call

    def forward(self: nn.Module, *tensors: torch.Tensor) -> Any:
        args, kwargs = rebuild(tensors)
        return cls.forward(self, *args, **kwargs)

    flat_cls = type(cls.__name__, (cls,), {"forward": forward, "__module__": cls.__module__,
                                           "__qualname__": cls.__qualname__, "__doc__": cls.__doc__})
    flat = copy.copy(model)
    flat.__class__ = flat_cls
    return flat


def positional_names(model: nn.Module) -> tuple[str, ...]:
    """The names of ``model.forward``'s positional parameters (``x``, ``input_ids`` ...)."""
    import inspect

    try:
        sig = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return ()
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(p.name for p in sig.parameters.values() if p.kind in kinds)

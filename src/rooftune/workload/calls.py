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
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import TreeSpec, keystr, tree_flatten, tree_flatten_with_path, tree_unflatten

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
        for path, v in paths:
            if not isinstance(v, torch.Tensor) and _holds_tensor(v):
                # its tensors would be fixed inside every artifact, and --batch would not reach them
                raise ValueError(f"its argument {argument_name(path, params)} is a {type(v).__name__} holding tensors, which "
                                 "rooftune cannot take apart: pass them in a tuple, list or dict, or register the type "
                                 "with torch.utils._pytree")
        return cls(spec, tuple(None if i in slots else v for i, v in enumerate(leaves)), slots,
                   tuple(argument_name(paths[i][0], params) for i in slots), tuple(params))

    def tensors(self, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[torch.Tensor, ...]:
        """The input tensors of a call made like the example (the same arguments, nested alike,
        keywords and dict keys in any order, the same values where they are not tensors), in
        order; InvalidArgument otherwise."""
        example_args, example_kwargs = self._example
        call = (_ordered(tuple(args), example_args), _ordered(dict(kwargs), example_kwargs))
        leaves, spec = tree_flatten(call)
        if spec != self.spec:
            raise InvalidArgument("call", _signature(tuple(args), kwargs), f"the model was tuned called as {self.describe()}")
        slots = set(self.slots)
        for i, v in enumerate(leaves):
            if (not isinstance(v, torch.Tensor)) if i in slots else not _same(v, self.leaves[i]):
                path = tree_flatten_with_path(call)[0][i][0]
                if i in slots:
                    raise InvalidArgument(f"input {argument_name(path, self.params)}", type(v).__name__, "a torch tensor")
                raise InvalidArgument(f"argument {argument_name(path, self.params)}", repr(v)[:80],
                                      f"the value it was tuned with, {self.leaves[i]!r}"[:120])
        return tuple(leaves[i] for i in self.slots)

    @functools.cached_property
    def _example(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return self.call([None] * len(self.slots))

    def describe(self) -> str:
        """The example call as text, each tensor as ``tensor``: ``model(tensor, extra={'bias':
        tensor}, scale=0.5)``."""
        args, kwargs = self.call([_Shown("tensor")] * len(self.slots))
        return "model(" + ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]) + ")"

    def constants(self) -> list[tuple[str, Any]]:
        """The arguments that are not tensors (None too), by name, with their values: what an
        exported program holds as inputs of its own and does not export again around."""
        paths, _ = tree_flatten_with_path(tree_unflatten(list(self.leaves), self.spec))
        return [(argument_name(path, self.params), v) for i, (path, v) in enumerate(paths) if i not in self.slots]

    def call(self, tensors: Sequence[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(args, kwargs)`` of the example call with ``tensors`` in the tensors' places."""
        leaves = list(self.leaves)
        for i, t in zip(self.slots, tensors, strict=True):
            leaves[i] = t
        args, kwargs = tree_unflatten(leaves, self.spec)
        return tuple(args), dict(kwargs)


def argument_name(path: tuple[Any, ...], params: Sequence[str]) -> str:
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


def _holds_tensor(value: Any, depth: int = 0) -> bool:
    """Whether a value pytree left whole holds a tensor: a dataclass's fields, a mapping's values,
    a sequence's items, an object's attributes (a few levels deep)."""
    import dataclasses
    from collections.abc import Mapping

    if isinstance(value, torch.Tensor):
        return True
    if depth > 3 or isinstance(value, (str, bytes, int, float, complex, type, nn.Module)) or value is None:
        return False
    if dataclasses.is_dataclass(value):
        parts = [getattr(value, f.name) for f in dataclasses.fields(value)]
    elif isinstance(value, Mapping):
        parts = list(value.values())
    elif isinstance(value, (list, tuple, set, frozenset)):
        parts = list(value)
    else:
        parts = list(getattr(value, "__dict__", {}).values())
    return any(_holds_tensor(v, depth + 1) for v in parts)


def _ordered(given: Any, example: Any) -> Any:
    """``given`` with its dicts' keys in ``example``'s order where they hold the same keys (keyword
    arguments and dict inputs are matched by name, not by the order they were written in)."""
    if isinstance(given, dict) and isinstance(example, dict) and set(given) == set(example):
        return {k: _ordered(given[k], example[k]) for k in example}
    if isinstance(given, (list, tuple)) and isinstance(example, (list, tuple)) and len(given) == len(example) \
            and type(given) in (list, tuple):
        return type(given)(_ordered(g, e) for g, e in zip(given, example, strict=True))
    return given


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
    calls the model's own forward as ``call`` says. ValueError, saying why, for a model whose call
    does not go through its class's forward: a forward set on the object (what accelerate's
    hooks do), a class of its own ``__call__``, hooks on the model itself (they would see the
    tensors in order, not the call), a TorchScript module."""
    cls = type(model)
    if isinstance(model, torch.jit.ScriptModule):
        raise ValueError("it is a TorchScript module: give the Python module it was scripted from")
    if "forward" in vars(model):
        raise ValueError("its forward is set on the object itself (a hook library's wrapper): give the module without it")
    # (a .pt2's module, a graph module, brings its own __call__ and an input check as a pre-hook)
    user_module = not isinstance(model, torch.fx.GraphModule)
    if user_module and cls.__call__ is not nn.Module.__call__:
        raise ValueError(f"its class {cls.__name__} defines its own __call__: give a module whose forward takes the call")
    if user_module and any(getattr(model, name, None) for name in ("_forward_pre_hooks", "_forward_hooks")):
        raise ValueError("it has forward hooks on itself, which would see its tensors in order rather than the call: "
                         "remove them, or hook a submodule")
    rebuild = call.call

    def forward(self: nn.Module, *tensors: torch.Tensor) -> Any:
        args, kwargs = rebuild(tensors)
        return cls.forward(self, *args, **kwargs)

    try:
        flat_cls = type(cls.__name__, (cls,), {"forward": forward, "__module__": cls.__module__,
                                               "__qualname__": cls.__qualname__, "__doc__": cls.__doc__})
    except Exception as exc:  # a class that refuses subclasses (a registry in __init_subclass__)
        raise ValueError(f"its class {cls.__name__} cannot be subclassed ({type(exc).__name__}: {exc})"[:300]) from None
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


def take_apart(module: nn.Module, args: Sequence[Any], kwargs: dict[str, Any]
               ) -> tuple[nn.Module, tuple[torch.Tensor, ...], CallStructure | None]:
    """The module and its input tensors in order for ``module(*args, **kwargs)``: the model itself
    where it takes its tensors in order, else the model called as the example was. ValueError,
    saying why, for a call that cannot be taken apart (see :func:`flat_module`)."""
    if not needs_structure(args, kwargs):
        return module, tuple(args), None
    call = CallStructure.of(args, kwargs, positional_names(module))
    return flat_module(module, call), call.tensors(args, kwargs), call

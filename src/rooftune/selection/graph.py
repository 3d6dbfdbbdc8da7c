"""The convolutions of a model and which feed which: a DAG whose edges carry activations from one
convolution to the next through layout-preserving operators (BN, ReLU, pooling, add, concat).
Read with torch.fx; a model fx cannot trace is taken as a chain in execution order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from rooftune.primitives.spec import ConvSpec, layer_spec


@dataclass
class ConvGraph:
    names: list[str]  # qualified module names, in execution order
    specs: list[ConvSpec]
    edges: list[tuple[int, int]]  # producer -> consumer, indices into names
    inputs: list[int] = field(default_factory=list)  # convolutions fed (through other ops) by the model's input
    traced: bool = True  # False when fx failed and the chain in execution order stands in
    skipped: dict[str, str] = field(default_factory=dict)  # convolutions left on their own path -> why

    def __len__(self) -> int:
        return len(self.names)

    @property
    def is_chain(self) -> bool:
        return all(e == (i, i + 1) for i, e in enumerate(self.edges)) and len(self.edges) == len(self) - 1


def selectable(m: torch.nn.Module) -> bool:
    """A module whose primitive can be chosen: a plain nn.Conv2d (a subclass may compute otherwise;
    transposed, 1-D and 3-D convolutions have no primitives here)."""
    return type(m) is torch.nn.Conv2d


def conv_graph(module: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> ConvGraph:
    """Specs from one run with forward hooks; edges from an fx trace."""
    specs: dict[str, ConvSpec] = {}
    order: list[str] = []
    skipped: dict[str, str] = {}
    names = {m: n for n, m in module.named_modules()}
    hooks = []

    def hook(mod: torch.nn.Module, args: tuple[torch.Tensor, ...], _out: torch.Tensor) -> None:
        name = names[mod]
        if name in specs or name in skipped:
            return
        spec = layer_spec(mod, tuple(args[0].shape)) if selectable(mod) else None
        if spec is None:
            skipped[name] = type(mod).__name__ if not selectable(mod) else f"a {args[0].dim()}-D input"
            return
        specs[name] = spec
        order.append(name)

    for m in module.modules():
        if isinstance(m, torch.nn.modules.conv._ConvNd):
            hooks.append(m.register_forward_hook(hook))
    try:
        with torch.no_grad():
            module(*inputs)
    finally:
        for h in hooks:
            h.remove()
    index = {n: i for i, n in enumerate(order)}
    try:
        edges, fed = _fx_edges(module, index)
    except Exception:  # untraceable control flow: the execution order stands in for the graph
        edges, fed = [(i, i + 1) for i in range(len(order) - 1)], [0] if order else []
        return ConvGraph(order, [specs[n] for n in order], edges, fed, traced=False, skipped=skipped)
    return ConvGraph(order, [specs[n] for n in order], sorted(set(edges)), sorted(set(fed)), skipped=skipped)


def _fx_edges(module: torch.nn.Module, index: dict[str, int]) -> tuple[list[tuple[int, int]], list[int]]:
    import torch.fx

    gm = torch.fx.symbolic_trace(module)
    memo: dict[torch.fx.Node, frozenset[int | str]] = {}

    def producers(node: torch.fx.Node) -> frozenset[int | str]:
        """The convolutions (or 'input') whose outputs reach ``node`` without passing another conv."""
        if node in memo:
            return memo[node]
        if node.op == "call_module" and str(node.target) in index:
            out: frozenset[int | str] = frozenset([index[str(node.target)]])
        elif node.op == "placeholder":
            out = frozenset(["input"])
        else:
            acc: set[int | str] = set()
            for a in node.all_input_nodes:
                acc |= producers(a)
            out = frozenset(acc)
        memo[node] = out
        return out

    edges, fed = [], []
    for node in gm.graph.nodes:  # topological order, so the memo fills without deep recursion
        producers(node)
        if node.op == "call_module" and str(node.target) in index:
            j = index[str(node.target)]
            for a in node.all_input_nodes:
                for p in producers(a):
                    if p == "input":
                        fed.append(j)
                    else:
                        edges.append((int(p), j))
    return edges, fed

"""Choosing a primitive per convolution. Per-layer argmin ignores what the choice does to its
neighbours; the layout-aware optimum adds the cost of converting each activation from the layout
its producer writes to the layout its consumer reads (Anderson & Gregg 2018's PBQP formulation):
dynamic programming on a chain, and on a DAG the same objective solved exactly as a small 0-1
integer program (HiGHS through scipy.optimize.milp)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rooftune.primitives import LAYOUTS, PRIMITIVES, get_primitive
from rooftune.primitives.spec import ConvSpec
from rooftune.selection.graph import ConvGraph

DEFAULT = "pytorch-default"


@dataclass(frozen=True)
class Choice:
    layer: str
    spec: ConvSpec
    primitive: str
    time_s: float  # the cost the solver used (predicted or profiled)
    extrapolated: bool = False


@dataclass
class Selection:
    """One primitive per convolution, and what the solver expected it to cost."""

    strategy: str  # per-layer | layout-aware | uniform:NAME | oracle
    choices: list[Choice]
    conversion_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def conv_s(self) -> float:
        return math.fsum(c.time_s for c in self.choices)

    @property
    def total_s(self) -> float:
        return self.conv_s + self.conversion_s

    def primitive_of(self, layer: str) -> str:
        return next(c.primitive for c in self.choices if c.layer == layer)

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "expected_s": self.total_s, "conversion_s": self.conversion_s,
                "notes": self.notes,
                "layers": [{"layer": c.layer, "spec": c.spec.to_dict(), "primitive": c.primitive,
                            "expected_s": c.time_s, "extrapolated": c.extrapolated} for c in self.choices]}


@dataclass
class CostTable:
    """Expected seconds of each primitive on each layer (inf where it does not apply), and of the
    layout conversion of each layer's input."""

    graph: ConvGraph
    primitives: list[str]
    times: np.ndarray  # (layers, primitives)
    convert_s: np.ndarray  # (layers,) NCHW <-> NHWC of the layer's input
    extrapolated: np.ndarray  # (layers,) bool

    def in_layout(self, j: int) -> str:
        return _layouts(self.primitives[j])[0]

    def out_layout(self, j: int) -> str:
        return _layouts(self.primitives[j])[1]


def _layouts(name: str) -> tuple[str, str]:
    p = get_primitive(name)
    return p.in_layout, p.out_layout


def candidate_primitives(precisions: Sequence[str] = ("fp32",)) -> list[str]:
    return [n for n in PRIMITIVES if get_primitive(n).precision in precisions and get_primitive(n).available() is None]


def _edge_cost(table: CostTable, u: int, pu: int, v: int, pv: int) -> float:
    return table.convert_s[v] if table.out_layout(pu) != table.in_layout(pv) else 0.0


def _input_cost(table: CostTable, v: int, pv: int) -> float:
    return table.convert_s[v] if table.in_layout(pv) != "NCHW" else 0.0


def _selection(table: CostTable, pick: Sequence[int], strategy: str, notes: Sequence[str] = ()) -> Selection:
    g = table.graph
    conv = math.fsum(_input_cost(table, v, pick[v]) for v in g.inputs)
    conv += math.fsum(_edge_cost(table, u, pick[u], v, pick[v]) for u, v in g.edges)
    choices = [Choice(g.names[i], g.specs[i], table.primitives[pick[i]], float(table.times[i, pick[i]]),
                      bool(table.extrapolated[i])) for i in range(len(g))]
    return Selection(strategy, choices, conv, list(notes))


def per_layer(table: CostTable) -> Selection:
    """The fastest primitive of each layer, conversions ignored in the choice (counted after)."""
    return _selection(table, [int(np.argmin(table.times[i])) for i in range(len(table.graph))], "per-layer")


def uniform(table: CostTable, name: str) -> Selection:
    """Every layer on ``name``; a layer it does not apply to runs the default path."""
    j, d = table.primitives.index(name), table.primitives.index(DEFAULT)
    pick = [j if math.isfinite(table.times[i, j]) else d for i in range(len(table.graph))]
    return _selection(table, pick, f"uniform:{name}")


def best_uniform(table: CostTable) -> Selection:
    cands = [uniform(table, p) for p in table.primitives]
    return min(cands, key=lambda s: s.total_s)


def layout_aware(table: CostTable) -> Selection:
    """The exact optimum of layer times plus conversion costs."""
    g = table.graph
    if len(g) == 0:
        return Selection("layout-aware", [])
    if g.is_chain:
        return _selection(table, _chain_dp(table), "layout-aware", ["dynamic programming on a chain"])
    return _selection(table, _milp(table), "layout-aware", [f"0-1 program on a DAG of {len(g.edges)} edges"])


def _chain_dp(table: CostTable) -> list[int]:
    n, P = table.times.shape
    cost = np.array([table.times[0, p] + _input_cost(table, 0, p) if 0 in table.graph.inputs else table.times[0, p]
                     for p in range(P)])
    back = np.zeros((n, P), dtype=int)
    for i in range(1, n):
        new = np.full(P, np.inf)
        for q in range(P):
            if not math.isfinite(table.times[i, q]):
                continue
            trans = [cost[p] + _edge_cost(table, i - 1, p, i, q) for p in range(P)]
            back[i, q] = int(np.argmin(trans))
            new[q] = trans[back[i, q]] + table.times[i, q]
        cost = new
    pick = [int(np.argmin(cost))]
    for i in range(n - 1, 0, -1):
        pick.append(int(back[i, pick[-1]]))
    return pick[::-1]


def _milp(table: CostTable) -> list[int]:
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import lil_matrix

    g = table.graph
    n, P = table.times.shape
    ok = [[p for p in range(P) if math.isfinite(table.times[i, p])] for i in range(n)]
    xi: dict[tuple[int, int], int] = {}
    c: list[float] = []
    for i in range(n):
        for p in ok[i]:
            xi[(i, p)] = len(c)
            c.append(float(table.times[i, p]) + (_input_cost(table, i, p) if i in g.inputs else 0.0))
    pairs = [(a, b) for a in LAYOUTS for b in LAYOUTS if a != b]
    zi: list[tuple[int, int, str, str]] = []
    for u, v in g.edges:
        for a, b in pairs:
            zi.append((u, v, a, b))
            c.append(float(table.convert_s[v]))
    nvar = len(c)
    A = lil_matrix((n + len(zi), nvar))
    lo: list[float] = []
    hi: list[float] = []
    for i in range(n):
        for p in ok[i]:
            A[i, xi[(i, p)]] = 1
        lo.append(1)
        hi.append(1)
    for k, (u, v, a, b) in enumerate(zi):
        row = n + k
        for p in ok[u]:
            if table.out_layout(p) == a:
                A[row, xi[(u, p)]] = 1
        for q in ok[v]:
            if table.in_layout(q) == b:
                A[row, xi[(v, q)]] += 1
        A[row, len(xi) + k] = -1
        lo.append(-np.inf)
        hi.append(1)
    integrality = np.array([1] * len(xi) + [0] * len(zi))
    res = milp(np.asarray(c), constraints=LinearConstraint(A.tocsr(), lo, hi), integrality=integrality,
               bounds=Bounds(0, 1))
    if res.x is None:
        raise RuntimeError(f"the selection program has no solution ({res.message})")
    pick = []
    for i in range(n):
        pick.append(max(ok[i], key=lambda p: res.x[xi[(i, p)]]))
    return pick

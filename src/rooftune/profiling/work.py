"""What a campaign does to one spec in the process that times it: each primitive checked
(supported, then prepared and verified against fp64), each layout transform prepared, then each
timed by the harness. :class:`SpecWork` holds those steps once; :class:`InProcess` runs them in
this process and the profiling worker (:mod:`rooftune.profiling._worker`, driven by
:class:`rooftune.profiling.isolated.Isolated`) runs them in a subprocess, where a primitive that
crashes or hangs takes only the worker down.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import torch

from rooftune.bench import Measurement, Policy, measure
from rooftune.bench.canary import Canary
from rooftune.primitives import TRANSFORMS, ConvSpec, Primitive, get_primitive, to_layout
from rooftune.primitives.check import example, reference, verify_kernel

#: Names of modules (comma-separated) imported before primitives are looked up, by the profiling
#: worker and by :func:`rooftune.profiling.profile`. For tests only: it lets a test register a
#: primitive that crashes or hangs in the process that runs it.
TEST_PRIMITIVES_ENV = "ROOFTUNE_TEST_PRIMITIVES"
#: A layout transform's name among a campaign's rows (beside the primitives' names).
TRANSFORM_PREFIX = "transform:"
#: Longest reason stored for a failed row.
REASON_CHARS = 200


def load_test_primitives() -> None:
    """Import the modules named in :data:`TEST_PRIMITIVES_ENV` (none when it is unset)."""
    for name in filter(None, (n.strip() for n in os.environ.get(TEST_PRIMITIVES_ENV, "").split(","))):
        importlib.import_module(name)


@dataclass(frozen=True)
class Outcome:
    """What became of one primitive or transform of a spec: ``status`` ok, unsupported or failed
    with its ``reason``; the Measurement when it was timed; ``crashed`` when it took the process
    that ran it down (a crash or a hang), which a campaign stores at once."""

    status: str
    reason: str = ""
    measurement: Measurement | None = None
    crashed: bool = False


class Probe(Protocol):
    """The machine-speed probe (:class:`rooftune.bench.canary.Canary`): one reading, seconds per call."""

    def read(self) -> float: ...


class Runner(Protocol):
    """Where a campaign's kernels are prepared and timed. :meth:`begin` starts a spec (the kernels
    of the last one are dropped); :meth:`prepare` checks one primitive or transform of it,
    :meth:`measure` times one (prepared first where it is not, as after a crash); ``probe`` reads
    the machine-speed probe where the kernels run, at the threads of :meth:`set_threads`.
    Failures come back as an :class:`Outcome`, never raised; a runner that cannot run at all raises
    MeasurementError."""

    @property
    def probe(self) -> Probe: ...

    def set_threads(self, threads: int) -> None: ...

    def begin(self, spec: ConvSpec, threads: int) -> None: ...

    def prepare(self, name: str) -> Outcome: ...

    def measure(self, name: str, policy: Policy) -> Outcome: ...

    def close(self) -> None: ...


class SpecWork:
    """One spec at one thread count: the seeded example, the fp64 reference (computed for the first
    supported primitive), and the callables prepared for timing, by name (a primitive's registry
    name, or ``transform:NAME``). ``primitive`` looks a name up (the registry by default)."""

    def __init__(self, spec: ConvSpec, threads: int,
                 primitive: Callable[[str], Primitive] = get_primitive) -> None:
        self.spec, self.threads = spec, threads
        self._primitive = primitive
        self._x, self._w, self._b = example(spec)
        self._ref: torch.Tensor | None = None
        self._ready: dict[str, tuple[str, Callable[[], Any], dict[str, Any]]] = {}

    def prepare(self, name: str) -> Outcome:
        """ok (and kept for :meth:`measure`), unsupported, or failed, each with its reason."""
        spec = self.spec
        if name.startswith(TRANSFORM_PREFIX):
            t = TRANSFORMS[name.removeprefix(TRANSFORM_PREFIX)]
            xt = t.example(spec.input_shape)
            fn = t.prepare(spec.input_shape)
            apply = cast(Callable[[], Any], lambda f=fn, xx=xt: f(xx))
            self._ready[name] = (f"transform.{t.name}", apply, {"shape": list(spec.input_shape)})
            return Outcome("ok")
        p = self._primitive(name)
        ok = p.supports(spec)
        if ok is not True:
            return Outcome("unsupported", str(ok))
        if self._ref is None:
            self._ref = reference(spec, self._x, self._w, self._b)
        verdict, kernel = verify_kernel(p, spec, self._x, self._w, self._b, self._ref)
        if not verdict.ok or kernel is None:
            return Outcome("failed", verdict.reason)
        xin = to_layout(self._x, p.in_layout)
        # cast: mypy cannot type a lambda with defaults where a Callable[[], Any] is expected; still a
        # lambda, not a functools.partial, so the call timed is the one it was (the transforms' too)
        run = cast(Callable[[], Any], lambda k=kernel, xi=xin: k.run(xi))
        self._ready[name] = (f"conv.{p.name}", run, {"spec": spec.key(), "threads": self.threads})
        return Outcome("ok")

    def measure(self, name: str, policy: Policy) -> Outcome:
        """``name`` timed by the harness (prepared first where it is not); failed when it does not
        verify or raises (a primitive that verified once and then raises is failed, not timed)."""
        if name not in self._ready:
            first = self.prepare(name)
            if first.status != "ok":
                return first
        label, call, params = self._ready[name]
        try:
            m = measure(call, label=label, policy=policy, params=params)
        except Exception as exc:
            return Outcome("failed", f"{type(exc).__name__}: {exc}"[:REASON_CHARS])
        return Outcome("ok", measurement=m)


class InProcess:
    """Prepares and times in this process: a primitive that crashes or hangs takes the caller
    down. For a primitive registered in this process alone (tests) and for direct calls of
    :func:`rooftune.profiling.profile_spec`; campaigns run :class:`~rooftune.profiling.isolated.Isolated`."""

    def __init__(self, primitives: Sequence[Primitive] = (), probe: Probe | None = None) -> None:
        self._primitives = {p.name: p for p in primitives}
        self.probe: Probe = probe if probe is not None else Canary()
        self._work: SpecWork | None = None

    def _lookup(self, name: str) -> Primitive:
        return self._primitives[name] if name in self._primitives else get_primitive(name)

    def set_threads(self, threads: int) -> None:
        torch.set_num_threads(threads)

    def begin(self, spec: ConvSpec, threads: int) -> None:
        self._work = SpecWork(spec, threads, self._lookup)

    def prepare(self, name: str) -> Outcome:
        assert self._work is not None, "begin() a spec first"
        return self._work.prepare(name)

    def measure(self, name: str, policy: Policy) -> Outcome:
        assert self._work is not None, "begin() a spec first"
        return self._work.measure(name, policy)

    def close(self) -> None:
        self._work = None

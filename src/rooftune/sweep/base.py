"""The contract of a kernel family (:class:`Family`) and what a built point is (:class:`Case`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from rooftune.errors import InvalidArgument

if TYPE_CHECKING:
    import torch
    from torch import nn

    from rooftune.costs import OpCost

#: The passes a point is timed in: the forward pass; the backward pass alone (the gradients of
#: the input and of every weight, from a forward taken once before timing); a training step
#: (forward, loss, backward, optimizer update: rooftune.workload.training).
PASSES = ("fwd", "bwd", "step")


@dataclass
class Case:
    """One point built: the module (fp32, seeded), its inputs, and the forward call the timed
    passes run. ``forward`` is the module's own call unless a primitive replaces it."""

    module: nn.Module
    inputs: tuple[torch.Tensor, ...]
    forward: Callable[[], Any]


class Family(ABC):
    """The contract of a kernel family.

    ``parameters`` names every parameter with its default; ``minimum``/``maximum`` bound them;
    ``aliases`` set several parameters at once (``channels`` is in and out channels);
    ``default_study`` is the study run without options: one axis swept at a time around the
    defaults. ``resolve`` fills the defaults and refuses a point that cannot run (an empty
    output), naming it. ``cost`` gives the forward's FLOPs and bytes (the cost formulas of
    rooftune.costs), ``backward_cost`` the backward pass's.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    parameters: ClassVar[dict[str, int]]
    minimum: ClassVar[dict[str, int]] = {}
    maximum: ClassVar[dict[str, int]] = {}
    aliases: ClassVar[dict[str, tuple[str, ...]]] = {}
    default_study: ClassVar[tuple[dict[str, tuple[int, ...]], ...]]
    #: The memory layouts a point may run in ("-": the family has no layout choice).
    layouts: ClassVar[tuple[str, ...]] = ("-",)
    #: Whether other algorithms than the framework's default can run the family (rooftune's
    #: convolution primitives run conv2d only).
    has_algorithms: ClassVar[bool] = False

    def names(self) -> tuple[str, ...]:
        return tuple(self.parameters) + tuple(self.aliases)

    def expand(self, given: dict[str, Any]) -> dict[str, Any]:
        """The given values with aliases replaced by the parameters they set; an unknown name is
        refused with the family's names."""
        out: dict[str, Any] = {}
        for name, value in given.items():
            if name in self.aliases:
                for target in self.aliases[name]:
                    out[target] = value
            elif name in self.parameters:
                out[name] = value
            else:
                raise InvalidArgument("parameter", name, f"{self.name} takes {', '.join(self.names())}")
        return out

    @abstractmethod
    def resolve(self, params: dict[str, int]) -> dict[str, int]:
        """Every parameter of one point (defaults filled in, derived ones computed); raises
        InvalidArgument naming the point when it cannot run."""

    @abstractmethod
    def describe(self, params: dict[str, int]) -> str:
        """The point in a few words."""

    @abstractmethod
    def build(self, params: dict[str, int], *, seed: int = 0) -> Case:
        """The module (fp32, weights from ``seed``) and its seeded inputs."""

    @abstractmethod
    def cost(self, case: Case, outputs: Any) -> OpCost:
        """FLOPs and compulsory bytes of the forward pass, from the cost formulas."""

    @abstractmethod
    def backward_cost(self, params: dict[str, int], forward: OpCost, itemsize: int) -> OpCost:
        """FLOPs and compulsory bytes of the backward pass (input and weight gradients)."""

    @abstractmethod
    def tensor_elements(self, params: dict[str, int]) -> int:
        """Elements of the tensors one forward holds (inputs, weights, outputs), for the memory cap."""

    def algorithms(self, params: dict[str, int], precision: str) -> dict[str, str | None]:
        """Algorithms other than the framework's default that could run this point's forward pass
        at ``precision``: name -> None, or why it cannot here."""
        return {}

    def with_algorithm(self, case: Case, params: dict[str, int], algorithm: str, layout: str) -> Case:
        """The case with its forward run by ``algorithm`` (see :meth:`algorithms`)."""
        raise InvalidArgument("algorithm", algorithm, f"{self.name} runs only the framework's default")

    def int8_reason(self, params: dict[str, int]) -> str | None:
        """None when an int8 forward pass exists for this point (an int8 algorithm), else why not."""
        return f"{self.name} has no int8 kernel in this build"

    def int8_algorithm(self, params: dict[str, int]) -> str:
        """The algorithm an int8 point runs on (where :meth:`int8_reason` is None)."""
        raise InvalidArgument("precision", "int8", self.int8_reason(params) or f"{self.name} has no int8 kernel")

    def primitive_layout(self, algorithm: str) -> str:
        """The memory layout ``algorithm`` takes its input in."""
        return self.layouts[0]

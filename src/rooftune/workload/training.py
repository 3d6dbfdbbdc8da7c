"""A training step: forward, loss, backward, optimizer update, zero_grad.

One mechanism for every place rooftune runs training: the ``--train`` workloads of analyze, tune
and optimize, and the ``step`` pass of a kernel-family sweep. The data is synthetic and seeded
(the inputs the workload already has, and a target drawn once from the model's own output shape),
so every configuration of a study runs the same steps and their parameters can be compared.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rooftune.errors import InvalidArgument, WorkloadError, is_real, one_line
from rooftune.platform.sysfs import available_memory
from rooftune.runtime_options import OPTIMIZER_IMPLS  # (a configuration's optimizer option too)

#: Losses by name; ``auto`` picks cross-entropy for a classifier's logits, MSE otherwise, and a
#: ``module:function`` names the user's own (code, as docs/security.md says of every such spec).
LOSSES = ("auto", "cross-entropy", "mse")
OPTIMIZERS = ("sgd", "adamw")
#: The default batch of a training workload: a step at batch 1 says little about training speed,
#: and BatchNorm cannot train on one sample.
TRAIN_BATCH = 32
#: What ``--train`` takes, as its refusals say it: the step is PyTorch's (autograd, torch.optim).
TRAIN_FRAMEWORKS = "a PyTorch model (a training step runs PyTorch's autograd and optimizers; a TensorFlow model is analysed and tuned for inference)"
#: Seed of the synthetic target, so every process of a study trains towards the same numbers.
TARGET_SEED = 1


@dataclass(frozen=True)
class TrainSpec:
    """What a training step runs besides the model. Checked on construction, so the Python API and
    the CLI refuse the same values with the same words."""

    optimizer: str = "sgd"
    loss: str = "auto"
    lr: float = 0.01
    #: SGD's momentum (PyTorch's own examples and torchvision's reference recipe use 0.9).
    momentum: float = 0.9
    weight_decay: float = 0.0
    impl: str = "default"

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise InvalidArgument("optimizer", self.optimizer, ", ".join(OPTIMIZERS))
        if self.impl not in OPTIMIZER_IMPLS:
            raise InvalidArgument("optimizer implementation", self.impl, ", ".join(OPTIMIZER_IMPLS))
        if self.loss not in LOSSES and not _is_callable_spec(self.loss):
            raise InvalidArgument("loss", self.loss, ", ".join(LOSSES) + " or module:function")
        for name in ("lr", "momentum", "weight_decay"):
            value = getattr(self, name)
            if not is_real(value) or not math.isfinite(value) or value < 0 or (name == "lr" and value == 0):
                raise InvalidArgument(name, value, "a finite number " + ("> 0" if name == "lr" else ">= 0"))

    def as_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer, "loss": self.loss, "lr": self.lr, "momentum": self.momentum,
                "weight_decay": self.weight_decay, "impl": self.impl}


def _is_callable_spec(text: Any) -> bool:
    if not isinstance(text, str) or text.count(":") != 1:
        return False
    module, name = text.split(":")
    return bool(module) and name.isidentifier() and all(part.isidentifier() for part in module.split("."))


def check_trainable(module: nn.Module, name: str) -> None:
    """Refuse a model a step cannot train: no parameters that take a gradient."""
    if not any(p.requires_grad for p in module.parameters()):
        raise WorkloadError(f"model {name!r} has no trainable parameters: a training step would update nothing")


def check_batch_norm(module: nn.Module, batch: int, name: str) -> None:
    """Refuse BatchNorm at batch 1 in training mode, where torch would fail mid-step: a batch's
    variance over one value per channel is undefined."""
    if batch > 1:
        return
    for sub_name, sub in module.named_modules():
        if isinstance(sub, nn.modules.batchnorm._BatchNorm):
            raise WorkloadError(
                f"model {name!r} has BatchNorm ({sub_name or 'the model'}) and cannot train at batch 1: "
                "its batch variance needs more than one value per channel; use --batch 2 or more")


def first_tensor(output: Any) -> torch.Tensor:
    """The tensor a loss is taken of: the output itself, or the first tensor in a tuple, list or
    dict output (a recurrent layer's ``(output, state)``, a detection head's dict)."""
    if isinstance(output, torch.Tensor):
        return output
    values = output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else ()
    for value in values:
        try:
            return first_tensor(value)
        except WorkloadError:
            continue
    raise WorkloadError(f"the model's output ({type(output).__name__}) holds no tensor to take a loss of")


def loss_kind(spec: TrainSpec, output: torch.Tensor) -> str:
    """``cross-entropy`` for a classifier's logits (a floating 2-D ``batch x classes`` output with
    more than one class), ``mse`` for anything else, or the spec's own choice."""
    if spec.loss != "auto":
        return spec.loss
    if output.dim() == 2 and output.shape[1] > 1 and output.is_floating_point():
        return "cross-entropy"
    return "mse"


def synthetic_target(output: torch.Tensor, kind: str) -> torch.Tensor:
    """A seeded target shaped for ``output``: class labels for cross-entropy, values otherwise."""
    gen = torch.Generator().manual_seed(TARGET_SEED)
    if kind == "cross-entropy":
        return torch.randint(0, int(output.shape[1]), (int(output.shape[0]),), generator=gen)
    return torch.randn(tuple(output.shape), generator=gen).to(output.dtype if output.is_floating_point() else torch.float32)


def loss_function(spec: TrainSpec, kind: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    if kind == "cross-entropy":
        return nn.functional.cross_entropy
    if kind == "mse":
        return nn.functional.mse_loss
    from rooftune.platform.processes import import_user_module

    module_name, attr = kind.split(":")
    try:
        fn = getattr(import_user_module(module_name), attr)
    except Exception as exc:  # an import runs the user's code: any failure is theirs
        raise InvalidArgument("loss", kind, "module:function naming an importable function",
                              hint=f"{type(exc).__name__}: {one_line(exc, 200)}") from None
    if not callable(fn):
        raise InvalidArgument("loss", kind, "module:function naming a callable")
    return fn


def make_optimizer(params: Sequence[nn.Parameter], spec: TrainSpec) -> torch.optim.Optimizer:
    impl = {"default": {}, "foreach": {"foreach": True}, "fused": {"fused": True}}[spec.impl]
    if spec.optimizer == "sgd":
        return torch.optim.SGD(params, lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay, **impl)
    return torch.optim.AdamW(params, lr=spec.lr, weight_decay=spec.weight_decay, **impl)


class TrainStep:
    """The step of one model: ``step()`` runs forward, loss, backward and the update and returns
    the loss; ``forward``, ``backward`` and ``update`` are its three parts, for a caller that times
    them apart (the analysis splits a step's time into them).

    ``autocast`` runs the forward and the loss under CPU (or CUDA) autocast at that dtype, the
    parameters and their update staying fp32, as mixed-precision training does.
    """

    def __init__(self, module: nn.Module, inputs: Sequence[Any], spec: TrainSpec | None = None, *,
                 name: str = "model", autocast: torch.dtype | None = None) -> None:
        self.spec = spec or TrainSpec()
        self.module = module.train()
        self.inputs = tuple(inputs)
        self.autocast = autocast
        check_trainable(module, name)
        batch = int(self.inputs[0].shape[0]) if self.inputs and isinstance(self.inputs[0], torch.Tensor) and self.inputs[0].dim() else 1
        check_batch_norm(module, batch, name)
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.device = self.params[0].device
        out = self._output_like()
        self.kind = loss_kind(self.spec, out)
        self.loss_fn = loss_function(self.spec, self.kind)
        self.target = synthetic_target(out, self.kind).to(self.device)
        loss = self.loss_fn(out, self.target)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise WorkloadError(f"loss {self.spec.loss!r} returned {shape}, not a scalar: a step needs one number to differentiate")
        self.optimizer = make_optimizer(self.params, self.spec)

    def _output_like(self) -> torch.Tensor:
        """A tensor shaped as the output the loss is taken of, fp32 zeros (the loss's check and the
        target need its shape alone): the shape from a run on fake tensors (no kernel runs and no
        buffer is updated, where a large model's forward pass at a training batch takes seconds),
        else from a forward pass where the model does not run on fake tensors. The module before
        torch.compile runs it, so nothing is compiled for fake inputs."""
        from torch._subclasses.fake_tensor import FakeTensorMode

        module = getattr(self.module, "_orig_mod", self.module)
        try:
            with FakeTensorMode(allow_non_fake_inputs=True) as fake:
                xs = [fake.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in self.inputs]
                with torch.no_grad(), self._autocast():
                    out = first_tensor(module(*xs))
                shape = tuple(out.shape)
        except WorkloadError:
            raise
        except Exception:  # fake tensors refuse some kernels (data-dependent shapes, custom ops)
            with torch.no_grad(), self._autocast():
                out = first_tensor(self.module(*self.inputs))
            shape = tuple(out.shape)
        return torch.zeros(shape, dtype=torch.float32, device=self.device)

    def _autocast(self) -> Any:
        import contextlib

        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast)

    def forward(self) -> torch.Tensor:
        with self._autocast():
            out = first_tensor(self.module(*self.inputs))
            return self.loss_fn(out.float() if self.autocast is not None else out, self.target)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def update(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def step(self) -> float:
        loss = self.forward()
        self.backward(loss)
        self.update()
        return float(loss.detach())

    def __call__(self) -> float:
        return self.step()

    def parameters(self) -> list[torch.Tensor]:
        """A copy of the trained parameters, to compare one configuration's training with another's."""
        return [p.detach().clone() for p in self.params]


def optimizer_state_bytes(spec: TrainSpec, parameter_bytes: int) -> int:
    """Bytes of optimizer state per update: SGD with momentum keeps one buffer the size of the
    parameters, AdamW two (first and second moments); plain SGD none."""
    if spec.optimizer == "adamw":
        return 2 * parameter_bytes
    return parameter_bytes if spec.momentum else 0


def update_bytes(spec: TrainSpec, parameter_bytes: int) -> int:
    """Compulsory bytes an optimizer update moves: each parameter and its gradient read, the
    parameter written, and every state buffer read and written."""
    return 3 * parameter_bytes + 2 * optimizer_state_bytes(spec, parameter_bytes)


def update_flops(spec: TrainSpec, parameters: int) -> int:
    """FLOPs of one update per parameter: SGD with momentum ~4 (decay, momentum, add, step), AdamW
    ~12 (two moment updates, bias corrections, a square root, a division and the decay)."""
    per = 12 if spec.optimizer == "adamw" else (4 if spec.momentum else 2)
    return per * parameters


def train_spec(train: bool | TrainSpec | None) -> TrainSpec | None:
    """The spec a ``train`` argument stands for: None for inference (``None``/``False``), the
    default spec for ``True``, a TrainSpec as given; anything else refused."""
    if train is None or train is False:
        return None
    if train is True:
        return TrainSpec()
    if isinstance(train, TrainSpec):
        return train
    raise InvalidArgument("train", train, "True, False or a rooftune.workload.training.TrainSpec")


@dataclass(frozen=True)
class MemoryEstimate:
    """What one training step holds at its peak, in bytes: the parameters, their gradients, the
    optimizer's state and the activations the forward pass keeps for the backward pass (every
    tensor an op of the forward pass returns: an upper bound, since views and in-place ops return
    none of their own but are counted at their size, and a lower bound for temporaries)."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer_state + self.activations

    def describe(self) -> str:
        from rooftune.units import fmt_size

        return (f"{fmt_size(self.total)} (parameters {fmt_size(self.parameters)}, gradients {fmt_size(self.gradients)}, "
                f"optimizer state {fmt_size(self.optimizer_state)}, activations {fmt_size(self.activations)})")


def activation_bytes(module: nn.Module, inputs: Sequence[Any]) -> int | None:
    """Bytes of every tensor the forward pass's ops return, from a run on fake tensors (shapes
    and dtypes only: nothing is allocated, so a batch that would not fit is measured too). None
    where the model does not run on fake tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class _Sizes(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            _Sizes.total += sum(t.numel() * t.element_size() for t in tree_leaves(out) if isinstance(t, torch.Tensor))
            return out

    try:
        with FakeTensorMode(allow_non_fake_inputs=True) as fake:
            xs = [fake.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in inputs]
            with _Sizes(), torch.no_grad():
                module(*xs)
    except Exception:  # fake tensors refuse some kernels (data-dependent shapes, custom ops): no estimate
        return None
    return _Sizes.total


def memory_estimate(module: nn.Module, inputs: Sequence[Any], spec: TrainSpec) -> MemoryEstimate | None:
    """The training step's memory (:class:`MemoryEstimate`), None where the activations cannot be
    estimated."""
    acts = activation_bytes(module, inputs)
    if acts is None:
        return None
    params = [p for p in module.parameters() if p.requires_grad]
    pbytes = sum(p.numel() * p.element_size() for p in params)
    frozen = sum(p.numel() * p.element_size() for p in module.parameters() if not p.requires_grad)
    return MemoryEstimate(pbytes + frozen, pbytes, optimizer_state_bytes(spec, pbytes), acts)


#: Share of the available memory a step may be estimated to take: the estimate leaves out the
#: allocator's caching and the temporaries of the backward pass.
MEMORY_SHARE = 0.8


def check_memory(module: nn.Module, inputs: Sequence[Any], spec: TrainSpec, name: str,
                 available: int | None = None) -> MemoryEstimate | None:
    """Refuse a batch whose training step will not fit in memory: its estimate against
    ``MEMORY_SHARE`` of the available memory (``available``, else the system's), with the figures."""
    from rooftune.units import fmt_size

    est = memory_estimate(module, inputs, spec)
    free = available if available is not None else available_memory()
    if est is not None and free is not None and est.total > MEMORY_SHARE * free:
        raise WorkloadError(f"model {name!r} at this batch needs about {est.describe()} to train, more than "
                            f"{MEMORY_SHARE:.0%} of the {fmt_size(free)} available: use a smaller --batch")
    return est


def spec_from_options(train: bool, optimizer: str | None = None, loss: str | None = None) -> TrainSpec | None:
    """The spec ``--train --optimizer X --loss Y`` ask for; the last two refused without ``train``."""
    if not train:
        given = "optimizer" if optimizer is not None else "loss" if loss is not None else ""
        if given:
            raise InvalidArgument(given, optimizer if given == "optimizer" else loss, "only with --train")
        return None
    return TrainSpec(optimizer=optimizer or "sgd", loss=loss or "auto")

"""A CUDA device as far as performance is concerned, and its stable id.

A GPU's ceilings depend on the chip (name, compute capability, multiprocessors, memory, L2) and
the card (its uuid), on the libraries that build its kernels (torch and the CUDA it was built
with, Triton, the driver) and, for the dispatch overhead, on the host CPU that launches them: the
id is hashed from all of these, the host's platform id included.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from rooftune.errors import InvalidArgument
from rooftune.fileio import json_text

#: Fields hashed into the device id: the card itself (its uuid: two cards of a kind differ, and
#: ``cuda:1`` must not be given ``cuda:0``'s stored ceilings), what builds its kernels, and the host.
ID_FIELDS = ("kind", "name", "capability", "multiprocessors", "memory_bytes", "l2_bytes", "host_id",
             "library_versions", "uuid")

DEVICE_PATTERN = re.compile(r"^(cpu|cuda)(?::(\d+))?$")


def parse_device(text: str | None) -> tuple[str, int | None]:
    """``cpu`` -> ("cpu", None); ``cuda`` -> ("cuda", 0); ``cuda:N`` -> ("cuda", N)."""
    m = DEVICE_PATTERN.match((text or "cpu").strip().lower())
    if m is None or (m.group(1) == "cpu" and m.group(2) is not None):
        raise InvalidArgument("--device", text, "allowed cpu, cuda or cuda:N (N the index of a CUDA device)")
    if m.group(1) == "cpu":
        return "cpu", None
    return "cuda", int(m.group(2) or 0)


def check_cuda(index: int, text: str | None = None) -> None:
    """Raise InvalidArgument naming ``text`` when torch sees no CUDA device ``index``."""
    import torch

    shown = text if text is not None else f"cuda:{index}"
    if torch.version.cuda is None:
        raise InvalidArgument("--device", shown, f"this torch ({torch.__version__}) was built without CUDA; "
                              "allowed: cpu")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise InvalidArgument("--device", shown, f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no "
                              "CUDA device (check the driver and CUDA_VISIBLE_DEVICES); allowed: cpu")
    if index >= count:
        raise InvalidArgument("--device", shown, f"allowed cuda:0..cuda:{count - 1} ({count} device(s) visible)")


@dataclass(frozen=True)
class GpuDevice:
    """One CUDA device with the software that builds its kernels and the host that launches them."""

    index: int
    name: str
    capability: tuple[int, int]
    multiprocessors: int
    memory_bytes: int
    l2_bytes: int
    host_id: str
    host_cpu: str
    library_versions: dict[str, str | None] = field(default_factory=dict)
    #: The SM and memory clocks' maxima in MHz (nvidia-smi), where it answers; not in the id.
    max_clocks_mhz: dict[str, int] = field(default_factory=dict)
    #: The card's uuid as torch reports it (nvidia-smi names the card ``GPU-<uuid>``).
    uuid: str = ""
    kind: str = "cuda"

    @property
    def id(self) -> str:
        """16 hex digits of SHA-256 over :data:`ID_FIELDS`."""
        fields = asdict(self)
        fields["capability"] = list(self.capability)
        ident = {k: fields[k] for k in ID_FIELDS}
        blob = json_text(ident, notes=False, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def cpu_model(self) -> str:
        """The store's model column: the device's name."""
        return self.name

    @property
    def arch(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"

    def describe(self) -> str:
        return f"{self.name} ({self.arch}, {self.multiprocessors} multiprocessors)"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["capability"] = list(self.capability)
        return {**d, "id": self.id}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GpuDevice:
        fields = {k: v for k, v in d.items() if k != "id"}
        fields["capability"] = tuple(fields["capability"])
        return cls(**fields)


def is_device_fingerprint(d: Mapping[str, Any]) -> bool:
    """Whether a stored fingerprint is a GpuDevice's (the store holds CPU platforms beside them)."""
    return d.get("kind") == "cuda"


def smi_id(uuid: str, index: int) -> str:
    """How nvidia-smi names the card: by its uuid (torch's index counts only the devices
    CUDA_VISIBLE_DEVICES lets it see, nvidia-smi's all of them), else by the index."""
    if not uuid:
        return str(index)
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


#: Seconds nvidia-smi gets to answer: it answers in well under one, and waits for ever on a hung
#: driver.
SMI_TIMEOUT_S = 10.0


def nvidia_smi_clocks(card: str, run: Any = None) -> dict[str, int]:
    """The maximum SM and memory clocks in MHz of ``card`` (see :func:`smi_id`) by ``nvidia-smi``;
    {} where it is missing or does not answer (clocks describe the card; the ceilings are measured,
    not computed from them). ``run``: what runs it (:func:`rooftune.platform.processes.run`)."""
    if run is None:
        if shutil.which("nvidia-smi") is None:
            return {}
        from rooftune.platform.processes import run
    try:
        r = run(["nvidia-smi", f"--id={card}", "--query-gpu=clocks.max.sm,clocks.max.memory",
                 "--format=csv,noheader,nounits"], timeout_s=SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return {}
    if r.returncode != 0:
        return {}
    return parse_smi_clocks(r.stdout)


def parse_smi_clocks(text: str) -> dict[str, int]:
    """``"1980, 3201"`` -> {"sm": 1980, "memory": 3201}; {} for anything else."""
    parts = [p.strip() for p in text.strip().splitlines()[0].split(",")] if text.strip() else []
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return {}
    return {"sm": int(parts[0]), "memory": int(parts[1])}


def describe_cuda(index: int, props: Any, host: Any, versions: Mapping[str, str | None],
                  clocks: Mapping[str, int] | None = None) -> GpuDevice:
    """A GpuDevice from torch's device properties (``torch.cuda.get_device_properties``), the host's
    Platform and the library versions."""
    return GpuDevice(
        index=index,
        name=str(props.name),
        capability=(int(props.major), int(props.minor)),
        multiprocessors=int(props.multi_processor_count),
        memory_bytes=int(props.total_memory),
        l2_bytes=int(getattr(props, "L2_cache_size", 0) or 0),
        host_id=host.id,
        host_cpu=host.cpu_model,
        library_versions=dict(versions),
        max_clocks_mhz=dict(clocks or {}),
        uuid=str(getattr(props, "uuid", "") or ""),
    )


def current_gpu(index: int = 0) -> GpuDevice:
    """The CUDA device ``index`` of this process, as torch sees it; InvalidArgument when there is none."""
    import torch

    from rooftune.platform import current_platform

    check_cuda(index)
    versions: dict[str, str | None] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                                       "cudnn": str(torch.backends.cudnn.version())}
    try:
        import triton

        versions["triton"] = triton.__version__
    except ImportError:
        versions["triton"] = None
    props = torch.cuda.get_device_properties(index)
    card = smi_id(str(getattr(props, "uuid", "") or ""), index)
    try:
        versions["driver"] = _driver_version(card)
    except Exception:  # the driver's version is a detail; a device without it is still measured
        versions["driver"] = None
    return describe_cuda(index, props, current_platform(), versions, nvidia_smi_clocks(card))


def _driver_version(card: str) -> str | None:
    from rooftune.platform.processes import run

    if shutil.which("nvidia-smi") is None:
        return None
    try:
        r = run(["nvidia-smi", f"--id={card}", "--query-gpu=driver_version", "--format=csv,noheader"],
                timeout_s=SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):  # a hung driver: the version is left unsaid
        return None
    return r.stdout.strip() or None if r.returncode == 0 else None

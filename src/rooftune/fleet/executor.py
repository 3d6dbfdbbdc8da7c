"""Executors: where the units of a campaign or a study run. Local (this process) or a Ray cluster.

An executor knows nothing of what a unit does: a campaign (or a sweep, or a study) hands it a
function importable on every node and the units to run, and gets each unit's result back. The
store is the only thing the nodes share; a unit writes its rows there itself, under the platform
of the node it ran on.

On Ray the units run once per platform: every node that offers the ``rooftune_node`` resource is
asked for its platform, and each unit is placed on one node of each platform (pinned to that node,
so a node of another platform never takes it). A node runs one unit at a time: the unit takes the
node's ``rooftune_node`` (one per node) and all its CPUs, so no other Ray task of this or another
driver shares its cores while it measures. The driver dispatches the units itself, one per idle
node, which keeps the order of the units (a campaign's passes) and lets it rerun what a lost node
had in hand: a unit whose node died is put back at the head of its platform's queue and runs on
another node of that platform, or on the node when it returns (a node that rejoins has a new id and
is probed again). A unit's function is written to be run again: what it stored before the loss is
kept and skipped (the store's unique keys), so nothing is lost and nothing is stored twice.

``spread=True`` runs each unit once instead of once per platform: on any idle node of the
platforms given (a study's trials, spread over the nodes of its one platform), with the same rule
of one unit per node and the same rerun of a lost node's unit. On a node, :func:`current_node`
names the node that runs the unit.
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rooftune.errors import ClusterError, InvalidArgument, RooftuneError, one_line

#: The custom resource a node offers to rooftune, one per node: started with
#: ``ray start ... --resources '{"rooftune_node": 1}'``.
NODE_RESOURCE = "rooftune_node"
#: Seconds the head's port may take to accept a connection: an unreachable cluster is named
#: within 10 s (Ray's own connect retries for a minute).
CONNECT_TIMEOUT_S = 5.0
#: Attempts (about a second each) Ray makes to reach the head's GCS once its port accepts: a port
#: where something else answers is named within 10 s too (Ray's default is 20 attempts).
GCS_ATTEMPTS = 5
#: Longest a node may take to say its platform: a fresh worker process imports rooftune.
PROBE_TIMEOUT_S = 120.0
#: How often the driver looks for nodes that died or (re)joined while units run.
REFRESH_S = 2.0
#: How long units of a platform wait for a node of it when every one was lost, before the run
#: stops (what was stored stays; running the command again resumes).
NODE_WAIT_S = 300.0
#: A unit whose node is lost this many times is not sent again: something on it kills the node.
MAX_LOSSES = 3
#: A node that lost a unit gets no other for this long: Ray declares a node dead only after its
#: health checks fail for a while, and a unit sent meanwhile would wait for it, then be lost too.
SUSPECT_S = 60.0


@dataclass(frozen=True)
class Node:
    """A node of the cluster that rooftune may use."""

    id: str
    address: str
    platform_id: str
    cpus: float
    fingerprint: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


class Executor(Protocol):
    """Runs units of work on nodes. ``map(fn, units)`` runs ``fn(unit)`` once per platform of
    ``platforms`` (default: every platform it has a node of), or once on any node of them with
    ``spread``, and returns the results by platform id;
    ``on_result(platform_id, unit, result)`` sees each as it comes; ``stop()`` returning True ends
    the dispatch of new units (those running finish). ``fn`` must be importable by name on every
    node and safe to run again after a lost node."""

    def nodes(self) -> list[Node]: ...

    def map(self, fn: Callable[[Any], Any], units: Sequence[Any], *, platforms: Iterable[str] | None = None,
            on_result: Callable[[str, Any, Any], None] | None = None,
            stop: Callable[[], bool] | None = None, spread: bool = False) -> dict[str, list[Any]]: ...

    def on_each_node(self, fn: Callable[[Any], Any], arg: Any) -> dict[str, Any]: ...

    def close(self) -> None: ...


class LocalExecutor:
    """This process, one unit after another: the executor of a campaign without ``--cluster``."""

    def __init__(self) -> None:
        from rooftune.platform import current_platform

        platform = current_platform()
        self._node = Node("local", socket.gethostname(), platform.id, float(platform.usable_cores),
                          platform.to_dict())

    def nodes(self) -> list[Node]:
        return [self._node]

    def map(self, fn: Callable[[Any], Any], units: Sequence[Any], *, platforms: Iterable[str] | None = None,
            on_result: Callable[[str, Any, Any], None] | None = None,
            stop: Callable[[], bool] | None = None, spread: bool = False) -> dict[str, list[Any]]:
        pid = self._node.platform_id
        if platforms is not None and pid not in set(platforms):
            raise ClusterError(f"this machine's platform {pid} is not among {', '.join(sorted(platforms))}")
        results = []
        for unit in units:
            if stop is not None and stop():
                break
            with _on_node(self._node):
                result = fn(unit)
            results.append(result)
            if on_result is not None:
                on_result(pid, unit, result)
        return {pid: results}

    def on_each_node(self, fn: Callable[[Any], Any], arg: Any) -> dict[str, Any]:
        return {self._node.id: fn(arg)}

    def close(self) -> None:
        pass


def check_address(address: object) -> str:
    """``address`` if it names a Ray cluster's head (``HOST:PORT`` or ``auto``), else the one-line error."""
    allowed = "allowed HOST:PORT of a Ray cluster's head (the address `ray start --head` prints) or auto"
    if not isinstance(address, str) or not address.strip():
        raise InvalidArgument("cluster", address, allowed)
    address = address.strip()
    if address == "auto":
        return address
    if "@" in address:  # Ray's address has no user or password: whatever precedes "@" is not printed
        raise InvalidArgument("cluster", "***@" + address.rpartition("@")[2], allowed + " (no user or password)")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in host:
        raise InvalidArgument("cluster", address, allowed)
    return address


@contextmanager
def _node_environment() -> Iterator[None]:
    """(On a node) the environment the worker process started with, for a task's duration: Ray sets
    OMP_NUM_THREADS to the task's CPUs where that environment does not set it, and OpenMP's
    settings are part of the platform id, so a node's units would otherwise run (and be stored)
    as another platform than the node itself. Ray takes its value out again after the task."""
    try:
        initial = Path("/proc/self/environ").read_bytes().split(b"\0")
    except OSError:  # (not Linux: nothing to compare with)
        yield
        return
    added = os.environ.get("OMP_NUM_THREADS")
    if added is None or any(v.startswith(b"OMP_NUM_THREADS=") for v in initial):
        yield
        return
    del os.environ["OMP_NUM_THREADS"]
    try:
        yield
    finally:
        os.environ["OMP_NUM_THREADS"] = added


#: The node running the current unit (set on the node for the unit's duration), as (id, address).
_CURRENT_NODE: list[tuple[str, str]] = []


@contextmanager
def _on_node(node: Node) -> Iterator[None]:
    _CURRENT_NODE.append((node.id, node.address))
    try:
        yield
    finally:
        _CURRENT_NODE.pop()


def current_node() -> tuple[str, str]:
    """(On a node, within a unit) the (id, address) of the node that runs it; ("local", this
    host's name) outside any unit."""
    return _CURRENT_NODE[-1] if _CURRENT_NODE else ("local", socket.gethostname())


#: HTTP/2's client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS) answers with a
#: SETTINGS frame of its own at once.
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _answers_grpc(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` accepts a connection and answers as an HTTP/2 server within ``timeout``
    (OSError when it cannot be reached). Ray's own connection attempts wait tens of seconds each
    on a port that accepts and never answers."""
    deadline = time.monotonic() + timeout
    with socket.create_connection((host, port), timeout=timeout) as conn:
        conn.sendall(_HTTP2_HELLO)
        frame = b""
        while len(frame) < 9:
            conn.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                chunk = conn.recv(9 - len(frame))
            except TimeoutError:
                return False
            if not chunk:
                return False
            frame += chunk
        return frame[3] == 4  # the frame type: SETTINGS


def _remote_platform() -> dict[str, Any]:
    """(On a node) its platform's fingerprint."""
    from rooftune.platform import current_platform

    with _node_environment():
        return current_platform().to_dict()


def _call(fn: Callable[[Any], Any], unit: Any, node: Node | None = None) -> tuple[str, Any]:
    """(On a node) one unit: ("ok", its result), or ("refused", (error class, message)) when it
    raised a RooftuneError (bad input a node finds, such as more threads than its cores), which
    the driver raises as it is. (rooftune's errors take their parts as arguments, so they are
    carried by class and message: Ray cannot rebuild them from their pickled args.)"""
    with _node_environment(), _on_node(node or Node("local", socket.gethostname(), "", 0.0)):
        try:
            return "ok", fn(unit)
        except RooftuneError as exc:
            return "refused", (type(exc), str(exc))


def _rebuilt(cls: type[RooftuneError], message: str) -> RooftuneError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    return err


def import_ray() -> Any:
    """Ray, imported where a cluster is used: only the fleet needs it, and the ``fleet`` extra
    installs it, so everything else runs without it."""
    try:
        import ray
    except ImportError:
        raise ClusterError("ray is not installed, and a cluster needs it: pip install 'rooftune[fleet]' "
                           "(on this machine and every node)") from None
    return ray


class RayExecutor:
    """The nodes of a running Ray cluster that offer :data:`NODE_RESOURCE` (see the module's doc)."""

    def __init__(self, address: str, *, node_wait_s: float = NODE_WAIT_S) -> None:
        self.address = check_address(address)
        self.node_wait_s = node_wait_s
        ray = import_ray()  # before the address is tried: without Ray no cluster could be used
        if self.address != "auto":
            host, _, port = self.address.rpartition(":")
            try:
                answers = _answers_grpc(host.strip("[]"), int(port), CONNECT_TIMEOUT_S)
            except OSError as exc:
                reason = exc.strerror or "timed out"
                raise ClusterError(f"cannot reach the Ray cluster at {self.address}: {reason}; start its head "
                                   f"(ray start --head --port={port}) or pass --cluster with its address") from None
            if not answers:
                raise ClusterError(f"cannot connect to the Ray cluster at {self.address}: something listens there "
                                   f"but does not answer as a Ray head (its GCS port, {port} by default 6379)")
        self._ray = ray
        wait = "RAY_gcs_server_port_wait_time_s"  # (read by ray.init alone; the user's own value wins)
        given = os.environ.get(wait)
        os.environ.setdefault(wait, str(GCS_ATTEMPTS))
        # Ray's own C++ warnings (each failed attempt) would precede the one-line error; they stay
        # in the session's log files
        os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")
        try:
            ray.init(address=self.address, logging_level="error", log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ClusterError(f"cannot connect to the Ray cluster at {self.address}: {one_line(exc)} (is it "
                               f"a Ray head of the same Ray version?)") from None
        finally:
            if given is None:
                os.environ.pop(wait, None)
        self._probe = ray.remote(_remote_platform)
        self._run = ray.remote(_call)
        self._nodes: dict[str, Node] = {}
        #: Units sent again because their node (or its worker) was lost.
        self.rerun = 0
        self._refresh()

    # ------------------------------------------------------------------ nodes

    def _alive(self) -> dict[str, dict[str, Any]]:
        return {n["NodeID"]: n for n in self._ray.nodes()
                if n.get("Alive") and n.get("Resources", {}).get(NODE_RESOURCE, 0) >= 1}

    def _pinned(self, node_id: str) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)

    def _refresh(self) -> tuple[set[str], set[str]]:
        """Forget the nodes that died, probe the ones that joined; the ids of both."""
        alive = self._alive()
        gone = set(self._nodes) - set(alive)
        for node_id in gone:
            del self._nodes[node_id]
        new = [i for i in alive if i not in self._nodes]
        refs = {i: self._probe.options(num_cpus=0, scheduling_strategy=self._pinned(i), max_retries=0).remote()
                for i in new}
        for node_id, ref in refs.items():
            try:
                fingerprint = self._ray.get(ref, timeout=PROBE_TIMEOUT_S)
            except self._ray.exceptions.GetTimeoutError:
                raise ClusterError(f"node {alive[node_id].get('NodeManagerAddress')} ({node_id[:12]}) did not say its "
                                   f"platform within {PROBE_TIMEOUT_S:.0f} s; is rooftune installed there?") from None
            except self._ray.exceptions.RayError:
                continue  # it died meanwhile: the next refresh forgets it
            from rooftune.platform import Platform

            info = alive[node_id]
            self._nodes[node_id] = Node(node_id, str(info.get("NodeManagerAddress", "")),
                                        Platform.from_dict(fingerprint).id,
                                        float(info.get("Resources", {}).get("CPU", 0.0)), fingerprint)
        return gone, set(refs)

    def nodes(self) -> list[Node]:
        return sorted(self._nodes.values(), key=lambda n: (n.platform_id, n.address, n.id))

    # ------------------------------------------------------------------ dispatch

    def map(self, fn: Callable[[Any], Any], units: Sequence[Any], *, platforms: Iterable[str] | None = None,
            on_result: Callable[[str, Any, Any], None] | None = None,
            stop: Callable[[], bool] | None = None, spread: bool = False) -> dict[str, list[Any]]:
        ray = self._ray
        wanted = sorted(set(platforms) if platforms is not None else {n.platform_id for n in self._nodes.values()})
        if not wanted:
            raise ClusterError(f"the Ray cluster at {self.address} has no node offering {NODE_RESOURCE}; start "
                               f"nodes with --resources '{{\"{NODE_RESOURCE}\": 1}}'")
        # spread: one queue that every wanted platform's nodes take from
        shared = deque(enumerate(units))
        queues = {pid: shared if spread else deque(enumerate(units)) for pid in wanted}
        losses: dict[tuple[str, int], int] = {}
        results: dict[str, list[Any]] = {pid: [] for pid in wanted}
        running: dict[Any, tuple[Node, int, Any]] = {}
        suspect: dict[str, float] = {}
        idle_since: dict[str, float] = {}
        last_refresh = time.monotonic()
        while any(queues.values()) or running:
            stopping = stop is not None and stop()
            busy = {node.id for node, _, _ in running.values()}
            now = time.monotonic()
            for node in self.nodes():
                queue = queues.get(node.platform_id)
                if node.id in busy or not queue or stopping or now - suspect.get(node.id, -SUSPECT_S) < SUSPECT_S:
                    continue
                index, unit = queue.popleft()
                resources = {NODE_RESOURCE: 1}
                ref = self._run.options(num_cpus=node.cpus, resources=resources, max_retries=0,
                                        scheduling_strategy=self._pinned(node.id)).remote(fn, unit, node)
                running[ref] = (node, index, unit)
            if stopping and not running:
                break
            for pid in wanted:  # a platform with work and no node waits for one, within limits
                serving = set(wanted) if spread else {pid}
                if queues[pid] and not any(n.platform_id in serving and now - suspect.get(n.id, -SUSPECT_S) >= SUSPECT_S
                                           for n in self._nodes.values()):
                    since = idle_since.setdefault(pid, now)
                    if now - since > self.node_wait_s:
                        raise ClusterError(f"no node of platform {pid} in the Ray cluster at {self.address} for "
                                           f"{self.node_wait_s:.0f} s; {len(queues[pid])} unit(s) not run (what "
                                           f"ran is stored; run the command again to finish)")
                else:
                    idle_since.pop(pid, None)
            ready, _ = ray.wait(list(running), num_returns=1, timeout=REFRESH_S) if running else ([], [])
            if not running:
                time.sleep(REFRESH_S)
            for ref in ready:
                node, index, unit = running.pop(ref)
                try:
                    kind, result = ray.get(ref)
                    if kind == "refused":
                        raise _rebuilt(*result)
                except ray.exceptions.RayTaskError as exc:  # the unit itself raised
                    cause = exc.cause if isinstance(exc.cause, BaseException) else exc
                    if isinstance(cause, RooftuneError):
                        raise cause from None
                    raise ClusterError(f"a unit failed on node {node.address} ({node.id[:12]}): "
                                       f"{one_line(cause)}") from None
                except ray.exceptions.RayError as exc:  # the node or its worker was lost: run it again
                    key = (node.platform_id, index)
                    losses[key] = losses.get(key, 0) + 1
                    if losses[key] >= MAX_LOSSES:
                        raise ClusterError(f"unit {index} was lost with its node {MAX_LOSSES} times (last on "
                                           f"{node.address}: {one_line(exc)}); not sent again") from None
                    queues[node.platform_id].appendleft((index, unit))
                    suspect[node.id] = time.monotonic()
                    self.rerun += 1
                    continue
                results[node.platform_id].append(result)
                if on_result is not None:
                    on_result(node.platform_id, unit, result)
            if time.monotonic() - last_refresh > REFRESH_S:
                self._refresh()
                last_refresh = time.monotonic()
        return results

    def on_each_node(self, fn: Callable[[Any], Any], arg: Any) -> dict[str, Any]:
        """``fn(arg)`` on every node, at once (a quick look, no measurement: it takes no CPU);
        results by node id. A node that dies meanwhile is left out."""
        task = self._ray.remote(fn)
        refs = {i: task.options(num_cpus=0, scheduling_strategy=self._pinned(i), max_retries=0).remote(arg)
                for i in self._nodes}
        out = {}
        for node_id, ref in refs.items():
            try:
                out[node_id] = self._ray.get(ref, timeout=PROBE_TIMEOUT_S)
            except self._ray.exceptions.RayError:
                continue
        return out

    def close(self) -> None:
        self._ray.shutdown()


def connect(cluster: str | None) -> Executor:
    """The executor of ``cluster``: a Ray cluster's address, or None for this process."""
    return LocalExecutor() if cluster is None else RayExecutor(cluster)

"""The fleet: campaigns and studies on many nodes (a Ray cluster), one shared store.

    executor = rooftune.fleet.connect("head:6379")   # or connect(None): this process
    executor.map(fn, units)                           # fn(unit) once per platform, results by platform id
"""

from __future__ import annotations

from rooftune.fleet.executor import (
    NODE_RESOURCE,
    Executor,
    LocalExecutor,
    Node,
    RayExecutor,
    check_address,
    connect,
)
from rooftune.fleet.shared import node_store, shared_store
from rooftune.fleet.status import FleetStatus, fleet_status

__all__ = ["NODE_RESOURCE", "Executor", "FleetStatus", "LocalExecutor", "Node", "RayExecutor", "check_address",
           "connect", "fleet_status", "node_store", "shared_store"]

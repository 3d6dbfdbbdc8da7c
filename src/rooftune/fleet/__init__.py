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
    current_node,
)
from rooftune.fleet.shared import check_shareable, node_store, shared_store
from rooftune.fleet.status import FleetStatus, fleet_status

__all__ = ["NODE_RESOURCE", "Executor", "FleetStatus", "LocalExecutor", "Node", "RayExecutor", "check_address",
           "check_shareable", "connect", "current_node", "fleet_status", "node_store",
           "shared_store"]

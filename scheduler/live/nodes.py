"""The Ray cluster's nodes as the scheduler core sees them.

Core node `i` is the i-th alive Ray node with GPU resources at the time the executor starts
(sorted by node id), with as many GPUs as its Ray `GPU` resource says (logical GPUs on a
machine without any, where jobs run on CPU). Whether a node is alive is asked of Ray each
time, never remembered.
"""

from __future__ import annotations

from typing import Any

import ray

from perfcast.errors import PerfcastError
from perfcast.scheduler.core.cluster import ClusterSpec, NodeGroup


class ExecutorError(PerfcastError):
    """The Ray cluster cannot carry out a decision (no such node, job unknown)."""


def gpu_nodes() -> list[dict[str, Any]]:
    """Alive Ray nodes with GPU resources, in the order that gives core node indices."""
    nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU", 0) >= 1]
    return sorted(nodes, key=lambda n: n["NodeID"])


def cluster_spec_from_ray() -> ClusterSpec:
    """The Ray cluster as a core `ClusterSpec`: one group per node, in core node order."""
    groups = []
    for node in gpu_nodes():
        types = [k.split(":", 1)[1] for k in node["Resources"] if k.startswith("accelerator_type:")]
        gpu_type = types[0].lower() if types else "logical"
        groups.append(NodeGroup(1, int(node["Resources"]["GPU"]), gpu_type))
    if not groups:
        raise ExecutorError("the Ray cluster has no node with GPU resources (num_gpus)")
    return ClusterSpec(tuple(groups))


class NodeView:
    """Core node indices to Ray node ids, fixed when the executor starts."""

    def __init__(self) -> None:
        self.node_ids = [n["NodeID"] for n in gpu_nodes()]

    def __len__(self) -> int:
        return len(self.node_ids)

    def ray_id(self, node: int) -> str:
        if not 0 <= node < len(self.node_ids):
            raise ExecutorError(f"no node {node}: the Ray cluster has {len(self.node_ids)}")
        return self.node_ids[node]

    def all_alive(self, nodes: set[int]) -> bool:
        """Whether every core node in `nodes` is alive now (asked of Ray)."""
        alive = {n["NodeID"] for n in gpu_nodes()}
        return all(self.ray_id(node) in alive for node in nodes)

"""The Ray cluster's nodes as the scheduler core sees them.

Core node `i` is the i-th Ray node with GPU resources that this scheduler state has seen (the
head first), with as many GPUs as its Ray `GPU` resource says (logical GPUs on a machine
without any, where jobs run on CPU). Nodes are discovered live: a raylet that joins later gets
the next index (`NodeView.refresh`). The order is kept in the store, so a restarted scheduler
gives every node the index its jobs' records use. A node Ray reports dead stays in the list,
under its index, with no GPUs (`alive` False, for good: a raylet that comes back joins with a
new node id and gets a new index), so the core places nothing there while every other index
keeps its meaning.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import ray

from perfcast.errors import PerfcastError
from perfcast.scheduler.core.cluster import ClusterSpec, NodeGroup

if TYPE_CHECKING:
    from perfcast.scheduler.live.store import JobStore

_NODES_KEY = "ray_nodes"


class ExecutorError(PerfcastError):
    """The Ray cluster cannot carry out a decision (no such node, job unknown)."""


class WorkersStarting(ExecutorError):
    """A launch's worker processes are not up yet (a loaded host starts one in minutes): the
    launch is put off, and a later round's launch takes them."""


@dataclass(frozen=True)
class RayNode:
    node_id: str
    gpus: int
    gpu_type: str
    alive: bool = True  # False once Ray reported it dead: it keeps its index, with no GPUs


def gpu_nodes() -> list[dict[str, Any]]:
    """Alive Ray nodes with GPU resources, the head first."""
    nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU", 0) >= 1]
    return sorted(
        nodes, key=lambda n: ("node:__internal_head__" not in n["Resources"], n["NodeID"])
    )


def _ray_node(entry: dict[str, Any]) -> RayNode:
    res = entry["Resources"]
    types = [k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")]
    return RayNode(entry["NodeID"], int(res["GPU"]), types[0].lower() if types else "logical")


class NodeView:
    """Core node indices to Ray nodes: every GPU node seen so far, in the order first seen.
    With a `store`, the order persists across scheduler restarts (a store written against
    another cluster, whose nodes Ray has never heard of, starts afresh)."""

    def __init__(self, store: JobStore | None = None) -> None:
        self._store = store
        saved = json.loads(store.get_meta(_NODES_KEY) or "[]") if store else []
        ever = {n["NodeID"] for n in ray.nodes()}
        self.nodes = [RayNode(**n) for n in saved]
        if not any(n.node_id in ever for n in self.nodes):
            self.nodes = []
        self.refresh()
        if not self.nodes:
            raise ExecutorError("the Ray cluster has no node with GPU resources (num_gpus)")

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def node_ids(self) -> list[str]:
        return [n.node_id for n in self.nodes]

    @property
    def dead(self) -> set[int]:
        """Core indices of the nodes that have left the cluster."""
        return {i for i, n in enumerate(self.nodes) if not n.alive}

    def refresh(self) -> bool:
        """Take in the GPU nodes that joined since the last call, and mark dead those Ray no
        longer lists alive. True if either happened."""
        alive = gpu_nodes()
        alive_ids = {n["NodeID"] for n in alive}
        known = set(self.node_ids)
        new = [_ray_node(n) for n in alive if n["NodeID"] not in known]
        gone = [i for i, n in enumerate(self.nodes) if n.alive and n.node_id not in alive_ids]
        for i in gone:
            self.nodes[i] = replace(self.nodes[i], alive=False)
        self.nodes += new
        if (new or gone) and self._store is not None:
            self._store.set_meta(_NODES_KEY, json.dumps([asdict(n) for n in self.nodes]))
        return bool(new or gone)

    def cluster_spec(self) -> ClusterSpec:
        """The nodes as a core `ClusterSpec`: one group per node, in core node order; a dead
        node has no GPUs (nothing can be placed there)."""
        return ClusterSpec(
            tuple(NodeGroup(1, n.gpus if n.alive else 0, n.gpu_type) for n in self.nodes)
        )

    def ray_id(self, node: int) -> str:
        if not 0 <= node < len(self.nodes):
            raise ExecutorError(f"no node {node}: the Ray cluster has {len(self.nodes)}")
        return self.nodes[node].node_id

    def all_alive(self, nodes: set[int]) -> bool:
        """Whether every core node in `nodes` is alive now (asked of Ray)."""
        alive = {n["NodeID"] for n in gpu_nodes()}
        return all(self.ray_id(node) in alive for node in nodes)

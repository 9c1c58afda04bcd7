"""The cluster: node groups of GPUs of one type (`ClusterSpec`) and which job holds which GPU
(`ClusterState`).

A GPU is named by a `GpuSlot` `(node, gpu)`, both counted from 0. A GPU normally holds one job;
Gandiva-style sharing (packing or time-slicing) puts two or more jobs on the same slot, so each
slot keeps a list of its occupants.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Container
from dataclasses import dataclass
from pathlib import Path

import yaml

from perfcast.errors import PerfcastError

GpuSlot = tuple[int, int]


class ClusterSpecError(PerfcastError):
    """A cluster specification that cannot be parsed."""


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """`count` identical nodes, each with `gpus_per_node` GPUs of `gpu_type` (lower case)."""

    count: int
    gpus_per_node: int
    gpu_type: str


_GROUP = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*:\s*([A-Za-z0-9_\-]+)\s*$")


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """Node groups, in order; node `i` of the cluster is the i-th node over all groups."""

    groups: tuple[NodeGroup, ...]

    @classmethod
    def parse(cls, spec: str | Path) -> ClusterSpec:
        """From a flag string `16x8:v100` (nodes x GPUs per node : type; several groups joined
        with `,` or `+`) or a YAML file `{nodes: [{count: 16, gpus: 8, type: v100}, ...]}`."""
        text = str(spec)
        if text.endswith((".yaml", ".yml")) or Path(text).is_file():
            return cls.from_yaml(Path(text))
        groups = []
        for part in re.split(r"[,+]", text):
            match = _GROUP.match(part)
            if not match:
                raise ClusterSpecError(
                    f"cluster spec {text!r}: cannot read {part!r}; expected NODESxGPUS:TYPE, "
                    "for example 16x8:v100 or 4x8:v100,2x4:k80, or a YAML file"
                )
            groups.append(NodeGroup(int(match[1]), int(match[2]), match[3].lower()))
        return cls._checked(tuple(groups), text)

    @classmethod
    def from_yaml(cls, path: Path) -> ClusterSpec:
        if not path.is_file():
            raise ClusterSpecError(f"cluster spec file {path} does not exist")
        data = yaml.safe_load(path.read_text())
        nodes = data.get("nodes") if isinstance(data, dict) else None
        if not isinstance(nodes, list):
            raise ClusterSpecError(f"{path}: expected a mapping with a list under 'nodes'")
        groups = []
        for i, entry in enumerate(nodes):
            try:
                groups.append(
                    NodeGroup(int(entry["count"]), int(entry["gpus"]), str(entry["type"]).lower())
                )
            except (KeyError, TypeError, ValueError) as err:
                raise ClusterSpecError(
                    f"{path}: nodes[{i}] needs integer 'count' and 'gpus' and a 'type' ({err})"
                ) from None
        return cls._checked(tuple(groups), str(path))

    @classmethod
    def _checked(cls, groups: tuple[NodeGroup, ...], where: str) -> ClusterSpec:
        if not groups or any(g.count < 1 or g.gpus_per_node < 1 for g in groups):
            raise ClusterSpecError(f"cluster spec {where!r}: every group needs >= 1 node and GPU")
        return cls(groups)

    @property
    def total_gpus(self) -> int:
        return sum(g.count * g.gpus_per_node for g in self.groups)

    def __str__(self) -> str:
        return ",".join(f"{g.count}x{g.gpus_per_node}:{g.gpu_type}" for g in self.groups)


class ClusterState:
    """Which jobs occupy which GPUs. Mutated only through `allocate` and `release`; `watch`
    registers a callback told of each (a policy's own index of who shares GPUs follows the
    cluster that way)."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.node_type: list[str] = []
        self.node_size: list[int] = []
        for group in spec.groups:
            self.node_type += [group.gpu_type] * group.count
            self.node_size += [group.gpus_per_node] * group.count
        # occupants[node][gpu] -> job ids on that GPU
        self.occupants: list[list[list[str]]] = [[[] for _ in range(n)] for n in self.node_size]
        self.free_per_node: list[int] = list(self.node_size)
        self._total_gpus = sum(self.node_size)
        self.largest_node = max(self.node_size, default=0)  # the most GPUs of any node
        self.free_gpus = self._total_gpus
        self._free_of_type: dict[str, int] = {}  # free GPUs per GPU type
        self.placements = 0  # (job, GPU) pairs: a GPU shared by two jobs counts twice
        self._shared: set[GpuSlot] = set()  # GPUs holding two or more jobs
        # best-fit index: gpu type -> free count -> nodes with exactly that many free GPUs
        self._by_free: dict[str, list[set[int]]] = {}
        # the same buckets as heaps, for the lowest node of a bucket without a walk of it: a
        # node is pushed when it enters a bucket and its entry left in place when it leaves
        # (skipped when it comes up; the heap is rebuilt when such entries outnumber the rest)
        self._lowest: dict[str, list[list[int]]] = {}
        for node, (size, gpu_type) in enumerate(zip(self.node_size, self.node_type, strict=True)):
            buckets = self._by_free.setdefault(gpu_type, [])
            buckets += [set() for _ in range(size + 1 - len(buckets))]
            buckets[size].add(node)
            heaps = self._lowest.setdefault(gpu_type, [])
            heaps += [[] for _ in range(size + 1 - len(heaps))]
            heaps[size].append(node)  # nodes come in increasing order: a heap
            self._free_of_type[gpu_type] = self._free_of_type.get(gpu_type, 0) + size
        self._types: list[str] = list(self._by_free)  # every GPU type, in node order
        # each node's buckets and heaps (its type's), so a move looks up no type
        self._node_buckets: list[list[set[int]]] = [self._by_free[t] for t in self.node_type]
        self._node_heaps: list[list[list[int]]] = [self._lowest[t] for t in self.node_type]
        self._watchers: list[Callable[[str, tuple[GpuSlot, ...]], None]] = []

    def watch(self, callback: Callable[[str, tuple[GpuSlot, ...]], None]) -> None:
        """Call `callback(job_id, slots)` after each `allocate` or `release`."""
        self._watchers.append(callback)

    def unwatch(self, callback: Callable[[str, tuple[GpuSlot, ...]], None]) -> None:
        """Stop calling `callback` (registered by `watch`)."""
        self._watchers.remove(callback)

    def _move(self, node: int, delta: int) -> None:
        """`delta` GPUs of `node` taken (negative) or freed (positive): its free count, its
        best-fit bucket and its type's free count follow."""
        buckets = self._node_buckets[node]
        free = self.free_per_node[node]
        buckets[free].discard(node)
        free += delta
        self.free_per_node[node] = free
        bucket = buckets[free]
        bucket.add(node)
        heap = self._node_heaps[node][free]
        heapq.heappush(heap, node)
        if len(heap) > 2 * len(bucket) + 32:  # mostly entries of nodes that left: rebuilt
            heap[:] = sorted(bucket)
        self._free_of_type[self.node_type[node]] += delta
        self.free_gpus += delta

    def _lowest_node(self, gpu_type: str, free: int, exclude: int | None) -> int | None:
        """The lowest-numbered node of `gpu_type` with exactly `free` free GPUs, other than
        `exclude`; None when there is none."""
        bucket = self._by_free[gpu_type][free]
        if exclude in bucket:
            others = bucket - {exclude}
            return min(others) if others else None
        if not bucket:
            return None
        heap = self._lowest[gpu_type][free]
        while heap[0] not in bucket:  # every node of the bucket has an entry: never empties
            heapq.heappop(heap)
        return heap[0]

    @property
    def num_nodes(self) -> int:
        return len(self.node_size)

    @property
    def total_gpus(self) -> int:
        return self._total_gpus

    def gpu_types(self) -> list[str]:
        return sorted(set(self.node_type))

    def gpus_of_type(self, gpu_type: str | None) -> int:
        if gpu_type is None:
            return self.total_gpus
        return sum(s for s, t in zip(self.node_size, self.node_type, strict=True) if t == gpu_type)

    def nodes_with_free_gpus(self, gpu_type: str | None = None) -> list[int]:
        """The nodes with at least one free GPU (of `gpu_type`), in no particular order."""
        types = [gpu_type] if gpu_type is not None else self._types
        return [n for t in types for bucket in self._by_free.get(t, [])[1:] for n in bucket]

    def largest_free(
        self, count: int, gpu_type: str | None = None, exclude: Container[int] = ()
    ) -> list[int]:
        """The `count` largest numbers of free GPUs on one node (of `gpu_type`, not in
        `exclude`), largest first; fewer when fewer nodes have free GPUs."""
        types = [gpu_type] if gpu_type is not None else self._types
        found: list[int] = []
        top = max((len(self._by_free.get(t, ())) for t in types), default=1) - 1
        for free in range(top, 0, -1):
            for t in types:
                buckets = self._by_free.get(t, [])
                for node in buckets[free] if free < len(buckets) else ():
                    if len(found) == count:
                        return found
                    if node not in exclude:
                        found.append(free)
        return found

    def free_slots(self, node: int) -> list[GpuSlot]:
        return [(node, g) for g, occ in enumerate(self.occupants[node]) if not occ]

    def allocate(self, job_id: str, slots: tuple[GpuSlot, ...]) -> None:
        """Put `job_id` on `slots` (shared slots are allowed: the caller decided to share)."""
        occupants = self.occupants
        taken: dict[int, int] = {}  # newly taken GPUs per node: one move for each node
        for node, gpu in slots:
            occ = occupants[node][gpu]
            if not occ:
                taken[node] = taken.get(node, 0) + 1
            else:
                self._shared.add((node, gpu))
            occ.append(job_id)
        for node, count in taken.items():
            self._move(node, -count)
        self.placements += len(slots)
        for callback in self._watchers:
            callback(job_id, slots)

    def release(self, job_id: str, slots: tuple[GpuSlot, ...]) -> None:
        occupants = self.occupants
        freed: dict[int, int] = {}  # GPUs left empty per node: one move for each node
        for node, gpu in slots:
            occ = occupants[node][gpu]
            occ.remove(job_id)
            if not occ:
                freed[node] = freed.get(node, 0) + 1
            elif len(occ) == 1:
                self._shared.discard((node, gpu))
        for node, count in freed.items():
            self._move(node, count)
        self.placements -= len(slots)
        for callback in self._watchers:
            callback(job_id, slots)

    @property
    def sharing(self) -> bool:
        """Whether any GPU holds two or more jobs."""
        return bool(self._shared)

    def alone(self, slots: tuple[GpuSlot, ...]) -> bool:
        """Whether each of these GPUs holds one job at most."""
        return self._shared.isdisjoint(slots)

    def find_free(
        self, num_gpus: int, gpu_type: str | None = None, exclude: int | None = None
    ) -> tuple[GpuSlot, ...] | None:
        """Free GPUs for a job: on one node if any fits (best fit, the fullest such node, to
        keep whole nodes free for large jobs), else spread over the nodes with most free GPUs
        (fewest nodes). None if there are not enough free GPUs of that type. Node `exclude`
        is not used."""
        if num_gpus <= 0:
            return ()
        if gpu_type is None:
            types, available = self._types, self.free_gpus
        else:
            types, available = [gpu_type], self._free_of_type.get(gpu_type, 0)
        if exclude is not None and self.node_type[exclude] in types:
            available -= self.free_per_node[exclude]
        if available < num_gpus:
            return None
        best: tuple[int, int] | None = None  # (free GPUs, node) of the best-fitting node
        for t in types:
            buckets = self._by_free.get(t, [])
            for free in range(num_gpus, len(buckets)):
                if not buckets[free]:  # no node with exactly that many free GPUs
                    continue
                node = self._lowest_node(t, free, exclude)
                if node is not None:
                    if best is None or (free, node) < best:
                        best = (free, node)
                    break
        if best is not None:
            return tuple(self.free_slots(best[1])[:num_gpus])
        # spread: the nodes with most free GPUs first (lowest index first among equals)
        slots: list[GpuSlot] = []
        most = max(len(self._by_free.get(t, [])) for t in types) - 1
        for free in range(most, 0, -1):
            same = [b for t in types for b in self._by_free.get(t, [])[free : free + 1] if b]
            if not same:
                continue
            # a bucket sorted whole in C, not filtered node by node first: most of a large
            # cluster's nodes sit in the all-free bucket and a spread job needs a few of them
            for node in sorted(same[0] if len(same) == 1 else set().union(*same)):
                if node == exclude:
                    continue
                slots += self.free_slots(node)[: num_gpus - len(slots)]
                if len(slots) == num_gpus:
                    return tuple(slots)
        raise AssertionError(f"{available} free GPUs counted, fewer found in the free-GPU index")

    def used_gpus(self) -> int:
        return self._total_gpus - self.free_gpus

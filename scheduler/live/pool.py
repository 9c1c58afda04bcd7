"""The worker processes: new ones pinned to their node, warm spares, and the workers that no
job refers to (idle ones become spares, the others are killed).

Workers are named, detached Ray actors in the executor's namespace, so they outlive a crashed
scheduler process; a restarted one finds them by name. Each scheduler state (its `JobStore`)
has its own namespace, so clean-up never touches another scheduler's workers.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import ray
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from perfcast.scheduler.live.gang import RPC_TIMEOUT_S, WorkerGang
from perfcast.scheduler.live.nodes import NodeView
from perfcast.scheduler.live.worker import TrainingWorker

# how long a restarted scheduler waits for the orphans' answers; one still starting its process
# (seconds of CPU, minutes on a loaded host) is killed instead of waited for
ORPHAN_ANSWER_S = 10.0


@dataclass(frozen=True)
class Spare:
    worker: Any  # ActorHandle
    name: str
    ready: Any  # ObjectRef of its first answer: set once its process is up

    @classmethod
    def of(cls, worker: Any, name: str) -> Spare:
        """A spare of `worker`, asked for its first answer (`ready`) now."""
        return cls(worker, name, worker.info.remote())


class OrphanWorkers(NamedTuple):
    """What `WorkerPool.reclaim_orphans` did with the workers no job or spare names."""

    adopted: list[str]  # idle: kept as spares
    killed: list[str]
    silent: list[str]  # of those killed, the ones that did not answer in time
    busy: list[str]  # of those killed, the ones running an attempt no job records


class WorkerPool:
    def __init__(
        self,
        nodes: NodeView,
        namespace: str,
        spares_per_node: int = 0,
        worker_threads: int = 1,
        idle_per_node: int | None = None,
    ) -> None:
        """`spares_per_node` workers per node are started ahead and kept warm (`top_up`).
        `idle_per_node` (at least `spares_per_node`, which it defaults to) is how many idle
        workers a node keeps when jobs give theirs back (`give_back`): a launch takes one of
        those, whose process is up, where a new one would cost a process start (seconds of
        CPU: torch's imports). Each idle worker holds its process's memory."""
        self.nodes, self.namespace = nodes, namespace
        self.spares_per_node, self.worker_threads = spares_per_node, worker_threads
        self.idle_per_node = max(spares_per_node, idle_per_node or 0)
        self._spares: dict[int, list[Spare]] = defaultdict(list)  # core node -> its spares

    def take(self, node: int) -> tuple[Any, str]:
        """A worker on core node `node`: a spare whose process is up if there is one, else
        the oldest spare, else a new worker. `top_up` replaces spares used up, off the
        critical path of the launch (a new process competes for the node's CPUs)."""
        self.nodes.ray_id(node)  # an unknown node: ExecutorError
        spares = self._spares[node]
        if not spares:
            return self._new_worker(node)
        ready, _ = ray.wait([s.ready for s in spares], num_returns=1, timeout=0)
        spare = next((s for s in spares if ready and s.ready == ready[0]), spares[0])
        spares.remove(spare)
        return spare.worker, spare.name

    def top_up(self) -> None:
        """Start (in the background) the spares needed to get back to `spares_per_node`."""
        for node in range(len(self.nodes)):  # nodes that joined since get spares too
            if node in self.nodes.dead:  # its spares died with it
                self._spares.pop(node, None)
                continue
            spares = self._spares[node]
            while len(spares) < self.spares_per_node:
                spares.append(Spare.of(*self._new_worker(node)))

    def start_ahead(self, needed: dict[int, int]) -> None:
        """Start (in the background) spares up to `needed[node]` on each node, for launches
        about to `take` them; those a launch does not take stay spares."""
        for node, count in needed.items():
            if node in self.nodes.dead or not 0 <= node < len(self.nodes):
                continue  # the launch itself says what is wrong with the node
            spares = self._spares[node]
            while len(spares) < count:
                spares.append(Spare.of(*self._new_worker(node)))

    def warm(self, timeout_s: float = RPC_TIMEOUT_S) -> None:
        """Top up and wait until every spare is up (process started, imports done)."""
        self.top_up()
        readiness = [s.ready for spares in self._spares.values() for s in spares]
        ray.get(readiness, timeout=timeout_s)

    def give_back(self, gang: WorkerGang) -> None:
        """Keep a gang's idle workers as spares on their node, up to `idle_per_node`."""
        for worker, name, (node, _) in zip(gang.workers, gang.names, gang.gpus, strict=True):
            spares = self._spares[node]
            if len(spares) < self.idle_per_node:
                spares.append(Spare.of(worker, name))
            else:
                ray.kill(worker, no_restart=True)

    def keep_starting(self, gang: WorkerGang) -> None:
        """Keep the workers of a launch that gave up waiting for them (told nothing yet) as
        spares, beyond `spares_per_node`: the next launches take them, whose processes are
        the furthest along."""
        for worker, name, (node, _) in zip(gang.workers, gang.names, gang.gpus, strict=True):
            self._spares[node].append(Spare.of(worker, name))

    def reclaim_orphans(
        self, known: Iterable[str], timeout_s: float = ORPHAN_ANSWER_S
    ) -> OrphanWorkers:
        """Deal with the workers of this namespace that neither `known` (the jobs' workers)
        nor the spares name: those a crashed scheduler left behind. Each is asked for its
        status and node, all at once, answers awaited up to `timeout_s` together. One that
        answers, runs nothing and is on an alive node of the view is kept as a spare of that
        node, up to `idle_per_node` spares there; every other one (running an attempt no job
        records, not answering, on a node that left or that the view does not know, beyond
        the cap) is killed."""
        keep = set(known) | {s.name for spares in self._spares.values() for s in spares}
        orphans: dict[str, Any] = {}
        for actor in ray.util.list_named_actors(all_namespaces=True):
            if actor["namespace"] == self.namespace and actor["name"] not in keep:
                try:
                    orphans[actor["name"]] = self.find(actor["name"])
                except ValueError:  # gone meanwhile
                    continue
        asked = {name: (w.status.remote(), w.info.remote()) for name, w in orphans.items()}
        refs = [ref for pair in asked.values() for ref in pair]
        answered = (
            set(ray.wait(refs, num_returns=len(refs), timeout=timeout_s)[0]) if refs else set()
        )
        alive = {
            node_id: node
            for node, node_id in enumerate(self.nodes.node_ids)
            if node not in self.nodes.dead
        }
        adopted, killed, busy = [], [], []
        silent = [name for name, pair in asked.items() if not all(r in answered for r in pair)]
        for name, worker in orphans.items():
            node = None if name in silent else _idle_on(asked[name], alive)
            if node not in (None, BUSY) and len(self._spares[node]) < self.idle_per_node:
                self._spares[node].append(Spare.of(worker, name))
                adopted.append(name)
            else:
                if node == BUSY:
                    busy.append(name)
                ray.kill(worker, no_restart=True)
                killed.append(name)
        return OrphanWorkers(adopted, killed, silent, busy)

    def find(self, name: str) -> Any:
        """The handle of a named worker of this namespace (ValueError if there is none)."""
        return ray.get_actor(name, namespace=self.namespace)

    def shutdown(self) -> None:
        for spares in self._spares.values():
            for spare in spares:
                ray.kill(spare.worker, no_restart=True)
            spares.clear()

    def _new_worker(self, node: int) -> tuple[Any, str]:
        name = f"worker-{uuid.uuid4().hex[:12]}"
        worker = TrainingWorker.options(
            name=name,
            namespace=self.namespace,
            lifetime="detached",  # outlives a crashed scheduler process
            scheduling_strategy=NodeAffinitySchedulingStrategy(self.nodes.ray_id(node), soft=False),
        ).remote(self.worker_threads)
        return worker, name


BUSY = -1  # `_idle_on`'s answer for an orphan that runs an attempt


def _idle_on(refs: tuple[Any, Any], alive: dict[str, int]) -> int | None:
    """The core node of an orphan whose (status, info) answers, both come, are `refs`, if it
    runs nothing and its Ray node is one of `alive` (Ray node id -> core node); BUSY if it runs
    an attempt (a crashed scheduler's launch can reach it after the crash); else None."""
    try:
        status, info = ray.get(list(refs))
    except RayError:  # its process died
        return None
    return BUSY if status["busy"] else alive.get(info["node_id"])

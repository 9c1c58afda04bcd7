"""Elastic allocation (Saxena et al., MASCOTS'20): the optimizer's dynamic program chooses every
job's GPU count and batch size from predicted throughputs, re-run at each arrival and
completion.

- Options per job: GPU counts 1, 2, 4, ... from its `min_gpus` up to its `max_gpus` (and its
  requested count);
  global batch either the requested one or the requested per-GPU batch times the GPU count.
- Objective: total normalized throughput, each job's samples/s divided by its predicted
  samples/s at its requested size (raw samples/s would favour cheap models for ever).
- No back-and-forth: the full re-allocation is adopted only when its predicted value beats, by
  at least `min_gain` (5%), keeping running jobs as they are and giving the free GPUs to waiting
  jobs with the same dynamic program. Otherwise running jobs keep their size.
- GPU type: throughputs are predicted for the cluster's most common GPU type.
"""

from __future__ import annotations

from collections import Counter

from perfcast.errors import PerfcastError
from perfcast.optimizer.elastic import ElasticJob, allocate
from perfcast.scheduler.core.jobs import JobState
from perfcast.scheduler.core.loop import Allocation, RoundContext, SchedulingPolicy
from perfcast.scheduler.core.predictions import ScalingKey
from perfcast.scheduler.policies import register


def gpu_options(state: JobState, total_gpus: int) -> list[int]:
    top = min(state.job.max_gpus or state.job.num_gpus, total_gpus)
    counts = {state.job.num_gpus, state.num_gpus} - {0}
    n = 1
    while n <= top:
        counts.add(n)
        n *= 2
    return sorted(c for c in counts if state.job.min_gpus <= c <= total_gpus)


@register("elastic")
class ElasticPolicy(SchedulingPolicy):
    needs_predictions = True
    prediction_tasks = ("scaling",)

    def __init__(self, min_gain: float = 0.05) -> None:
        self.min_gain = min_gain
        # a job's options only change with its current size: built once per size
        self._cache: dict[tuple[str, int, int], ElasticJob] = {}

    def schedule(self, ctx: RoundContext) -> list[Allocation]:
        states = list(ctx.jobs.active.values())
        if not states:
            return []
        total = ctx.cluster.total_gpus
        gpu_type = Counter(ctx.cluster.node_type).most_common(1)[0][0]
        elastic = self._elastic_jobs(states, gpu_type, total, ctx)
        by_id = {e.job_id: e for e in elastic}
        full = allocate(elastic, total)
        running = [s for s in states if s.num_gpus]
        used = sum(s.num_gpus for s in running)
        waiting = [by_id[s.job_id] for s in states if not s.num_gpus]
        kept = {s.job_id: (s.num_gpus, s.batch_size) for s in running}
        incremental = kept | (allocate(waiting, total - used) if waiting else {})
        # (on a lightly loaded cluster the two plans are one: every job at its own best)
        if full == incremental or value(elastic, full) >= (1 + self.min_gain) * value(
            elastic, incremental
        ):
            plan = full
        else:
            plan = incremental
        return [
            Allocation(job_id, gpus, batch) for job_id, (gpus, batch) in plan.items() if gpus > 0
        ]

    def _elastic_jobs(
        self, states: list[JobState], gpu_type: str, total: int, ctx: RoundContext
    ) -> list[ElasticJob]:
        predictor = ctx.predictor
        if predictor is None:
            raise PerfcastError("elastic needs a prediction backend (--predictor)")
        options: list[list[tuple[int, int]]] = []
        keys: list[ScalingKey] = []
        key_of = {s.job_id: (s.job_id, s.num_gpus, s.batch_size) for s in states}
        todo = [s for s in states if key_of[s.job_id] not in self._cache]
        for state in todo:
            job = state.job
            local = max(1, job.batch_size // job.num_gpus)
            configs = {(job.num_gpus, job.batch_size)}
            if state.num_gpus:
                configs.add((state.num_gpus, state.batch_size))
            for n in gpu_options(state, total):
                configs |= {(n, job.batch_size), (n, local * n)}
            ordered = sorted((n, b) for n, b in configs if b >= n)
            options.append(ordered)
            keys += [predictor.scaling_key(job.job_type, gpu_type, n, b) for n, b in ordered]
            keys.append(predictor.scaling_key(job.job_type, gpu_type, job.num_gpus, job.batch_size))
        rates = iter(predictor.throughputs(keys) if keys else [])
        for state, configs in zip(todo, options, strict=True):
            throughput = {c: float(next(rates)) for c in configs}
            reference = float(next(rates))
            self._cache[key_of[state.job_id]] = ElasticJob(
                state.job_id,
                throughput,
                max_gpus=max(n for n, _ in configs),
                weight=1.0 / reference,
            )
        return [self._cache[key_of[s.job_id]] for s in states]


def value(jobs: list[ElasticJob], plan: dict[str, tuple[int, int]]) -> float:
    """Total weighted predicted throughput of a plan."""
    total = 0.0
    for job in jobs:
        config = plan.get(job.job_id, (0, 0))
        if config[0]:
            total += job.weight * job.throughput.get(config, 0.0)
    return total

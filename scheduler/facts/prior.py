"""The prior of a job's Pollux throughput model (`facts/throughput.py`): how much slower a step
is on several GPUs than on one, as perfcast's scaling predictor answers it for a cluster whose
multi-GPU measurements it never saw.

Pollux assumes perfect scaling wherever a job has not run (its sync parameters are pinned near
zero) and so lets a job at most double the GPUs it has run on, one round and one restart per
doubling. With this prior the model assumes the predictor's synchronization instead: the
job's own one-GPU report times the predicted slowdown of each placement, until the job reports
a placement of that kind itself (one node, several nodes). The predictor is trained on every
scaling dataset except the multi-GPU rows of the cluster whose measurements are the
simulation's truth (leave one cluster out: on that cluster its step times are 12-39% low,
docs/BENCHMARKS.md), so the prior knows what a new cluster's one-GPU profile tells, not the
answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

import pandas as pd

from perfcast.datasets.placements import even_placement
from perfcast.predictor.base import TaskPredictor

# (nodes, GPUs) a prior slowdown is given for, per GPUs per node: a few GPUs on one node, then
# two and four full nodes (the fit needs placements of both kinds and more than two replicas)
SPREAD_NODES = (2, 4)


class ScalingPrior:
    """Predicted step-time slowdowns (seconds on a placement / seconds on one GPU, at the same
    samples per GPU) of the jobs `templates` holds one one-GPU row of (the scaling contract,
    indexed by job)."""

    def __init__(self, predictor: TaskPredictor, templates: pd.DataFrame, gpus_per_node: int):
        self.predictor, self.templates = predictor, templates
        self.configs = [(1, n) for n in range(2, gpus_per_node + 1)]
        self.configs += [(nodes, nodes * gpus_per_node) for nodes in SPREAD_NODES]
        self._slowdowns = cache(self._predict)

    def knows(self, job_type: str) -> bool:
        return job_type in self.templates.index

    def slowdowns(self, job_type: str, atomic: int) -> Mapping[tuple[int, int], float]:
        """{(nodes, GPUs): predicted step on them / predicted step on one GPU} at `atomic`
        samples per GPU."""
        return self._slowdowns(job_type, int(atomic))

    def _predict(self, job_type: str, atomic: int) -> dict[tuple[int, int], float]:
        configs = [(1, 1), *self.configs]
        rows = pd.DataFrame([self.templates.loc[job_type]] * len(configs)).reset_index(drop=True)
        rows["job"] = job_type
        rows["num_nodes"] = [nodes for nodes, _ in configs]
        rows["num_gpus"] = [gpus for _, gpus in configs]
        rows["placement"] = [even_placement(gpus, nodes) for nodes, gpus in configs]
        rows["local_batch_size"] = atomic
        step = self.predictor.predict_interval(rows)["step_time_s"].to_numpy(dtype=float)
        return {config: float(step[i + 1] / step[0]) for i, config in enumerate(self.configs)}


@cache
def held_out_prior(cluster: str, gpus_per_node: int) -> ScalingPrior:
    """The prior for jobs of `cluster`: the default scaling model (`perfcast serve`'s family
    and datasets) trained without `cluster`'s multi-GPU rows; templates are its one-GPU rows.
    Made once per process (about 2 s)."""
    from perfcast import datasets
    from perfcast.predictor import make_predictor
    from perfcast.predictor.tasks import TASK_SPECS

    spec = TASK_SPECS["scaling"]
    rows = pd.concat(
        [datasets.load(name) for name in spec.default_data.split(",")], ignore_index=True
    )
    here = (rows["cluster"] == cluster).to_numpy()
    multi = (rows["num_gpus"] > 1).to_numpy()
    predictor = make_predictor("scaling", spec.default_family).fit(rows[~(here & multi)])
    ones = rows[here & ~multi].sort_values(["job", "local_batch_size"])
    return ScalingPrior(predictor, ones.drop_duplicates("job").set_index("job"), gpus_per_node)

"""Each policy's decisions on small cases checked by hand."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from scheduler_synthetic import run, synthetic_workload

from perfcast.optimizer.elastic import allocate_exhaustive
from perfcast.scheduler.core import ClusterSpec, ClusterState, Job, JobStatus, Migrate, Run
from perfcast.scheduler.core.jobs import JobTable
from perfcast.scheduler.core.loop import ConsolidatedPlacement, RoundContext, apply_decision
from perfcast.scheduler.core.predictions import JobPredictor
from perfcast.scheduler.facts.oracle import OracleBackend
from perfcast.scheduler.policies import (
    PolicyOptionError,
    UnknownPolicyError,
    make_policy,
    module_of,
    parse_policy_options,
    policy_names,
)
from perfcast.scheduler.policies.elastic import ElasticPolicy, gpu_options, value
from perfcast.scheduler.policies.gandiva import salus_fits
from perfcast.scheduler.sim.engine import simulate
from perfcast.scheduler.sim.metrics import job_table


class TableBackend:
    """Predictions read from fixed tables (deliberately not the truth)."""

    def __init__(self, durations=None, step=None, pair=(0.8, 0.7)):
        self.durations, self.step, self.pair = durations or {}, step, pair

    def predict(self, task, rows):
        if task == "duration":
            v = np.array([self.durations[j] for j in rows["job_id"]], dtype=float)
            return pd.DataFrame({"duration_s": v, "duration_s_p10": v, "duration_s_p90": v})
        if task == "scaling":
            v = np.array([self.step(r) for r in rows.itertuples()], dtype=float)
            return pd.DataFrame({"step_time_s": v, "step_time_s_p10": v, "step_time_s_p90": v})
        a, b = np.full(len(rows), self.pair[0]), np.full(len(rows), self.pair[1])
        return pd.DataFrame({"a_speed": a, "b_speed": b})


def test_registry_lists_every_policy_and_rejects_unknown_names():
    assert {"fifo", "tiresias", "srtf-predicted", "gandiva", "elastic", "hypersched"} <= set(
        policy_names()
    )
    with pytest.raises(UnknownPolicyError, match="unknown policy 'lifo'"):
        make_policy("lifo")


def test_each_policy_lives_in_the_module_named_after_it_and_is_built_from_it_alone():
    """`make_policy` imports only the module named after the policy (its dependencies, not
    every policy's), so each policy's class must be registered there; a fresh interpreter
    building fifo loads no other policy's module."""
    for name in policy_names():
        assert type(make_policy(name)).__module__ == module_of(name), name
    code = (
        "import sys\n"
        "from perfcast.scheduler.policies import make_policy\n"
        "make_policy('fifo')\n"
        "print(sorted(m for m in sys.modules if m.startswith('perfcast.scheduler.policies.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "['perfcast.scheduler.policies.fifo']", loaded


def test_srtf_runs_the_shortest_predicted_job_first():
    # truth: a=300 s, b=100 s, c=200 s; predictions swap b and c
    workload = synthetic_workload(
        [("a", 0.0, "slow", 1, 300.0), ("b", 0.0, "slow", 1, 100.0), ("c", 0.0, "slow", 1, 200.0)]
    )
    backend = TableBackend(durations={"a": 900.0, "b": 250.0, "c": 150.0})
    result = simulate(
        workload,
        ClusterSpec.parse("1x1:v100"),
        make_policy("srtf-predicted"),
        predictor=JobPredictor(backend),
    )
    starts = job_table(result).set_index("job_id")["start_s"]
    assert list(starts.sort_values().index) == ["c", "b", "a"]  # the predicted order
    assert starts["b"] == pytest.approx(200.0) and starts["a"] == pytest.approx(300.0)
    # with the oracle, the truly shortest runs first and average JCT is lower
    oracle = job_table(run(workload, "1x1:v100", "srtf-predicted"))
    assert list(oracle.sort_values("start_s")["job_id"]) == ["b", "c", "a"]
    assert oracle["jct_s"].mean() < job_table(result)["jct_s"].mean()


def running_state(jobs, cluster, job_id, gpus, slots, now=0.0):
    jobs.add(Job(job_id, 0.0, "slow", gpus, 32 * gpus, 1e6, duration_s=1e4))
    apply_decision(Run(job_id, slots, 32 * gpus), cluster, jobs, now)
    return jobs[job_id]


def holding(schedule, jobs):
    """The jobs a schedule leaves holding GPUs, in its order: a plain list names them all; a
    `keep_running` one keeps every running job it does not give 0 GPUs."""
    listed = [a.job_id for a in schedule if a.num_gpus > 0]
    if not getattr(schedule, "keep_running", False):
        return listed
    dropped = {a.job_id for a in schedule if a.num_gpus == 0}
    kept = [s.job_id for s in jobs.running() if s.job_id not in dropped]
    return kept + [j for j in listed if j not in kept]


def test_tiresias_demotes_by_attained_service():
    cluster = ClusterState(ClusterSpec.parse("1x2:v100"))
    jobs = JobTable()
    old = running_state(jobs, cluster, "old", 2, ((0, 0), (0, 1)))
    policy = make_policy("tiresias", thresholds=(100.0,))
    jobs.add(Job("new", 10.0, "slow", 2, 64, 1e6, duration_s=1e4))
    ctx = RoundContext(40.0, cluster, jobs)  # old attained 80 GPU-s: still queue 0
    assert holding(policy.schedule(ctx), jobs) == ["old"]
    assert policy.next_wakeup(ctx) == pytest.approx(50.0, abs=1e-3)  # 100 GPU-s at 2 GPUs
    ctx = RoundContext(60.0, cluster, jobs)  # 120 GPU-s: demoted, the newcomer goes first
    assert old.attained_at(60.0) == pytest.approx(120.0)
    assert holding(policy.schedule(ctx), jobs) == ["new"]


def gandiva_round(memory_mb, pair):
    cluster = ClusterState(ClusterSpec.parse("1x1:v100"))
    jobs = JobTable()
    running_state(jobs, cluster, "host", 1, ((0, 0),))
    jobs.add(Job("guest", 1.0, "fast", 1, 32, 1e6, duration_s=1e4))
    policy = make_policy("gandiva", memory_mb=memory_mb)
    ctx = RoundContext(1.0, cluster, jobs, JobPredictor(TableBackend(pair=pair)))
    policy.placement.place(policy.schedule(ctx), ctx)
    return ctx.decisions


def test_gandiva_packs_only_when_memory_fits_and_it_pays():
    assert salus_fits([4000, 5000], [3000, 6000], 16 * 1024)
    assert not salus_fits([8000, 5000], [3000, 6000], 16 * 1024)
    packed = gandiva_round(lambda job, batch: 6000.0, (0.8, 0.7))
    assert packed == [Run("guest", ((0, 0),), 32, "pack")]
    # a V100 has 32 GB (features/devices.py): 2 x 17,000 MB does not fit, 2 x 9,000 MB does
    assert gandiva_round(lambda job, batch: 9000.0, (0.8, 0.7))[0].share == "pack"
    too_big = gandiva_round(lambda job, batch: 17000.0, (0.8, 0.7))
    assert too_big == [Run("guest", ((0, 0),), 32, "timeslice")]
    no_gain = gandiva_round(lambda job, batch: 6000.0, (0.5, 0.45))  # sum <= 1
    assert no_gain == [Run("guest", ((0, 0),), 32, "timeslice")]
    unknown = gandiva_round(lambda job, batch: None, (0.8, 0.7))  # memory unknown: unsafe
    assert unknown[0].share == "timeslice"


def test_gandiva_migrates_to_keep_a_job_on_one_node():
    cluster = ClusterState(ClusterSpec.parse("2x4:v100"))
    jobs = JobTable()
    running_state(jobs, cluster, "x", 2, ((0, 0), (0, 1)))
    running_state(jobs, cluster, "y", 2, ((1, 0), (1, 1)))
    jobs.add(Job("z", 1.0, "slow", 4, 128, 1e6, duration_s=1e4))
    policy = make_policy("gandiva")
    ctx = RoundContext(1.0, cluster, jobs)
    policy.placement.place(policy.schedule(ctx), ctx)
    assert any(isinstance(d, Migrate) for d in ctx.decisions)
    assert len({n for n, _ in jobs["z"].gpus}) == 1 and jobs["z"].status is JobStatus.RUNNING


def test_gandiva_on_a_new_cluster_stops_watching_the_old_one():
    """The live runner makes a new cluster when nodes join or leave: the policy's index of
    who shares GPUs follows it, and the index it replaced is told of no more changes."""
    jobs = JobTable()
    jobs.add(Job("z", 1.0, "slow", 4, 128, 1e6, duration_s=1e4))
    policy = make_policy("gandiva")
    first = ClusterState(ClusterSpec.parse("2x4:v100"))
    old = policy.sharing(RoundContext(1.0, first, jobs))
    grown = ClusterState(ClusterSpec.parse("3x4:v100"))
    new = policy.sharing(RoundContext(2.0, grown, jobs))
    assert new is not old and new.cluster is grown
    jobs.add(Job("w", 3.0, "fast", 2, 64, 1e6, duration_s=1e4))  # a job arrives
    assert new.waiting[2] == {("fast", 32): 1}
    assert 2 not in old.waiting  # the replaced index heard nothing of it


def elastic_setup(total_gpus: int, n_jobs: int, seed: int):
    rng = np.random.default_rng(seed)
    alpha = {f"j{i}": rng.uniform(0.3, 1.0) for i in range(n_jobs)}

    def step(row):  # per-job scaling exponent: step time grows with GPUs by n ** (1 - alpha)
        return row.local_batch_size / 32 * row.num_gpus ** (1 - alpha[row.job])

    cluster = ClusterState(ClusterSpec.parse(f"1x{total_gpus}:v100"))
    jobs = JobTable()
    for i in range(n_jobs):
        jobs.add(Job(f"j{i}", 0.0, f"j{i}", 1, 32, 1e6, duration_s=1e4, max_gpus=total_gpus))
    return cluster, jobs, JobPredictor(TableBackend(step=step), gpus_per_node=total_gpus)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_elastic_never_exceeds_the_cluster_and_matches_brute_force(seed):
    cluster, jobs, predictor = elastic_setup(4, 3, seed)
    policy = make_policy("elastic")
    ctx = RoundContext(0.0, cluster, jobs, predictor)
    schedule = policy.schedule(ctx)
    assert sum(a.num_gpus for a in schedule) <= 4
    elastic = policy._elastic_jobs(list(jobs.active.values()), "v100", 4, ctx)
    plan = {a.job_id: (a.num_gpus, a.batch_size) for a in schedule}
    best = allocate_exhaustive(elastic, 4)
    assert value(elastic, plan) == pytest.approx(value(elastic, best))
    policy.placement = None
    from perfcast.scheduler.core.loop import ConsolidatedPlacement

    ConsolidatedPlacement().place(schedule, ctx)
    assert cluster.used_gpus() <= 4


def two_jobs_then_a_third(alpha: float):
    """Two one-GPU jobs placed on 4 GPUs, then a third arrives; every job's step time grows
    with its GPUs as n ** (1 - alpha) (alpha 1: linear scaling)."""
    cluster = ClusterState(ClusterSpec.parse("1x4:v100"))
    jobs = JobTable()
    for i in range(2):
        jobs.add(Job(f"j{i}", 0.0, "t", 1, 32, 1e6, duration_s=1e4, max_gpus=4))
    step = lambda row: row.local_batch_size / 32 * row.num_gpus ** (1 - alpha)  # noqa: E731
    predictor = JobPredictor(TableBackend(step=step), gpus_per_node=4)
    policy = make_policy("elastic")
    ctx = RoundContext(0.0, cluster, jobs, predictor)
    ConsolidatedPlacement().place(policy.schedule(ctx), ctx)
    first = {s.job_id: (s.num_gpus, s.batch_size) for s in jobs.running()}
    jobs.add(Job("j2", 1.0, "t", 1, 32, 1e6, duration_s=1e4, max_gpus=4))
    schedule = policy.schedule(RoundContext(1.0, cluster, jobs, predictor))
    return first, {a.job_id: (a.num_gpus, a.batch_size) for a in schedule}


def test_elastic_does_not_resize_for_less_than_five_percent():
    # linear scaling: the two jobs hold all 4 GPUs; any re-plan with the third has the same
    # total normalized throughput (4), so nothing is resized and the third waits
    first, plan = two_jobs_then_a_third(alpha=1.0)
    assert sum(n for n, _ in first.values()) == 4
    assert plan == first


def test_elastic_resizes_when_the_replan_gains_five_percent_or_more():
    # throughput ~ n ** 0.1: 2 + 2 GPUs give 2 x 2 ** 0.1 = 2.14; shrinking one to make room
    # for the third gives 2 ** 0.1 + 1 + 1 = 3.07 (+43%), so the running jobs shrink
    first, plan = two_jobs_then_a_third(alpha=0.1)
    assert {j: n for j, (n, _) in first.items()} == {"j0": 2, "j1": 2}
    assert plan.get("j2", (0, 0))[0] >= 1
    assert sum(n for n, _ in plan.values()) <= 4
    assert any(plan.get(j, (0, 0))[0] < n for j, (n, _) in first.items())


def test_elastic_grows_jobs_onto_idle_gpus_within_their_bounds():
    # linear scaling on 8 idle GPUs: a job asking for 2 grows to its max_gpus (4), not 8; one
    # with min_gpus 2 is never offered a single GPU, and a job with no max_gpus keeps its size
    cluster = ClusterState(ClusterSpec.parse("1x8:v100"))
    jobs = JobTable()
    jobs.add(Job("grow", 0.0, "t", 2, 32, 1e6, duration_s=1e4, min_gpus=2, max_gpus=4))
    jobs.add(Job("fixed", 0.0, "t", 1, 32, 1e6, duration_s=1e4))
    step = lambda row: row.local_batch_size / 32  # noqa: E731
    predictor = JobPredictor(TableBackend(step=step), gpus_per_node=8)
    policy = make_policy("elastic")
    plan = {
        a.job_id: a.num_gpus for a in policy.schedule(RoundContext(0.0, cluster, jobs, predictor))
    }
    assert plan == {"grow": 4, "fixed": 1}
    assert gpu_options(jobs["grow"], 8) == [2, 4]


class ReallocatingElastic(ElasticPolicy):
    """Elastic re-allocating every job every round (as it did before `OwnBests`), counting
    its rounds; `ElasticPolicy` must decide as it does."""

    def __init__(self) -> None:
        super().__init__()
        self.rounds = 0

    def schedule(self, ctx):
        self.rounds += 1
        return self._reallocate(ctx, "v100") if ctx.jobs.active else []


class CountingElastic(ElasticPolicy):
    """Elastic counting the rounds that re-allocate (its own best did not fit every job)."""

    def __init__(self) -> None:
        super().__init__()
        self.reallocations = 0

    def _reallocate(self, ctx, gpu_type):
        self.reallocations += 1
        return super()._reallocate(ctx, gpu_type)


def test_elastic_decides_as_a_re_allocation_of_every_job_each_round():
    # bursts of arrivals on 8 GPUs: rounds where every job's own best fits (no re-allocation)
    # alternate with crowded ones where jobs are shrunk and grown back
    rng = np.random.default_rng(7)
    submit = np.cumsum(rng.exponential(np.where(np.arange(300) % 60 < 15, 40.0, 2000.0)))
    rows = [
        (f"j{i:03d}", float(t), str(rng.choice(["fast", "slow"])), int(rng.choice([1, 2, 4])),
         float(rng.uniform(100, 1500)))
        for i, t in enumerate(submit)
    ]  # fmt: skip
    workload = synthetic_workload(rows)
    predictor = JobPredictor(
        OracleBackend(workload.scaling, workload.interference, workload.jobs), gpus_per_node=4
    )
    spec = ClusterSpec.parse("2x4:v100")
    fast, reference = CountingElastic(), ReallocatingElastic()
    ends = []
    for policy in (fast, reference):
        jobs = simulate(workload, spec, policy, predictor=predictor).jobs.all
        ends.append({j: (s.finish_s, s.resizes, s.preemptions) for j, s in jobs.items()})
    assert ends[0] == ends[1]
    assert sum(r for _, r, _ in ends[0].values()) > 0  # crowded rounds resized jobs
    assert 0 < fast.reallocations < reference.rounds / 2  # most rounds took their own bests


def search_workload(n_trials: int, deadline_s: float, scores: list[float]):
    workload = synthetic_workload([(f"t{i}", 0.0, "slow", 1, 2700.0) for i in range(n_trials)])
    trials = [
        Job(j.job_id, 0.0, j.job_type, 1, j.batch_size, j.total_samples, j.duration_s,
            deadline_s=deadline_s, group="s", max_gpus=1, score=score, curve=1.0)
        for j, score in zip(workload.jobs, scores, strict=True)
    ]  # fmt: skip
    workload.jobs = trials
    return workload


def test_hypersched_promotes_the_best_trial_at_each_rung():
    # 3 trials on 3 GPUs, eta 3, rungs at 100, 300 and 900 GPU-s of a 2700 GPU-s budget: all
    # reach the first rung together; only the best (t1) goes on, and being alone in the search
    # it is then trained to the end; the others stay paused at 100 GPU-s and are stopped
    workload = search_workload(3, 1e6, [0.7, 0.9, 0.8])
    result = run(workload, "1x3:v100", "hypersched", restart_s=0.0)
    jobs = job_table(result).set_index("job_id")
    assert jobs.loc["t1", "completed"] and jobs.loc["t1", "finish_s"] == pytest.approx(2700.0)
    assert not jobs.loc["t0", "completed"] and not jobs.loc["t2", "completed"]
    assert jobs.loc["t0", "gpu_s"] == pytest.approx(100.0)
    assert jobs.loc["t2", "gpu_s"] == pytest.approx(100.0)


def test_hypersched_starts_no_trial_that_cannot_matter_before_the_deadline():
    # 1 GPU, deadline 150 s: t0 reaches the first rung (100 GPU-s) at 100 s; a new trial would
    # need 100 s to get that far, past the deadline, so none starts and t0 trains on
    workload = search_workload(3, 150.0, [0.9, 0.8, 0.7])
    result = run(workload, "1x1:v100", "hypersched", restart_s=0.0)
    jobs = job_table(result).set_index("job_id")
    assert list(jobs.index[jobs["start_s"].notna()]) == ["t0"]
    assert jobs["finish_s"].max() == pytest.approx(150.0)  # stopped at the deadline


def test_policy_options_parse_numbers_tuples_and_booleans():
    options = parse_policy_options(["thresholds=3600,36000", "timeslice=false", "min_gain=0.1"])
    assert options == {"thresholds": (3600, 36000), "timeslice": False, "min_gain": 0.1}
    assert make_policy("tiresias", **parse_policy_options(["thresholds=57600"])).thresholds == (
        57600.0,
    )
    with pytest.raises(PolicyOptionError, match="no option bogus"):
        make_policy("fifo", bogus=1)

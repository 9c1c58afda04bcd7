"""Scheduler core: cluster specs, GPU bookkeeping, decisions and the default placement."""

from __future__ import annotations

import random

import pytest

from perfcast.scheduler.core import (
    Allocation,
    ClusterSpec,
    ClusterState,
    Job,
    JobStatus,
    Migrate,
    Resize,
    RoundContext,
    Run,
    Schedule,
    Suspend,
)
from perfcast.scheduler.core.cluster import ClusterSpecError
from perfcast.scheduler.core.jobs import JobTable
from perfcast.scheduler.core.loop import (
    ConsolidatedPlacement,
    SchedulingLoop,
    SchedulingPolicy,
    apply_decision,
)


def job(job_id: str, gpus: int = 1, submit: float = 0.0) -> Job:
    return Job(job_id, submit, "synthetic-type", gpus, 32 * gpus, 1000.0, duration_s=100.0)


def test_cluster_spec_from_flags_and_yaml(tmp_path):
    spec = ClusterSpec.parse("4x8:V100,2x4:k80")
    assert spec.total_gpus == 40
    assert [g.gpu_type for g in spec.groups] == ["v100", "k80"]
    path = tmp_path / "c.yaml"
    path.write_text("nodes:\n  - {count: 2, gpus: 4, type: T4}\n")
    assert ClusterSpec.parse(path) == ClusterSpec.parse("2x4:t4")


@pytest.mark.parametrize("bad", ["16x8", "x8:v100", "0x8:v100", "abc"])
def test_cluster_spec_errors_name_the_input(bad):
    with pytest.raises(ClusterSpecError, match="cluster spec"):
        ClusterSpec.parse(bad)


def test_find_free_prefers_the_fullest_node_that_fits_then_spreads():
    cluster = ClusterState(ClusterSpec.parse("3x4:v100"))
    cluster.allocate("a", ((1, 0), (1, 1), (1, 2)))  # node 1 has 1 free
    cluster.allocate("b", ((2, 0),))  # node 2 has 3 free
    assert cluster.find_free(1) == ((1, 3),)
    assert {n for n, _ in cluster.find_free(3)} == {2}
    assert {n for n, _ in cluster.find_free(4)} == {0}
    cluster.allocate("c", ((0, 0),))
    spread = cluster.find_free(6)
    assert len(spread) == 6 and len({n for n, _ in spread}) == 2
    assert cluster.find_free(8) is None
    assert cluster.find_free(1, exclude=1) != ((1, 3),)


def test_find_free_picks_the_best_fitting_lowest_node_after_many_changes():
    """The free-GPU index (buckets and their lowest-node heaps, with entries left behind by
    nodes that moved) gives the answer of a walk over every node: the node with the fewest
    free GPUs that still fit, the lowest-numbered among those, after thousands of starts and
    ends on many nodes (enough for the heaps to be rebuilt)."""
    rng = random.Random(38)
    cluster = ClusterState(ClusterSpec.parse("60x8:v100,20x4:k80"))
    held: dict[str, tuple] = {}
    for step in range(6000):
        if held and rng.random() < 0.45:
            job = rng.choice(sorted(held))
            cluster.release(job, held.pop(job))
            continue
        need, gpu_type = rng.choice((1, 1, 2, 4, 8)), rng.choice((None, "v100", "k80"))
        exclude = rng.choice((None, None, rng.randrange(80)))
        free = {
            n: sum(not occ for occ in gpus)
            for n, gpus in enumerate(cluster.occupants)
            if n != exclude and gpu_type in (None, cluster.node_type[n])
        }
        fits = [(f, n) for n, f in free.items() if f >= need]
        slots = cluster.find_free(need, gpu_type, exclude)
        if fits:
            _, node = min(fits)
            assert slots is not None and {n for n, _ in slots} == {node}, step
        elif sum(free.values()) < need:
            assert slots is None
        if slots:
            held[f"j{step}"] = slots
            cluster.allocate(f"j{step}", slots)


def test_the_free_gpu_index_answers_as_a_walk_over_every_gpu():
    cluster = ClusterState(ClusterSpec.parse("3x4:v100,2x8:k80"))
    cluster.allocate("a", ((1, 0), (1, 1), (1, 2)))  # v100 node 1: 1 free
    cluster.allocate("b", ((3, 0),))  # k80 node 3: 7 free
    cluster.allocate("c", ((3, 0),))  # shares b's GPU
    walk = {n: sum(not occ for occ in gpus) for n, gpus in enumerate(cluster.occupants)}
    assert sorted(cluster.nodes_with_free_gpus()) == [n for n, f in walk.items() if f]
    assert sorted(cluster.nodes_with_free_gpus("v100")) == [0, 1, 2]
    everyone = sorted(walk.values(), reverse=True)
    assert cluster.largest_free(10) == everyone
    assert cluster.largest_free(2) == everyone[:2] == [8, 7]
    assert cluster.largest_free(3, "v100", exclude={0}) == [4, 1]
    assert cluster.largest_free(0) == []
    assert cluster.sharing and not cluster.alone(((3, 0),)) and cluster.alone(((3, 1),))
    cluster.release("c", ((3, 0),))
    assert not cluster.sharing and cluster.alone(((3, 0),))


def test_decisions_keep_cluster_and_jobs_in_step():
    cluster = ClusterState(ClusterSpec.parse("1x4:v100"))
    jobs = JobTable()
    state = jobs.add(job("a", 2))
    apply_decision(Run("a", ((0, 0), (0, 1)), 64), cluster, jobs, 5.0)
    assert state.status is JobStatus.RUNNING and cluster.free_gpus == 2
    assert state.first_start_s == 5.0 and jobs.num_running == 1
    apply_decision(Migrate("a", ((0, 2), (0, 3))), cluster, jobs, 6.0)
    assert cluster.free_slots(0) == [(0, 0), (0, 1)] and state.migrations == 1
    apply_decision(Resize("a", ((0, 2),), 32), cluster, jobs, 7.0)
    assert cluster.free_gpus == 3 and state.batch_size == 32 and state.resizes == 1
    apply_decision(Suspend("a"), cluster, jobs, 8.0)
    assert state.status is JobStatus.SUSPENDED and cluster.free_gpus == 4
    assert jobs.num_waiting == 1 and state.preemptions == 1
    with pytest.raises(ValueError, match="not running"):
        apply_decision(Suspend("a"), cluster, jobs, 9.0)


def test_placement_suspends_dropped_jobs_and_starts_in_priority_order():
    cluster = ClusterState(ClusterSpec.parse("1x4:v100"))
    jobs = JobTable()
    for name, gpus in (("old", 4), ("big", 3), ("small", 1)):
        jobs.add(job(name, gpus))
    ctx = RoundContext(0.0, cluster, jobs)
    ConsolidatedPlacement().place([Allocation("old", 4, 128)], ctx)
    assert [type(d) for d in ctx.decisions] == [Run]
    ctx = RoundContext(1.0, cluster, jobs)
    ConsolidatedPlacement().place([Allocation("big", 3, 96), Allocation("small", 1, 32)], ctx)
    assert ctx.decisions[0] == Suspend("old")
    assert [d.job_id for d in ctx.decisions[1:]] == ["big", "small"]
    assert cluster.free_gpus == 0


def test_keep_running_schedule_leaves_unlisted_jobs_alone():
    cluster = ClusterState(ClusterSpec.parse("1x4:v100"))
    jobs = JobTable()
    jobs.add(job("a", 2))
    jobs.add(job("b", 2))
    ctx = RoundContext(0.0, cluster, jobs)
    ConsolidatedPlacement().place([Allocation("a", 2, 64)], ctx)
    ctx = RoundContext(1.0, cluster, jobs)
    ConsolidatedPlacement().place(Schedule([Allocation("b", 2, 64)], keep_running=True), ctx)
    assert jobs["a"].status is JobStatus.RUNNING and jobs["b"].status is JobStatus.RUNNING


def test_a_progress_report_for_an_unknown_job_is_ignored_not_a_crash(caplog):
    # issue 15: a report for a job the loop does not know (core/loop.py raised KeyError)
    cluster = ClusterState(ClusterSpec.parse("1x1:v100"))

    class Idle(SchedulingPolicy):
        def schedule(self, ctx):
            return []

    class NoExecutor:
        def apply(self, decisions, jobs, now):
            pass

    loop = SchedulingLoop(cluster, Idle(), NoExecutor())
    with caplog.at_level("WARNING"):
        loop.report_progress("ghost", 10.0, 1.0)
    assert "ghost" in caplog.text
    assert len(loop.jobs) == 0

"""Placement with interference: sharing only when measured pair speeds and memory allow it,
consolidation when measured scaling penalizes spreading."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import MeasuredBackend, gavel_pairs, needs_data, scaling_table

from perfcast.errors import PerfcastError
from perfcast.optimizer.placement import Node, PlacementJob, place

pytestmark = needs_data
V100_MB = 16_000.0


def _gavel_job(job_id: str, pair_side: pd.Series, side: str, **memory: float) -> PlacementJob:
    features = {
        "job": pair_side[f"{side}_job"],
        "local_batch_size": pair_side[f"{side}_batch_size"],
    }
    return PlacementJob(job_id, features, 1, **memory)


def _v100_pairs() -> pd.DataFrame:
    pairs = gavel_pairs()
    pairs = pairs[pairs["gpu_type"] == "v100"]
    return pairs.assign(combined=pairs["a_speed"] + pairs["b_speed"])


def _one_gpu() -> list[Node]:
    return [Node("n0", "v100", 1, V100_MB)]


def test_pair_that_pays_shares_and_one_that_does_not_waits() -> None:
    pairs = _v100_pairs()
    good = pairs.loc[pairs["combined"].idxmax()]
    bad = pairs.loc[pairs["combined"].idxmin()]
    assert good["combined"] > 1 > bad["combined"]  # the data has both kinds
    for row, shares in ((good, True), (bad, False)):
        jobs = [_gavel_job("first", row, "a"), _gavel_job("second", row, "b")]
        plan = place(jobs, _one_gpu(), MeasuredBackend())
        assert "first" in plan.assignments
        if shares:
            second = plan.assignments["second"]
            assert second.gpus == plan.assignments["first"].gpus == (("n0", 0),)
            assert second.shares_with == "first" and plan.assignments["first"].shares_with
            assert f"= {row['combined']:.2f} > 1" in second.reason
        else:
            assert "second" not in plan.assignments
            assert "combined speed" in plan.waiting["second"]


def test_salus_memory_rule_counts_ephemeral_memory_once() -> None:
    pairs = _v100_pairs()
    good = pairs.loc[pairs["combined"].idxmax()]
    # 4000 + 4000 + max(6000, 6000) = 14000 MB fits in 16000, though the plain sum (20000) does not
    fits = {"persistent_mem_mb": 4000.0, "ephemeral_mem_mb": 6000.0}
    jobs = [_gavel_job("first", good, "a", **fits), _gavel_job("second", good, "b", **fits)]
    assert "second" in place(jobs, _one_gpu(), MeasuredBackend()).assignments
    # 7000 + 7000 + 3000 = 17000 MB does not fit
    big = {"persistent_mem_mb": 7000.0, "ephemeral_mem_mb": 3000.0}
    jobs = [_gavel_job("first", good, "a", **big), _gavel_job("second", good, "b", **big)]
    plan = place(jobs, _one_gpu(), MeasuredBackend())
    assert "second" not in plan.assignments and "17000 MB > 16000" in plan.waiting["second"]
    too_big = [_gavel_job("huge", good, "a", persistent_mem_mb=20_000.0)]
    assert (
        "largest GPU has 16000 MB" in place(too_big, _one_gpu(), MeasuredBackend()).waiting["huge"]
    )


def test_a_crowded_cluster_respects_every_rule() -> None:
    pairs = _v100_pairs()
    sample = pairs.sample(12, random_state=0)
    jobs = [
        _gavel_job(f"j{i}", row, "a", persistent_mem_mb=2000.0, ephemeral_mem_mb=5000.0)
        for i, (_, row) in enumerate(sample.iterrows())
    ]
    nodes = [Node("n0", "v100", 2, V100_MB), Node("n1", "v100", 2, V100_MB)]
    plan = place(jobs, nodes, MeasuredBackend())
    assert set(plan.assignments) | set(plan.waiting) == {j.job_id for j in jobs}
    assert not set(plan.assignments) & set(plan.waiting)
    tenants: dict[tuple[str, int], list[str]] = {}
    for a in plan.assignments.values():
        for gpu in a.gpus:
            tenants.setdefault(gpu, []).append(a.job_id)
    assert len(tenants) <= 4 and all(len(t) <= 2 for t in tenants.values())
    assert len(plan.assignments) >= 4  # every GPU is used before any job waits
    by_id = {j.job_id: j for j in jobs}
    table = gavel_pairs().set_index(["gpu_type", "a_job", "a_batch_size", "b_job", "b_batch_size"])
    for first, second in (t for t in tenants.values() if len(t) == 2):
        a, b = by_id[first].features, by_id[second].features
        measured = table.loc[
            ("v100", a["job"], a["local_batch_size"], b["job"], b["local_batch_size"])
        ]
        assert measured["a_speed"] + measured["b_speed"] > 1


@pytest.mark.parametrize("penalized", [True, False])
def test_a_job_waits_rather_than_spread_when_spreading_is_predicted_to_hurt(
    penalized: bool,
) -> None:
    table = scaling_table()
    two = table[table["num_gpus"] == 2].pivot_table(
        index=["job", "local_batch_size"], columns="num_nodes", values="step_time_s"
    )
    ratio = (two[2] / two[1]).sort_values()
    job, batch = ratio.index[-1] if penalized else ratio.index[0]
    assert (ratio[(job, batch)] > 1.05) == penalized
    nodes = [Node(f"n{i}", "t4", 4, 16_000.0) for i in range(3)]
    # three 3-GPU jobs leave one free GPU on each node
    blockers = [
        PlacementJob(f"block{i}", {"job": job, "local_batch_size": batch}, 3) for i in range(3)
    ]
    wants_two = PlacementJob("two", {"job": job, "local_batch_size": batch}, 2)
    plan = place([*blockers, wants_two], nodes, MeasuredBackend())
    assert {plan.assignments[b.job_id].gpus[0][0] for b in blockers} == {"n0", "n1", "n2"}
    if penalized:
        assert "two" not in plan.assignments
        assert "waits for 1 node(s)" in plan.waiting["two"]
    else:
        spread = plan.assignments["two"]
        assert len({node for node, _ in spread.gpus}) == 2
        assert "spread over 2" in spread.reason


def test_one_node_is_used_when_it_fits() -> None:
    nodes = [Node("n0", "t4", 4, 16_000.0), Node("n1", "t4", 2, 16_000.0)]
    jobs = [PlacementJob("j", {"job": "imagenet", "local_batch_size": 20}, 2)]
    plan = place(jobs, nodes, MeasuredBackend())
    assert plan.assignments["j"].gpus == (("n1", 0), ("n1", 1))  # the tightest fit


def test_bad_input_is_refused() -> None:
    job = PlacementJob("j", {"job": "imagenet"}, 1)
    with pytest.raises(PerfcastError, match="'j': features lack local_batch_size"):
        place([job], _one_gpu(), MeasuredBackend())
    with pytest.raises(PerfcastError, match="node 'n0'"):
        place([], [Node("n0", "v100", 0, V100_MB)], MeasuredBackend())
    with pytest.raises(PerfcastError, match="no nodes"):
        place([job], [], MeasuredBackend())

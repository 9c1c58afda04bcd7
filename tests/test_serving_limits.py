"""The counts the service's work limits rest on are the work itself: a recommendation's
candidate count is the number of rows the optimizer enumerates, and the allocation DP that
`dp_cells` sizes stays exact when jobs offer scattered GPU counts (property tests)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfcast.datasets.placements import even_placement
from perfcast.optimizer import candidates, elastic


@settings(max_examples=60, deadline=None)
@given(
    per_node=st.integers(1, 12),
    nodes=st.integers(1, 12),
    sizes=st.lists(st.integers(1, 512), min_size=1, max_size=4),
    counts=st.none() | st.lists(st.integers(1, 200), min_size=1, max_size=8),
)
def test_candidate_count_is_the_number_of_enumerated_rows(per_node, nodes, sizes, counts) -> None:
    pools = [candidates.GpuPool("v100", gpus_per_node=per_node, nodes=nodes)]
    rows = candidates.enumerate_candidates({"job": "x"}, pools, sizes, counts)
    assert candidates.candidate_count(pools, sizes, counts) == len(rows)


@settings(max_examples=60, deadline=None)
@given(gpus=st.integers(1, 200), nodes=st.integers(1, 40))
def test_even_placement_writes_the_gpus_over_the_nodes(gpus, nodes) -> None:
    placement = even_placement(gpus, nodes)
    if placement is None:
        assert -(-gpus // nodes) > 9  # only when a node would hold more than one digit
        return
    digits = [int(d) for d in placement]
    assert len(digits) == nodes and sum(digits) == gpus and max(digits) - min(digits) <= 1


job_tables = st.lists(
    st.dictionaries(
        st.tuples(st.integers(1, 9), st.sampled_from([32, 64])),
        st.floats(0, 100, allow_nan=False),
        min_size=1,
        max_size=5,
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=80, deadline=None)
@given(tables=job_tables, total=st.integers(0, 12), minimums=st.lists(st.integers(0, 2)))
def test_the_dp_over_scattered_gpu_counts_is_exact(tables, total, minimums) -> None:
    jobs = [
        elastic.ElasticJob(str(i), table, min_gpus=(minimums[i] if i < len(minimums) else 0))
        for i, table in enumerate(tables)
    ]
    try:
        want = elastic.allocate_exhaustive(jobs, total)
    except elastic.InfeasibleAllocationError:
        return
    got = elastic.allocate(jobs, total)
    assert sum(g for g, _ in got.values()) <= total
    best = elastic.total_throughput(jobs, want)
    assert elastic.total_throughput(jobs, got) == pytest.approx(best, rel=1e-9, abs=1e-9)


def test_dp_cells_count_each_jobs_choices_once_per_gpu_count() -> None:
    assert elastic.dp_cells([3, 1, 0], 10) == 11 * 5  # a job without choices still has a row
    assert elastic.gpu_counts(0, None, 4) == range(1, 5)
    assert elastic.gpu_counts(2, 3, 16) == range(2, 4)

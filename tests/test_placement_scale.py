"""The bucketed placement makes the plan the first, look-at-everything placement made
(tests/placement_reference.py), on random clusters and job mixes, while predicting each kind of
job and pair once."""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_reference import place as reference_place

from perfcast.optimizer.placement import Node, PlacementJob, place, prediction_rows


def _unit(*values: object) -> float:
    """A stable pseudo-random number in [0, 1) from `values` (a row's features)."""
    return zlib.crc32(repr(values).encode()) / 2**32


class RowwiseStub:
    """Made-up predictions, each row's a function of that row alone (synthetic: these tests
    check the placement's bookkeeping, not predictions): step times that grow with the node
    count for some kinds, pair speeds around 0.5 each (some pairs pay, some do not, a few are
    NaN). Counts the rows it is asked for."""

    def __init__(self) -> None:
        self.rows = 0

    def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
        self.rows += len(rows)
        records = rows.to_dict("records")
        if task == "scaling":
            step = [
                0.1 * (1 + _unit(r["job"], r["local_batch_size"]) * (r["num_nodes"] - 1))
                for r in records
            ]
            return pd.DataFrame({"step_time_s": step})
        a, b = [], []
        for r in records:
            u = _unit(r["gpu_type"], r["a_job"], r["a_batch_size"], r["b_job"], r["b_mem_mb"])
            a.append(np.nan if u < 0.03 else 0.3 + 0.5 * u)
            b.append(0.3 + 0.5 * _unit(r["b_job"], r["a_job"], r["a_mem_mb"]))
        return pd.DataFrame({"a_speed": a, "b_speed": b})


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[PlacementJob], list[Node], float, bool]:
    types = draw(st.lists(st.sampled_from(["k80", "v100", "a100", "t4"]), min_size=1,
                          max_size=3, unique=True))  # fmt: skip
    nodes = [
        Node(
            f"n{i}",
            draw(st.sampled_from(types)),
            draw(st.sampled_from([1, 2, 4, 8])),
            draw(st.sampled_from([8_000.0, 16_000.0, 32_000.0])),  # mixed within a type too
        )
        for i in range(draw(st.integers(1, 10)))
    ]
    kinds = [("resnet18", 64), ("vgg16", 32), ("lstm", 128), ("bert", 16)]
    jobs = []
    for i in range(draw(st.integers(1, 40))):
        model, batch = draw(st.sampled_from(kinds))
        jobs.append(
            PlacementJob(
                f"j{i}",
                {"job": model, "local_batch_size": batch},
                draw(st.sampled_from([1, 1, 1, 2, 3, 4, 8, 12])),
                persistent_mem_mb=draw(st.sampled_from([1_000.0, 4_000.0, 9_000.0])),
                ephemeral_mem_mb=draw(st.sampled_from([1_000.0, 6_000.0, 20_000.0])),
            )
        )
    return jobs, nodes, draw(st.sampled_from([0.0, 0.05, 0.5])), draw(st.booleans())


@settings(max_examples=400, deadline=None)
@given(clusters())
def test_the_bucketed_placement_makes_the_reference_plan(case) -> None:
    jobs, nodes, tolerance, sharing = case
    stub = RowwiseStub()
    got = place(jobs, nodes, stub, spread_tolerance=tolerance, allow_sharing=sharing)
    assert stub.rows <= prediction_rows(jobs, nodes)
    want = reference_place(
        jobs, nodes, RowwiseStub(), spread_tolerance=tolerance, allow_sharing=sharing
    )
    assert list(got.assignments.items()) == list(want.assignments.items())
    assert list(got.waiting.items()) == list(want.waiting.items())


def test_ten_thousand_jobs_of_a_few_kinds_make_a_few_hundred_predictions() -> None:
    nodes = [Node(f"n{i}", ("v100", "k80")[i % 2], 8, 16_000.0) for i in range(1250)]
    kinds = [("resnet18", 64, 1), ("vgg16", 32, 1), ("lstm", 128, 2), ("bert", 16, 8)]
    jobs = [
        PlacementJob(f"j{i}", {"job": m, "local_batch_size": b}, g, 2_000.0, 3_000.0)
        for i, (m, b, g) in enumerate(kinds[i % 4] for i in range(10_000))
    ]
    stub = RowwiseStub()
    plan = place(jobs, nodes, stub)
    assert stub.rows == prediction_rows(jobs, nodes) == 2 * 2 * 2 + 2 * (2 + 8)
    assert len(plan.assignments) + len(plan.waiting) == 10_000
    tenants: dict[tuple[str, int], list[str]] = {}
    for a in plan.assignments.values():
        for gpu in a.gpus:
            tenants.setdefault(gpu, []).append(a.job_id)
    assert len(tenants) == 10_000  # every GPU taken: the jobs ask for more than there is
    for there in tenants.values():  # at most two on a GPU, and then two that share it
        assert len(there) <= 2
        if len(there) == 2:
            assert plan.assignments[there[0]].shares_with == there[1]
            assert plan.assignments[there[1]].shares_with == there[0]

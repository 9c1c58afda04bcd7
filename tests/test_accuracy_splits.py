"""The accuracy benchmark's cross-source splits hold out what they say they hold out."""

from __future__ import annotations

import numpy as np
import pandas as pd

from benchmarks.accuracy import _losses, leave_one_device_out_folds
from perfcast.datasets.splits import folds


def test_leave_one_device_out_tests_each_device_once_and_never_trains_on_it() -> None:
    devices = ["a100", "v100", "a100", "mi250", "v100", "v100"]
    graphs = pd.DataFrame({"device": devices, "sample_id": [f"s{i}" for i in range(6)]})
    folds = list(leave_one_device_out_folds(graphs))
    assert [label for *_, label in folds] == ["a100", "mi250", "v100"]
    tested = np.concatenate([test for _, test, _ in folds])
    assert sorted(tested) == list(range(len(graphs)))  # every sample tested exactly once
    for train, test, device in folds:
        assert set(graphs["device"].iloc[test]) == {device}
        assert device not in set(graphs["device"].iloc[train])
        assert len(train) + len(test) == len(graphs)


def test_a_model_that_answers_as_a_baseline_is_reported_as_a_tie_not_a_win() -> None:
    table = pd.DataFrame({
        "split": ["by source"] * 4,
        "model": ["gbm", "fcn", "baseline: no interference (1.0)", "baseline: train mean"],
        "mae": [0.1205, 0.3, 0.1205, 0.2],
    })  # fmt: skip
    report = _losses(table, "mae", "MAE")
    assert "- by source, gbm (0.12 MAE) ties with no interference (1.0) (0.12)" in report
    assert "- by source, fcn (0.3 MAE) loses to no interference (1.0) (0.12), train mean" in report
    assert "nowhere" not in report
    better = table[table["model"] != "fcn"].assign(mae=[0.1, 0.2, 0.3])
    assert "nowhere" in _losses(better, "mae", "MAE")


def test_leave_one_workload_out_tests_every_pair_of_a_workload_and_trains_on_none() -> None:
    jobs = [("a", "b"), ("a", "a"), ("b", "c"), ("c", "d"), ("d", "d"), ("b", "d")]
    pairs = pd.DataFrame(jobs, columns=["a_job", "b_job"])
    names = sorted({j for pair in jobs for j in pair})
    found = list(folds(pairs, "interference", "workload", n_folds=len(names)))
    assert len(found) == len(names)
    held = []
    for train, test in found:
        train_jobs = set(pairs.iloc[train].to_numpy().ravel())
        (job,) = set.intersection(*(set(p) for p in pairs.iloc[test].to_numpy()))
        assert job not in train_jobs  # the held-out workload is in no training pair
        with_job = {i for i, pair in enumerate(jobs) if job in pair}
        assert set(test) == with_job and not set(train) & with_job
        held.append(job)
    assert sorted(held) == names  # every workload held out once

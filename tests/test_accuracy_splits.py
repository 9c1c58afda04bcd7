"""The accuracy benchmark's cross-source splits hold out what they say they hold out."""

from __future__ import annotations

import numpy as np
import pandas as pd

from benchmarks.accuracy import leave_one_device_out_folds


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

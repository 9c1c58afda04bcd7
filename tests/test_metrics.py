"""The accuracy figures' own invariants."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfcast.training.metrics import narrowest_width

positive = st.floats(0.01, 100.0, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(
    pairs=st.lists(st.tuples(positive, positive), min_size=1, max_size=40),
    coverage=st.floats(0.05, 1.0),
    lo=st.floats(0.2, 1.0),
    hi=st.floats(1.0, 5.0),
)
def test_no_interval_of_one_scale_covering_as_much_is_narrower(pairs, coverage, lo, hi):
    y, pred = np.array(pairs).T
    width = narrowest_width(y, pred, coverage)
    errors, eps = np.log(y / pred), 1e-9
    k = int(np.ceil(coverage * len(y)))
    # reached: some [pred * a, pred * a * width] holds `coverage` of the rows
    held = [np.sum((errors >= e - eps) & (errors <= e + np.log(width) + eps)) for e in errors]
    assert max(held) >= k
    # and no interval [pred * lo, pred * hi] holding as many rows is narrower
    if np.sum((errors >= np.log(lo)) & (errors <= np.log(hi))) >= k:
        assert hi / lo >= width * (1 - eps)


def test_exact_predictions_need_no_width_and_bad_input_is_named():
    y = np.array([1.0, 2.0, 3.0])
    assert narrowest_width(y, y, 0.8) == 1.0
    with pytest.raises(ValueError, match="coverage"):
        narrowest_width(y, y, 0.0)
    with pytest.raises(ValueError, match="positive"):
        narrowest_width(-y, y, 0.5)

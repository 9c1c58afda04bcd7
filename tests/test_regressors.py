"""The tabular families on tables unlike their training rows: a number beyond the training
range reads as the nearest one seen (as a tree reads it), and a network fitted on a small
table keeps the epoch held-out rows liked best, not the one that fitted the noise."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from conftest import requires_data
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import BaseEstimator

from perfcast import datasets
from perfcast.features.graphs import sample_table, samples
from perfcast.predictor import make_predictor
from perfcast.predictor.regressors import ConformalQuantiles, QuantileMLP, TabularEncoder

torch.set_num_threads(1)
finite = st.floats(-1e6, 1e6, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(
    train=st.lists(st.tuples(finite, finite), min_size=2, max_size=30),
    query=st.tuples(st.floats(-1e9, 1e9), st.floats(-1e9, 1e9)),
)
def test_a_number_beyond_the_training_range_encodes_as_the_nearest_seen(train, query) -> None:
    table = pd.DataFrame(train, columns=["a", "b"])
    encoder = TabularEncoder().fit(table)
    asked = pd.DataFrame([query], columns=["a", "b"])
    nearest = asked.clip(table.min(), table.max(), axis=1)
    assert np.array_equal(encoder.transform(asked), encoder.transform(nearest))


# held out together: the newest and the oldest NVIDIA GPUs of the table, a V100, and an AMD
# one (every one of the ten took 390 s of a loaded CI run; these four are the spread of it)
HELD_OUT_DEVICES = (
    "NVIDIA_H100_80GB_HBM3",
    "Tesla_P4",
    "Tesla_V100-PCIE-32GB",
    "AMD_Instinct_MI250",
)


@requires_data
def test_fcn_on_gpus_it_never_saw_beats_the_roofline() -> None:
    """Four GPUs left out at once: trained for all its epochs on the ~90 samples of the other
    GPUs, the network scored 33.7% against the roofline's 33.3% (now ~13%). It trains 30
    epochs here (it keeps its best on held-out rows either way) on the GPUs none of the four
    is: 11.2% against the roofline's 37.2%. Each left out in turn (four fits, four times the
    training time) it was 10.5% against 36.7%: fewer GPUs to learn from cost the network
    little."""
    graphs = datasets.load("neusight-graphs")
    held = graphs["device"].isin(HELD_OUT_DEVICES)
    train, test = graphs[~held], graphs[held]
    assert set(test["device"]) == set(HELD_OUT_DEVICES)
    truth = samples(test)["e2e_latency_ms"]
    model = make_predictor("runtime", "fcn", epochs=30).fit(train)
    predicted = model.predict_interval(test)["e2e_latency_ms"].reindex(truth.index)
    X_train, log_train = sample_table(train)
    measured = samples(train)["e2e_latency_ms"].reindex(X_train.index)
    scale = np.median(measured / np.exp(log_train))  # the roofline's fitted efficiency
    X_test, log_test = sample_table(test)
    roofline = pd.Series(np.exp(log_test) * scale, index=X_test.index).reindex(truth.index)
    fcn_error = np.mean(np.abs(predicted / truth - 1))
    roofline_error = np.mean(np.abs(roofline / truth - 1))
    assert fcn_error < 0.6 * roofline_error, (fcn_error, roofline_error)


def test_a_network_trains_on_one_thread_and_gives_the_callers_threads_back() -> None:
    rng = np.random.default_rng(0)
    table = pd.DataFrame(rng.normal(size=(200, 3)), columns=["a", "b", "c"])
    seen: list[int] = []
    hook = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda *_: seen.append(torch.get_num_threads())
    )
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        QuantileMLP(epochs=3, n_members=1).fit(table, table["a"].to_numpy())
        assert torch.get_num_threads() == 2
    finally:
        hook.remove()
        torch.set_num_threads(before)
    assert seen and set(seen) == {1}


class _ScaledLine(BaseEstimator):
    """A least-squares line whose slope is multiplied by `scale` (1.0: the fitted line)."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale

    def fit(self, X: pd.DataFrame, y: np.ndarray) -> _ScaledLine:
        self.slope_, self.intercept_ = np.polyfit(X["x"].to_numpy(), y, 1)
        return self

    def predict_quantiles(self, X: pd.DataFrame) -> tuple[np.ndarray, ...]:
        mid = self.intercept_ + self.scale * self.slope_ * X["x"].to_numpy()
        return mid - 0.1, mid, mid + 0.1


def test_conformal_choices_pick_what_predicts_held_out_groups_and_set_the_margin_by_it() -> None:
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"x": rng.uniform(0, 10, 120)})
    y = 2.0 * X["x"].to_numpy() + rng.normal(0, 0.5, 120)
    groups = np.repeat(["a", "b", "c", "d"], 30)
    choices = ({"scale": 0.5}, {"scale": 1.0}, {"scale": 1.5})
    for order in (choices, choices[::-1]):
        model = ConformalQuantiles(_ScaledLine(), choices=order).fit(X, y, groups=groups)
        assert model.chosen_ == {"scale": 1.0}
        assert model.regressor_.scale == 1.0
    alone = ConformalQuantiles(_ScaledLine(scale=1.0)).fit(X, y, groups=groups)
    assert model.margin_ == alone.margin_ > 0
    assert np.allclose(model.predict_quantiles(X)[1], alone.predict_quantiles(X)[1])

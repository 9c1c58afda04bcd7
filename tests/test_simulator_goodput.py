"""The Pollux goodput truth (scheduler/sim/goodput.py) on the artifact's own traces."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfcast.datasets.fetch import shared_data_available
from perfcast.scheduler.sim import goodput

pytestmark = pytest.mark.skipif(
    not shared_data_available(), reason="the public datasets are not available"
)


@settings(max_examples=60, deadline=None)
@given(
    job_type=st.sampled_from(sorted(goodput.APPLICATIONS)),
    scale=st.floats(1.0, 64.0),
    epoch_frac=st.floats(0.0, 1.0),
)
def test_efficiency_is_one_at_the_initial_batch_and_at_most_one_above_it(
    job_type: str, scale: float, epoch_frac: float
) -> None:
    app = goodput.application(job_type)
    epoch = min(int(epoch_frac * app.max_epochs), app.max_epochs - 1)
    assert app.efficiency(app.init_batch, epoch) == pytest.approx(1.0)
    batch = int(app.init_batch * scale)
    # (not monotonic in the batch: each batch size has its own measured gradient noise)
    assert 0.0 < app.efficiency(batch, epoch) <= 1.0 + 1e-9


def test_cifar10_at_its_initial_batch_runs_at_its_measured_step_time():
    # cifar10/placements.csv "1,128,..." is not a row: 128 lies between the measured local
    # batches 91 and 129, interpolated as the artifact does; at the initial batch (128, the
    # smallest validated) the statistical efficiency is 1, so the rate is 128 / step time
    app = goodput.application("resnet18-cifar10")
    assert app.init_batch == 128
    step, _ = app.step_and_sync((1,), 128)
    lo, hi = 0.07591350078582763, 0.10385050773620605
    assert step == pytest.approx(lo + (128 - 91) / (129 - 91) * (hi - lo))
    assert app.rate((1,), 128, 0.0) == pytest.approx(128 / step)
    # a spread placement of the same GPUs is slower than a packed one
    packed = app.rate((4,), 512, 0.0)
    spread = app.rate((1, 1, 1, 1), 512, 0.0)
    assert spread < packed
    # done after 100 epochs: the smallest progress any validation run had after 100 epochs
    assert app.total_work == pytest.approx(float(app.starts[100]) * 128)

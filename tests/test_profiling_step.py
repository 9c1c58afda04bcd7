"""The step profiler on small zoo models, for real on this CPU: timing, memory and counters
agree with each other and with what the model's tensors say."""

from __future__ import annotations

import math

import pytest
import torch

from perfcast.features.profiling import profile_step, zoo
from perfcast.features.profiling.counters import CounterSampler
from perfcast.features.profiling.memory import persistent_bytes

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


def _profile(name: str, batch: int, optimizer: str = "adam", **sizes: int):
    built = zoo.build(zoo.spec(name, **sizes))
    params = built.model.parameters()
    opt = torch.optim.Adam(params) if optimizer == "adam" else torch.optim.SGD(params, lr=0.01)
    result = profile_step(
        built.model, opt, lambda: built.make_batch(batch), loss_fn=built.loss_fn, steps=8, warmup=2
    )
    return built, opt, result


def test_throughput_times_step_time_is_the_batch_size() -> None:
    _, _, r = _profile("mlp", 32, width=64, depth=2, input_size=32)
    assert r.batch_size == 32
    assert r.throughput_samples_s * r.step_time_s == pytest.approx(32, rel=1e-9)
    assert len(r.step_times_s) == 8
    assert r.step_time_p10_s <= r.step_time_s <= r.step_time_p90_s
    assert all(t > 0 for t in r.step_times_s)


@pytest.mark.parametrize(("optimizer", "copies"), [("adam", 4), ("sgd", 2)])
def test_persistent_memory_is_weights_gradients_and_optimizer_state(
    optimizer: str, copies: int
) -> None:
    """Adam keeps two moments per parameter (weights + grads + 2 = 4 copies), plain SGD none
    (2 copies). Tolerance 1%: Adam's per-parameter step counters and BatchNorm's running
    statistics (buffers) add a few bytes."""
    built, opt, r = _profile("resnet18", 4, optimizer, width=8, input_size=16)
    n_params = sum(p.numel() for p in built.model.parameters())
    expected_mb = copies * 4 * n_params / 2**20
    assert r.params_m == pytest.approx(n_params / 1e6)
    assert r.persistent_mem_mb == pytest.approx(expected_mb, rel=0.01)
    assert r.persistent_mem_mb * 2**20 == persistent_bytes(built.model, opt)


def test_ephemeral_memory_grows_with_the_batch() -> None:
    """Activations scale with the batch; weights do not."""
    _, _, small = _profile("gpt-decoder", 2, width=64, depth=1, input_size=16)
    _, _, large = _profile("gpt-decoder", 8, width=64, depth=1, input_size=16)
    assert large.persistent_mem_mb == pytest.approx(small.persistent_mem_mb)
    assert 3.0 < large.ephemeral_mem_mb / small.ephemeral_mem_mb < 4.5
    assert large.peak_mem_mb == pytest.approx(large.persistent_mem_mb + large.ephemeral_mem_mb)
    assert large.rss_mb > large.peak_mem_mb  # RSS also holds the interpreter and libraries


def test_gpu_counters_are_missing_without_a_gpu_and_cpu_util_is_recorded() -> None:
    if torch.cuda.is_available():
        pytest.skip("this test is about machines without a GPU")
    _, _, r = _profile("ncf", 64, width=8, depth=1)
    row = r.as_row()
    for name in ("gpu_util", "mem_util", "power_w", "sm_clock_mhz", "pcie_tx_mb_s"):
        assert math.isnan(row[name]), name
    assert math.isnan(row["allocator_peak_mb"])
    assert row["gpu_samples"] == 0
    assert 0 < row["cpu_util"] <= 100


def test_cpu_utilization_tracks_real_work() -> None:
    """A busy loop uses CPU; sleeping does not."""
    with CounterSampler("cpu") as busy:
        x = torch.randn(256, 256)
        for _ in range(200):
            x = torch.tanh(x @ x)
    with CounterSampler("cpu") as idle:
        torch.cuda.is_available()
        import time

        time.sleep(0.2)
    assert busy.summary.cpu_util > 5 * idle.summary.cpu_util
    assert not busy.has_gpu_counters


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_profile_has_nvml_counters_at_10_hz() -> None:
    built = zoo.build(zoo.spec("resnet18", width=32))
    model = built.model.cuda()
    opt = torch.optim.Adam(model.parameters())
    r = profile_step(
        model, opt, lambda: built.make_batch(64), loss_fn=built.loss_fn, device="cuda", steps=50
    )
    assert r.device == torch.cuda.get_device_name().lower()
    assert r.counters.gpu_samples > 0 and r.counters.gpu_sample_hz >= 10
    assert 0 <= r.counters.gpu_util <= 100
    assert r.peak_mem_mb >= r.persistent_mem_mb > 0


def test_bad_arguments_are_refused() -> None:
    from perfcast.errors import PerfcastError

    built = zoo.build(zoo.spec("mlp", width=8, depth=1, input_size=8))
    opt = torch.optim.SGD(built.model.parameters(), lr=0.1)
    with pytest.raises(PerfcastError, match="steps"):
        profile_step(built.model, opt, lambda: built.make_batch(2), steps=0)
    with pytest.raises(PerfcastError, match="unknown zoo model"):
        zoo.spec("alexnet")
    with pytest.raises(PerfcastError, match="fixed depth"):
        zoo.spec("resnet18", depth=34)


def test_every_zoo_model_trains_and_its_job_name_round_trips() -> None:
    for name in zoo.ZOO:
        s = zoo.spec(name, width=16, input_size=2 if name == "ncf" else 16)
        assert zoo.parse_job(s.job) == s
        built = zoo.build(s)
        inputs, target = built.make_batch(2)
        loss = built.loss_fn(built.model(inputs), target)
        loss.backward()
        assert math.isfinite(loss.item()), name

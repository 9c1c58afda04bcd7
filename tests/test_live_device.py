"""Device choice for live workers, checkable without a GPU: CPU jobs stay on CPU with gloo,
CUDA jobs get their GPU index and NCCL with CUDA tensors, and a CUDA job on a worker without
that GPU is refused, never moved to the CPU."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from perfcast.scheduler.live.device import (
    DeviceUnavailable,
    backend_for,
    collective_device,
    worker_device,
)
from perfcast.scheduler.live.spec import JobSpecError, parse_job


@given(gpu=st.one_of(st.none(), st.integers(0, 15)), seen=st.integers(0, 16))
def test_cpu_jobs_train_on_cpu_with_gloo_whatever_the_node_has(gpu, seen):
    device = worker_device("cpu", gpu, seen)
    assert device == torch.device("cpu") and backend_for(device) == "gloo"
    assert collective_device("gloo", device) == torch.device("cpu")


@given(seen=st.integers(1, 16), data=st.data())
def test_cuda_jobs_get_their_gpu_index_and_nccl_with_cuda_tensors(seen, data):
    gpu = data.draw(st.integers(0, seen - 1))
    device = worker_device("cuda", gpu, seen)
    assert device == torch.device("cuda", gpu) and backend_for(device) == "nccl"
    assert collective_device("nccl", device) == device  # NCCL refuses CPU tensors


@given(seen=st.integers(0, 16), beyond=st.integers(0, 8))
def test_a_cuda_job_is_refused_where_its_gpu_is_not_seen(seen, beyond):
    with pytest.raises(DeviceUnavailable, match=r"needs (CUDA|cuda:)"):
        worker_device("cuda", seen + beyond, seen)


def test_refusals_say_what_is_missing(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(DeviceUnavailable, match=r"sees no CUDA device.*CUDA_VISIBLE_DEVICES=''"):
        worker_device("cuda", 0, 0)
    with pytest.raises(DeviceUnavailable, match="no GPU index"):
        worker_device("cuda", None, 4)
    with pytest.raises(DeviceUnavailable, match="cuda:5; this worker sees 2"):
        worker_device("cuda", 5, 2)


def test_the_spec_names_the_device_explicitly():
    assert parse_job({"name": "x", "iterations": 1}).device == "cpu"
    assert parse_job({"name": "x", "iterations": 1, "device": "cuda"}).device == "cuda"
    with pytest.raises(JobSpecError, match="device"):
        parse_job({"name": "x", "iterations": 1, "device": "tpu"})

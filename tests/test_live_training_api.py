"""The job-side training API without a cluster: declared state (LR scheduler, RNG, counters)
saved and restored, learning rates scaled and never reset, the resumable shuffling sampler,
settings from the spec and reported metrics."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from perfcast.scheduler.live.checkpoint import (
    CheckpointRef,
    checkpoint_path,
    latest_checkpoint,
    load_checkpoint,
)
from perfcast.scheduler.live.data import ResumableBatchSampler
from perfcast.scheduler.live.hook import AlreadyFinished, HookStatus, TrainingHook
from perfcast.scheduler.live.models import build_model
from perfcast.scheduler.live.shards import ShardedGradients
from perfcast.scheduler.live.spec import JobSpec, JobSpecError, parse_job
from perfcast.scheduler.live.state import RngState
from perfcast.scheduler.live.store import JobStore
from perfcast.scheduler.live.training import train

torch.set_num_threads(1)
SPEC = JobSpec(
    name="api", iterations=30, batch_size=16, checkpoint_every=5,
    config={"lr_step_every": 4, "lr_gamma": 0.5, "dataset_size": 40},
)  # fmt: skip


@dataclass
class _Position:
    """What the sampler reads of a hook."""

    global_batch: int
    world_size: int
    rank: int
    status: HookStatus = field(default_factory=HookStatus)


def _batches(sampler: ResumableBatchSampler, count: int) -> list[list[int]]:
    it = iter(sampler)
    return [next(it) for _ in range(count)]


@settings(max_examples=60, deadline=None)
@given(
    num_samples=st.integers(1, 50),
    per_rank=st.integers(1, 8),
    world=st.integers(1, 4),
    start=st.integers(0, 200),
    shuffle=st.booleans(),
)
def test_sampler_ranks_share_one_stream_of_epoch_permutations(
    num_samples, per_rank, world, start, shuffle
):
    batch = per_rank * world
    ranks = [
        ResumableBatchSampler(num_samples, _Position(batch, world, r), shuffle=shuffle, seed=3)
        for r in range(world)
    ]
    for r in ranks:
        r.hook.status.samples_done = start
    shares = [_batches(r, 4) for r in ranks]
    stream = [i for k in range(4) for r in range(world) for i in shares[r][k]]
    # the stream is epoch after epoch of permutations, from position `start`
    order = ResumableBatchSampler(num_samples, _Position(1, 1, 0), shuffle=shuffle, seed=3)
    expected = [int(order.epoch_order(p // num_samples)[p % num_samples])
                for p in range(start, start + 4 * batch)]  # fmt: skip
    assert stream == expected
    assert sorted(order.epoch_order(1).tolist()) == list(range(num_samples))
    # resumed at any batch boundary (another size included), it continues the same stream
    resumed = ResumableBatchSampler(
        num_samples, _Position(2 * batch, 1, 0), shuffle=shuffle, seed=3
    )
    resumed.hook.status.samples_done = start + batch
    assert next(iter(resumed)) == expected[batch : 3 * batch]


def test_rng_state_round_trip_restores_every_generator():
    rng = RngState(5)
    state = rng.state_dict()
    first = (random.random(), np.random.rand(), torch.rand(3))
    RngState(99)  # another seed: other draws
    rng.load_state_dict(state)
    again = (random.random(), np.random.rand(), torch.rand(3))
    assert first[:2] == again[:2] and torch.equal(first[2], again[2])


def _run(hook: TrainingHook, spec: JobSpec = SPEC) -> dict:
    train(hook.job_id, spec, hook)
    ref = latest_checkpoint(hook.checkpoint_dir, hook.job_id)
    return load_checkpoint(ref.path, ref.sha256)


def test_exit_and_restore_continue_the_lr_schedule_data_and_rng_bit_for_bit(tmp_path):
    reference = _run(TrainingHook("ref", SPEC, checkpoint_dir=tmp_path))
    assert reference["optimizer"]["param_groups"][0]["lr"] == SPEC.lr * 0.5 ** (30 // 4)

    hook = TrainingHook("job", SPEC, checkpoint_dir=tmp_path)
    loop = threading.Thread(target=train, args=("job", SPEC, hook))
    loop.start()
    assert hook.request_suspend(timeout_s=30)
    hook.request_exit("migrate")
    loop.join(30)
    stopped = hook.status.last_checkpoint
    assert 0 < stopped["iteration"] < SPEC.iterations
    final = _run(TrainingHook("job", SPEC, checkpoint_dir=tmp_path,
                              restore_from=CheckpointRef(**stopped)))  # fmt: skip
    assert final["iteration"] == reference["iteration"]
    for key, value in reference["model"].items():
        assert torch.equal(final["model"][key], value), key
    assert final["optimizer"]["param_groups"] == reference["optimizer"]["param_groups"]
    assert final["objects"]["lr_scheduler"] == reference["objects"]["lr_scheduler"]
    assert final["objects"]["counters"] == reference["objects"]["counters"]


# wide enough (34M parameters, 135 MB, and as much momentum) that its state on the GPU dwarfs
# what a training thread keeps there regardless (cuBLAS's 32 MiB workspace per thread)
CUDA_SPEC = SPEC.model_copy(
    update={"name": "api-cuda", "device": "cuda", "width": 4096, "depth": 3}
)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_job_suspended_frees_the_gpu_and_resumed_or_restored_ends_bit_for_bit(tmp_path):
    """The GPU path of the hook: a suspended single-worker CUDA job keeps its state in host
    memory (the GPU is free for its neighbour), and a resumed or a migrated (exit, restore with
    map_location=cuda) job ends with the same bits as one that ran straight through."""
    reference = _run(
        TrainingHook("ref", CUDA_SPEC, checkpoint_dir=tmp_path, device="cuda"), CUDA_SPEC
    )
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated()

    hook = TrainingHook("job", CUDA_SPEC, checkpoint_dir=tmp_path, device="cuda")
    loop = threading.Thread(target=train, args=("job", CUDA_SPEC, hook))
    loop.start()
    assert hook.request_suspend(timeout_s=60)
    # (counted from the reference's state: building a model here would draw from the global
    # RNG, which is part of the suspended job's state)
    params = sum(v.numel() * v.element_size() for v in reference["model"].values())
    # the loop's last batch and its thread's cuBLAS workspace may still be on the device; the
    # model and its momentum are not
    assert torch.cuda.memory_allocated() - baseline < params
    hook.resume()
    assert hook.request_suspend(timeout_s=60)  # resumed on the GPU, then suspended again
    hook.request_exit("migrate")  # wakes the suspended loop, which checkpoints and leaves
    loop.join(60)
    stopped = hook.status.last_checkpoint
    assert 0 < stopped["iteration"] < CUDA_SPEC.iterations
    restored = TrainingHook("job", CUDA_SPEC, checkpoint_dir=tmp_path, device="cuda",
                            restore_from=CheckpointRef(**stopped))  # fmt: skip
    final = _run(restored, CUDA_SPEC)
    assert final["iteration"] == reference["iteration"]
    for key, value in reference["model"].items():
        assert torch.equal(final["model"][key].cpu(), value.cpu()), key
    assert final["optimizer"]["param_groups"] == reference["optimizer"]["param_groups"]


def _fresh_state():
    model = build_model(SPEC)
    optimizer = torch.optim.SGD(model.parameters(), lr=SPEC.lr, momentum=SPEC.momentum)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 4, 0.5)
    return model, optimizer, scheduler


def test_learning_rates_follow_the_batch_by_ratio_and_are_never_reset(tmp_path):
    # fresh at twice the spec's batch: twice the LR, and StepLR decays from there
    doubled = _run(TrainingHook("big", SPEC, global_batch=32, checkpoint_dir=tmp_path))
    assert doubled["iteration"] == 15  # the same samples in half the iterations
    assert doubled["optimizer"]["param_groups"][0]["lr"] == 2 * SPEC.lr * 0.5 ** (15 // 4)
    assert doubled["objects"]["lr_scheduler"]["base_lrs"] == [2 * SPEC.lr]
    # restored at the spec's batch from the doubled run's iteration 10: the decayed LR halved,
    # not reset to the spec's
    mid = checkpoint_path(tmp_path, "big", 10)
    saved_lr = load_checkpoint(mid)["optimizer"]["param_groups"][0]["lr"]
    hook = TrainingHook("big", SPEC, checkpoint_dir=tmp_path / "other",
                        restore_from=CheckpointRef(str(mid), "", 10, 0))  # fmt: skip
    model, optimizer, scheduler = _fresh_state()
    assert (
        hook.restore(model, optimizer, lr_scheduler=scheduler, rng=RngState(0), counters={}) == 10
    )
    assert saved_lr == 2 * SPEC.lr * 0.5 ** (10 // 4)
    assert optimizer.param_groups[0]["lr"] == scheduler.get_last_lr()[0] == saved_lr / 2
    assert scheduler.base_lrs == [SPEC.lr] and scheduler.last_epoch == 10
    assert hook.status.samples_done == 10 * 32


def test_restoring_a_finished_job_trains_no_further_step(tmp_path):
    done = _run(TrainingHook("j", SPEC, checkpoint_dir=tmp_path))
    last = latest_checkpoint(tmp_path, "j")
    assert last.iteration == done["iteration"] == SPEC.iterations
    hook = TrainingHook("j", SPEC, checkpoint_dir=tmp_path, restore_from=last)
    with pytest.raises(AlreadyFinished):
        train("j", SPEC, hook)
    assert hook.status.iteration == SPEC.iterations
    assert latest_checkpoint(tmp_path, "j") == last  # nothing written after it


def test_restore_refuses_undeclared_or_stateless_objects(tmp_path):
    hook = TrainingHook("j", SPEC, checkpoint_dir=tmp_path)
    model, optimizer, _ = _fresh_state()
    with pytest.raises(TypeError, match="sampler"):
        hook.restore(model, optimizer, sampler=object())
    _run(TrainingHook("k", SPEC, checkpoint_dir=tmp_path))
    mid = checkpoint_path(tmp_path, "k", 25)
    later = TrainingHook("k", SPEC, checkpoint_dir=tmp_path,
                         restore_from=CheckpointRef(str(mid), "", 25, 0))  # fmt: skip
    with pytest.raises(KeyError, match="epoch_counter"):
        later.restore(model, optimizer, epoch_counter={"n": 0})


def test_config_reaches_the_loop_and_reports_reach_the_store(tmp_path):
    with pytest.raises(JobSpecError, match="config"):
        parse_job({"name": "x", "iterations": 2, "config": [1, 2]})
    spec = parse_job({"name": "x", "iterations": 12, "batch_size": 8,
                      "config": {"lr_gamma": 0.1, "lr_step_every": 5}})  # fmt: skip
    hook = TrainingHook("x", spec, checkpoint_dir=tmp_path)
    assert hook.config == {"lr_gamma": 0.1, "lr_step_every": 5}
    train("x", spec, hook)
    final = load_checkpoint(latest_checkpoint(tmp_path, "x").path)
    assert final["optimizer"]["param_groups"][0]["lr"] == pytest.approx(spec.lr * 0.1**2)
    metrics = hook.status.metrics
    assert set(metrics) == {"loss", "lr"} and metrics["loss"] > 0
    store = JobStore(tmp_path / "state.db")
    store.add_job("x", spec.model_dump(), 0.0)
    store.update_job("x", metrics=metrics)
    assert store.job("x").metrics == metrics
    assert JobStore(tmp_path / "state.db").job("x").spec["config"]["lr_gamma"] == 0.1


def test_grad_shards_must_split_the_batch_and_the_workers():
    with pytest.raises(JobSpecError, match="grad_shards 4 cannot be split over 3"):
        parse_job({"name": "x", "iterations": 2, "batch_size": 12, "num_gpus": 3, "grad_shards": 4})
    with pytest.raises(JobSpecError, match="not divisible by grad_shards 5"):
        parse_job({"name": "x", "iterations": 2, "batch_size": 12, "grad_shards": 5})
    model = build_model(SPEC)
    with pytest.raises(ValueError, match="over 4 workers"):
        ShardedGradients(model, 2, rank=0, world_size=4, global_batch=16)


@settings(max_examples=20, deadline=None)
@given(shards=st.sampled_from([1, 2, 4, 8]), seed=st.integers(0, 1000))
def test_sharded_gradient_is_the_full_batch_gradient(shards, seed):
    """One worker: the shards' gradients added in order are the full batch's mean-loss
    gradient (to rounding; one shard: exactly), and the loss is its mean loss."""
    model = build_model(SPEC)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(16, SPEC.input_dim, generator=gen)
    y = torch.randint(0, SPEC.num_classes, (16,), generator=gen)

    def loss_of(xs, ys):
        return torch.nn.functional.cross_entropy(model(xs), ys)

    full = torch.autograd.grad(loss_of(x, y), list(model.parameters()))
    loss = ShardedGradients(model, shards, rank=0, world_size=1, global_batch=16).backward(
        loss_of, x, y
    )
    assert loss.item() == pytest.approx(loss_of(x, y).item(), rel=1e-5)
    for p, g in zip(model.parameters(), full, strict=True):
        if shards == 1:
            assert torch.equal(p.grad, g)
        else:
            assert torch.allclose(p.grad, g, rtol=1e-5, atol=1e-7)

"""Checkpoints, job specs, the state store and the hook, in-process (no Ray)."""

from __future__ import annotations

import threading

import pytest
import torch

from perfcast.scheduler.live.checkpoint import (
    CheckpointError,
    checkpoint_path,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from perfcast.scheduler.live.hook import TrainingHook
from perfcast.scheduler.live.spec import JobSpec, JobSpecError, load_job, parse_job
from perfcast.scheduler.live.store import JobStore, StoreError
from perfcast.scheduler.live.training import train

torch.set_num_threads(1)
SPEC = JobSpec(
    name="tiny", iterations=40, batch_size=16, checkpoint_every=10,
    config={"lr_step_every": 7, "lr_gamma": 0.5, "dataset_size": 100},
)  # fmt: skip


def final_state(ckpt_dir, job_id: str) -> dict:
    ref = latest_checkpoint(ckpt_dir, job_id)
    assert ref is not None
    return load_checkpoint(ref.path, ref.sha256)


def assert_same_parameters(a: dict, b: dict) -> None:
    assert a["iteration"] == b["iteration"]
    assert a["model"].keys() == b["model"].keys()
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key


def test_checkpoint_round_trip_and_no_temporary_files(tmp_path):
    state = {"iteration": 7, "w": torch.arange(5.0)}
    ref = save_checkpoint(tmp_path / "a.ckpt", state)
    loaded = load_checkpoint(ref.path, ref.sha256)
    assert loaded["iteration"] == 7 and torch.equal(loaded["w"], state["w"])
    assert [p.name for p in tmp_path.iterdir()] == ["a.ckpt"]


def test_corrupt_checkpoint_is_refused_and_skipped(tmp_path):
    for it in (10, 20):
        save_checkpoint(checkpoint_path(tmp_path, "j", it), {"iteration": it, "w": torch.ones(3)})
    newest = checkpoint_path(tmp_path, "j", 20)
    raw = bytearray(newest.read_bytes())
    raw[-5] ^= 0xFF
    newest.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="sha256"):
        load_checkpoint(newest)
    assert latest_checkpoint(tmp_path, "j").iteration == 10
    good = latest_checkpoint(tmp_path, "j")
    with pytest.raises(CheckpointError, match="not the expected"):
        load_checkpoint(good.path, "0" * 64)


def test_truncated_checkpoint_is_refused(tmp_path):
    ref = save_checkpoint(tmp_path / "b.ckpt", {"iteration": 1, "w": torch.ones(100)})
    data = (tmp_path / "b.ckpt").read_bytes()
    (tmp_path / "b.ckpt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError):
        load_checkpoint(ref.path)


def test_job_spec_errors_name_the_file_and_field(tmp_path):
    with pytest.raises(JobSpecError, match="num_gpus"):
        parse_job({"name": "x", "iterations": 5, "batch_size": 10, "num_gpus": 3})
    with pytest.raises(JobSpecError, match="iterations"):
        parse_job({"name": "x"}, "job.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(JobSpecError, match=r"bad\.yaml"):
        load_job(bad)
    with pytest.raises(JobSpecError, match="no such job file"):
        load_job(tmp_path / "missing.yaml")


def test_store_survives_reopening_and_refuses_duplicates(tmp_path):
    store = JobStore(tmp_path / "state.db")
    store.add_job("a", SPEC.model_dump(), 0.0)
    store.update_job("a", status="running", gpus=((0, 1),), workers=("w1",), attempt=1)
    with pytest.raises(StoreError, match="already exists"):
        store.add_job("a", SPEC.model_dump(), 0.0)
    with pytest.raises(StoreError, match="no job"):
        store.update_job("zzz", status="done")
    store.close()
    again = JobStore(tmp_path / "state.db")
    (record,) = again.jobs()
    assert (record.status, record.gpus, record.workers, record.attempt) == (
        "running", ((0, 1),), ("w1",), 1,
    )  # fmt: skip
    assert [e["kind"] for e in again.events("a")] == ["submit"]


def test_hook_suspend_resume_and_exit_restore_are_lossless(tmp_path):
    train("ref", SPEC, TrainingHook("ref", SPEC, checkpoint_dir=tmp_path))
    reference = final_state(tmp_path, "ref")
    assert reference["iteration"] == SPEC.iterations

    # suspend from another thread, resume, then exit mid-run and restore in a new loop
    hook = TrainingHook("job", SPEC, checkpoint_dir=tmp_path)
    runner = threading.Thread(target=train, args=("job", SPEC, hook))
    runner.start()
    assert hook.request_suspend(timeout_s=30)
    paused_at = hook.status.iteration
    assert hook.status.suspended and 0 < paused_at < SPEC.iterations
    hook.request_exit("migrate")  # exit while suspended: checkpoint at the same iteration
    runner.join(30)
    assert hook.status.exit_reason == "migrate" and hook.status.iteration == paused_at
    ref = hook.status.last_checkpoint
    assert ref["iteration"] == paused_at

    from perfcast.scheduler.live.checkpoint import CheckpointRef

    second = TrainingHook("job", SPEC, checkpoint_dir=tmp_path, restore_from=CheckpointRef(**ref))
    train("job", SPEC, second)
    assert second.status.exit_reason == "finished"
    assert_same_parameters(final_state(tmp_path, "job"), reference)

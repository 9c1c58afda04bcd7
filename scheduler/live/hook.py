"""The job-side API: what a training loop calls at each mini-batch boundary.

    hook = ...                                   # given to the loop by its worker
    settings = hook.config                       # the job spec's `config` mapping
    sampler = ResumableBatchSampler(len(data), hook)          # shuffles, resumes mid-epoch
    loader = DataLoader(data, batch_sampler=sampler, generator=torch.Generator())
    start = hook.restore(model, optimizer, lr_scheduler=sched, rng=RngState(spec.seed))
    for x, y in loader:                          # endless: the hook says when to stop
        train_one_batch(x, y); sched.step()
        hook.report(loss=loss.item())            # shown by `perfcast jobs`
        if not hook.step():                      # checkpoint, obey the scheduler
            break                                # done, or migrate / resize / stop: state saved

`restore` takes the model, the optimizer and any other objects with `state_dict` /
`load_state_dict` (LR scheduler, RNG, a user's counters as a plain dict): all of them are saved
in every checkpoint and loaded on restore, so a resumed run continues the uninterrupted one.
Like Gandiva's and AdaptDL's hooks, `step` measures the time of each mini-batch (the
introspection the scheduler and the predictors read) and is the only place the scheduler acts:
- suspend: the loop blocks inside `step` (on CUDA with one worker the model and optimizer are
  moved to host memory so the GPU is free) until `resume`;
- exit (migrate, resize, stop): rank 0 writes a checkpoint at this iteration and `step`
  returns False; new workers `restore` it on their node, at their size. For a migration the
  state is first handed to the new workers in memory (`publish`, through Ray's object store);
  once they have it (`handoff_taken`), rank 0 writes the durable checkpoint.
Periodic checkpoints every `checkpoint_every` iterations bound the work a crash can lose.
With several data-parallel workers, rank 0's pending command is broadcast at every boundary so
all ranks act on the same iteration. When the scheduler runs the job at another global batch
than the spec's, the learning rates (optimizer and LR schedulers alike) are scaled by the ratio
of the new batch to the one they were saved at (linear scaling rule), never reset.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn

from perfcast.scheduler.live.checkpoint import (
    CheckpointRef,
    checkpoint_path,
    load_checkpoint,
    save_checkpoint,
)
from perfcast.scheduler.live.device import collective_device
from perfcast.scheduler.live.spec import JobSpec

_KEEP_CHECKPOINTS = 2
_HAND_OVER_TIMEOUT_S = 120.0


class LaunchCancelled(RuntimeError):
    """A worker started ahead of a migration whose old workers finished or failed instead."""


class AlreadyFinished(Exception):
    """The restored checkpoint is the job's last: there is nothing left to train (it finished
    while no scheduler recorded it). The worker reports the job finished."""


class Command(IntEnum):
    NONE = 0
    SUSPEND = 1
    EXIT = 2


@dataclass
class HookStatus:
    """What the executor reads while the job runs."""

    iteration: int = 0
    samples_done: int = 0
    steps_measured: int = 0
    last_step_time_s: float | None = None
    mean_step_time_s: float | None = None
    suspended: bool = False
    exit_reason: str | None = None
    restored_unix: float | None = None  # when `restore` returned: the loop is ready to train
    ended_unix: float | None = None  # when `step` told the loop to leave
    last_checkpoint: dict[str, Any] | None = None
    metrics: dict[str, float] | None = None  # the latest `report`

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any], /) -> Any: ...


class TrainingHook:
    def __init__(
        self,
        job_id: str,
        spec: JobSpec,
        *,
        rank: int = 0,
        world_size: int = 1,
        global_batch: int | None = None,
        device: torch.device | str = "cpu",
        checkpoint_dir: str | Path,
        restore_from: CheckpointRef | None = None,
        restore_pending: bool = False,
    ) -> None:
        self.job_id, self.spec = job_id, spec
        self.rank, self.world_size = rank, world_size
        self.global_batch = global_batch or spec.batch_size
        if self.global_batch % world_size:
            raise ValueError(f"global batch {self.global_batch} not divisible by {world_size}")
        self.device = torch.device(device)
        self.checkpoint_dir = Path(checkpoint_dir)
        self.restore_from = restore_from
        # A migration starts the new workers while the old ones still checkpoint: `restore`
        # then waits for `hand_over` to say which checkpoint (or that the move is off).
        self._handed_over = threading.Event()
        self._cancelled = False
        self._handed_state: dict[str, Any] | None = None  # given in memory, not by file
        # Set by the worker: publishes rank 0's state at an exit boundary for a migration
        # (`request_exit(handoff=True)`) and returns what the new workers fetch it by.
        self.publish: Callable[[dict[str, Any]], Any] | None = None
        self._handoff_wanted = False
        self._handoff: Any = None
        self._handoff_ready = threading.Event()  # published, or the loop ended without
        self._handoff_taken = threading.Event()  # the new workers have the state
        if not restore_pending:
            self._handed_over.set()
        self.status = HookStatus()
        self._model: nn.Module | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._objects: dict[str, Stateful | dict[str, Any]] = {}
        # Control state, guarded by one condition. Suspensions and resumes are counted, so a
        # resume always matches the suspension it ends (no stale "suspended" flag).
        self._cond = threading.Condition()
        self._pending = Command.NONE
        self._pending_reason: str | None = None
        self._suspensions = 0  # times the loop has suspended
        self._resumes = 0  # suspensions ended so far
        self._ended = False
        self._release_device = True
        self._last_boundary: float | None = None

    # ---- job side -------------------------------------------------------------------------
    @property
    def config(self) -> Mapping[str, Any]:
        """The job's settings: the spec's `config` mapping."""
        return self.spec.config

    def restore(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        **objects: Stateful | dict[str, Any],
    ) -> int:
        """Declare the job's state and load the assigned checkpoint (if any) into it: the
        model, the optimizer and each of `objects` (anything with `state_dict` and
        `load_state_dict`, or a plain dict, updated in place). Scales the learning rates to
        this run's global batch; returns the iteration to start from."""
        for name, obj in objects.items():
            if not isinstance(obj, dict) and not (
                hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")
            ):
                raise TypeError(f"restore({name}=...): {type(obj).__name__} has no state_dict")
        self._model, self._optimizer, self._objects = model, optimizer, dict(objects)
        if not self._handed_over.wait(_HAND_OVER_TIMEOUT_S):
            raise RuntimeError(f"no checkpoint handed over in {_HAND_OVER_TIMEOUT_S:.0f} s")
        if self._cancelled:
            raise LaunchCancelled(f"job {self.job_id}: the move was called off")
        start = samples = 0
        saved_batch = self.spec.batch_size  # the learning rates in the user's code are for it
        state, where = self._handed_state, "the state handed over"
        self._handed_state = None
        if state is None and self.restore_from is not None:
            where = f"checkpoint {self.restore_from.path}"
            state = load_checkpoint(
                self.restore_from.path, self.restore_from.sha256, map_location=str(self.device)
            )
        if state is not None:
            _unwrap(model).load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            missing = set(objects) - set(state.get("objects", {}))
            if missing:
                raise KeyError(f"{where} has no {sorted(missing)}")
            for name, obj in objects.items():
                _load_into(obj, state["objects"][name])
            start, samples = int(state["iteration"]), int(state["samples_done"])
            saved_batch = int(state.get("global_batch", saved_batch))
            self.status.iteration, self.status.samples_done = start, samples
            if samples >= self.spec.total_samples:  # one more step would overshoot the job
                self.status.exit_reason = "finished"
                self.status.ended_unix = time.time()
                raise AlreadyFinished(f"job {self.job_id} finished at iteration {start}")
        if self.global_batch != saved_batch:
            _scale_lr(optimizer, objects.values(), self.global_batch / saved_batch)
        self.status.iteration, self.status.samples_done = start, samples
        self.status.restored_unix = time.time()
        self._last_boundary = time.perf_counter()
        return start

    def report(self, **metrics: float) -> None:
        """Record the job's latest metrics (loss, accuracy, ...): `perfcast jobs` shows them."""
        self.status.metrics = {k: float(v) for k, v in metrics.items()}

    def step(self, iteration: int | None = None) -> bool:
        """Mini-batch boundary after `iteration` batches (default: one more than the last).
        False means: leave the loop now."""
        iteration = self.status.iteration + 1 if iteration is None else iteration
        now = time.perf_counter()
        if self._last_boundary is not None:
            elapsed = now - self._last_boundary
            if elapsed < self.spec.min_step_time_s:
                time.sleep(self.spec.min_step_time_s - elapsed)
                elapsed = self.spec.min_step_time_s
            self._record_step_time(elapsed)
        self.status.iteration = iteration
        self.status.samples_done += self.global_batch
        finished = self.status.samples_done >= self.spec.total_samples
        command = self._agree_on_command()
        while command is Command.SUSPEND and not finished:  # a finished job just ends
            self._suspend_here()
            command = self._agree_on_command()  # resumed, or asked to exit while suspended
        if command is Command.EXIT or finished:
            state = self._state(iteration)
            published = self._handoff_wanted and not finished and state and self.publish
            if published:
                self._handoff = self.publish(state)
            self._handoff_ready.set()
            if published:  # the durable file waits: the new workers' restore goes first
                self._handoff_taken.wait(_HAND_OVER_TIMEOUT_S)
            self._checkpoint(iteration, state)  # durable, for crashes
            self.status.exit_reason = "finished" if finished else self._pending_reason
            self.status.ended_unix = time.time()
            self.mark_ended()
            return False
        if iteration % self.spec.checkpoint_every == 0:
            self._checkpoint(iteration, self._state(iteration))
        self._last_boundary = time.perf_counter()
        return True

    # ---- control side (called from the worker's other threads) ----------------------------
    def hand_over(
        self,
        restore_from: CheckpointRef | None,
        cancel: bool = False,
        state: dict[str, Any] | None = None,
    ) -> None:
        """What a pending `restore` loads: the `state` the old workers handed over in memory,
        else the checkpoint `restore_from` (None: start from scratch); or, with `cancel`,
        that it must give up (the old workers finished or failed instead)."""
        self.restore_from, self._cancelled, self._handed_state = restore_from, cancel, state
        self._handed_over.set()

    def handoff(self, timeout_s: float) -> Any:
        """What rank 0 published at its exit boundary (`publish`'s answer); None if the loop
        ended without publishing (it finished, failed, or was not asked to hand off)."""
        self._handoff_ready.wait(timeout_s)
        return self._handoff

    def handoff_taken(self) -> None:
        """The new workers have the published state: rank 0 may write its checkpoint."""
        self._handoff_taken.set()

    def request_suspend(self, timeout_s: float = 60.0, release_device: bool = True) -> bool:
        """Ask the loop to suspend at its next boundary and wait until it has. False if the
        loop ended (or did not reach a boundary in time) first. `release_device=False` keeps
        the state on the GPU (time-slicing between jobs that both fit in its memory)."""
        with self._cond:
            if self._suspensions > self._resumes:  # suspended and not yet told to resume
                return True
            target = self._suspensions + 1
            self._pending = Command.SUSPEND
            self._release_device = release_device
            self._cond.wait_for(lambda: self._suspensions >= target or self._ended, timeout_s)
            return self._suspensions >= target

    def resume(self) -> None:
        """End the current suspension (or cancel one not yet reached)."""
        with self._cond:
            if self._pending is Command.SUSPEND:
                self._pending = Command.NONE
            self._resumes = self._suspensions
            # said here, not when the parked loop wakes: a status read right after `resume`
            # returns must not still say suspended (the executor's bookkeeping already does not)
            self.status.suspended = False
            self._cond.notify_all()

    def request_exit(self, reason: str, handoff: bool = False) -> None:
        """Checkpoint and leave the loop at the next boundary (migrate, resize, stop); a
        suspended loop wakes up to do it. With `handoff`, rank 0 also publishes its state
        for the new workers before writing the checkpoint."""
        with self._cond:
            self._pending, self._pending_reason = Command.EXIT, reason
            self._handoff_wanted = handoff
            self._resumes = self._suspensions
            self._cond.notify_all()

    def mark_ended(self) -> None:
        """Called by the worker when the loop function returned, however it returned."""
        with self._cond:
            self._ended = True
            self._cond.notify_all()
        self._handoff_ready.set()

    # ---- internals ------------------------------------------------------------------------
    def _record_step_time(self, elapsed: float) -> None:
        s = self.status
        s.last_step_time_s = elapsed
        s.steps_measured += 1
        mean = s.mean_step_time_s or 0.0
        s.mean_step_time_s = mean + (elapsed - mean) / s.steps_measured

    def _agree_on_command(self) -> Command:
        with self._cond:
            local, self._pending = self._pending, Command.NONE
        if self.world_size == 1:
            return local
        device = collective_device(dist.get_backend(), self.device)  # NCCL: CUDA tensors only
        code = torch.tensor([int(local)], dtype=torch.int64, device=device)
        dist.broadcast(code, src=0)  # every rank acts on rank 0's command, at this iteration
        if int(code.item()) == Command.EXIT and self._pending_reason is None:
            self._pending_reason = "exit requested by rank 0"
        return Command(int(code.item()))

    def _suspend_here(self) -> None:
        offload = self._release_device and self.device.type == "cuda" and self.world_size == 1
        if offload:  # release the device: keep the state in host memory while suspended
            self._move_state(torch.device("cpu"))
            torch.cuda.empty_cache()
        with self._cond:
            self._suspensions += 1
            mine = self._suspensions
            self.status.suspended = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._resumes >= mine)
            self.status.suspended = False
        if offload:
            self._move_state(self.device)

    def _move_state(self, device: torch.device) -> None:
        assert self._model is not None and self._optimizer is not None
        self._model.to(device)
        for per_param in self._optimizer.state.values():
            for key, value in per_param.items():
                if isinstance(value, torch.Tensor):
                    per_param[key] = value.to(device)

    def _state(self, iteration: int) -> dict[str, Any] | None:
        """Rank 0's whole training state at this boundary (other ranks: None)."""
        if self.rank != 0 or self._model is None or self._optimizer is None:
            return None
        return {
            "iteration": iteration,
            "samples_done": self.status.samples_done,
            "model": _unwrap(self._model).state_dict(),
            "optimizer": self._optimizer.state_dict(),
            "global_batch": self.global_batch,
            "objects": {name: _state_of(obj) for name, obj in self._objects.items()},
        }

    def _checkpoint(self, iteration: int, state: dict[str, Any] | None) -> None:
        if state is None:
            return
        ref = save_checkpoint(checkpoint_path(self.checkpoint_dir, self.job_id, iteration), state)
        self.status.last_checkpoint = asdict(ref)
        self._prune(keep=ref.path)

    def _prune(self, keep: str) -> None:
        files = sorted((self.checkpoint_dir / self.job_id).glob("it*.ckpt"))
        for old in files[:-_KEEP_CHECKPOINTS]:
            if str(old) != keep:
                old.unlink(missing_ok=True)


def _state_of(obj: Stateful | dict[str, Any]) -> dict[str, Any]:
    return dict(obj) if isinstance(obj, dict) else obj.state_dict()


def _load_into(obj: Stateful | dict[str, Any], state: dict[str, Any]) -> None:
    if isinstance(obj, dict):
        obj.clear()
        obj.update(state)
    else:
        obj.load_state_dict(state)


def _scale_lr(optimizer: torch.optim.Optimizer, objects: Any, factor: float) -> None:
    """Multiply every learning rate by `factor`: the optimizer's groups (current and initial)
    and those LR schedulers compute from, so a schedule continues at the new scale."""
    for group in optimizer.param_groups:
        group["lr"] *= factor
        if "initial_lr" in group:
            group["initial_lr"] *= factor
    for obj in objects:
        if isinstance(obj, torch.optim.lr_scheduler.LRScheduler):
            obj.base_lrs = [lr * factor for lr in obj.base_lrs]
            obj._last_lr = [lr * factor for lr in obj.get_last_lr()]  # what get_last_lr says


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model

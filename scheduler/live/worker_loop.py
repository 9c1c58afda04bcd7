"""The training side of a worker process: torch set-up, the job's process group, its
`TrainingHook` and its entrypoint. Imported by `TrainingWorker` inside the worker's own process,
so the scheduler process that creates workers (and imports `worker.py` for the actor class)
never loads torch."""

from __future__ import annotations

import datetime
import importlib
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ray
import torch
import torch.distributed as dist

from perfcast.scheduler.live.checkpoint import CheckpointRef
from perfcast.scheduler.live.device import backend_for, bind, worker_device
from perfcast.scheduler.live.handoff import pack, unpack
from perfcast.scheduler.live.hook import AlreadyFinished, HookStatus, TrainingHook
from perfcast.scheduler.live.spec import JobSpec

if TYPE_CHECKING:
    from perfcast.scheduler.live.worker import Assignment

PROCESS_GROUP_TIMEOUT = datetime.timedelta(seconds=60)

__all__ = ["idle_status", "prepare", "run", "unpack"]


def prepare(threads: int) -> None:
    """Set the process's torch threads and pay first-use costs now, while the worker is a
    spare: the optimizer's first construction imports about a second's worth of modules."""
    torch.set_num_threads(threads)
    importlib.import_module(JobSpec.model_fields["entrypoint"].default.split(":")[0])
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()


def idle_status() -> dict[str, Any]:
    """A worker's hook status before any loop ran."""
    return HookStatus().as_dict()


def run(a: Assignment, on_hook: Callable[[TrainingHook], None]) -> dict[str, Any]:
    """Run assignment `a` to its end in this thread and return its outcome; `on_hook` gets the
    loop's hook as soon as the process group is up (the worker answers calls through it)."""
    spec = JobSpec.model_validate(a.spec)
    outcome: dict[str, Any] = {"job_id": a.job_id, "attempt": a.attempt, "rank": a.rank}
    hook: TrainingHook | None = None
    try:
        device = worker_device(spec.device, a.gpu_index, torch.cuda.device_count())
        bind(device)  # one process per GPU: its collectives and allocations go there
        if a.world_size > 1:
            dist.init_process_group(
                backend_for(device),
                init_method=f"tcp://{a.master_addr}:{a.master_port}",
                rank=a.rank,
                world_size=a.world_size,
                timeout=PROCESS_GROUP_TIMEOUT,
            )
        restore = CheckpointRef(**a.restore_from) if a.restore_from else None
        hook = TrainingHook(
            a.job_id,
            spec,
            rank=a.rank,
            world_size=a.world_size,
            global_batch=a.global_batch,
            device=device,
            checkpoint_dir=a.checkpoint_dir,
            restore_from=restore,
            restore_pending=a.restore_pending,
        )
        hook.publish = lambda state: [ray.put(pack(state))]  # owned by this worker
        on_hook(hook)
        module_name, func_name = spec.entrypoint.split(":")
        getattr(importlib.import_module(module_name), func_name)(a.job_id, spec, hook)
        finished = hook.status.samples_done >= spec.total_samples
        outcome |= {
            "status": "finished" if finished else "exited",
            "reason": hook.status.exit_reason or "loop returned",
        }
    except AlreadyFinished:
        outcome |= {"status": "finished", "reason": "finished"}
    except Exception:
        outcome |= {"status": "failed", "reason": traceback.format_exc(limit=5)}
    finally:
        if hook:
            hook.mark_ended()
            outcome |= hook.status.as_dict()
        if dist.is_initialized():
            dist.destroy_process_group()
    return outcome

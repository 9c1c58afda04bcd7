"""What a live job is: the model to train, for how long, at what size. Read from JOB.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from perfcast.errors import PerfcastError
from perfcast.files import read_text


class JobSpecError(PerfcastError):
    """A job description (YAML or dict) is invalid; the message names the file and field."""


def check_shards(shards: int, global_batch: int, world_size: int) -> None:
    """Refuse a size `grad_shards` cannot be split over: every worker holds whole shards of
    equal size (see `shards.ShardedGradients`)."""
    if global_batch % shards:
        raise ValueError(f"global batch {global_batch} is not divisible by grad_shards {shards}")
    if shards % world_size:
        raise ValueError(f"grad_shards {shards} cannot be split over {world_size} workers")


class JobSpec(BaseModel):
    """A training job: `iterations` mini-batches of global `batch_size` at `num_gpus` workers,
    that is `total_samples` samples; `lr` is the learning rate at that batch. The scheduler
    may run it at another size and batch: the work stays `total_samples` and the learning
    rates follow the linear scaling rule (see `TrainingHook.restore`). The job ends at the
    first mini-batch boundary with `total_samples` done, so at a batch that does not divide
    what was left it trains up to one global batch more (batches are never cut short)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    model: Literal["mlp", "cnn"] = "mlp"
    width: int = Field(default=64, ge=1, description="hidden width (mlp) or channels (cnn)")
    depth: int = Field(default=2, ge=1, description="hidden layers")
    input_dim: int = Field(default=32, ge=1)
    num_classes: int = Field(default=10, ge=2)
    iterations: int = Field(ge=1, description="mini-batches to train in total")
    batch_size: int = Field(default=32, ge=1)
    lr: float = Field(default=0.05, gt=0)
    momentum: float = Field(default=0.9, ge=0, lt=1)
    num_gpus: int = Field(default=1, ge=1, description="data-parallel workers requested")
    min_gpus: int | None = Field(
        default=None, ge=1, description="fewest workers an elastic policy may shrink it to (1)"
    )
    max_gpus: int | None = Field(
        default=None, ge=1, description="most workers an elastic policy may grow it to (num_gpus)"
    )
    device: Literal["cpu", "cuda"] = Field(
        default="cpu", description="where each worker trains; cuda: refused where absent"
    )
    seed: int = 0
    checkpoint_every: int = Field(default=50, ge=1, description="iterations between checkpoints")
    min_step_time_s: float = Field(
        default=0.0, ge=0, description="pad each step to at least this long (trace replay)"
    )
    submit_time_s: float = Field(default=0.0, ge=0)
    max_restarts: int = Field(
        default=3, ge=0, description="restarts after failures with no checkpoint in between"
    )
    restart_backoff_s: float = Field(
        default=1.0, ge=0, description="wait before the first restart; doubles each time"
    )
    grad_shards: int | None = Field(
        default=None,
        ge=1,
        description="micro-shards of the global batch whose gradients are added in a fixed "
        "order: bit-identical at any worker count (resize keeping the batch); None: plain DDP",
    )
    config: dict[str, Any] = Field(
        default_factory=dict, description="the job's own settings, given to its loop as hook.config"
    )
    entrypoint: str = Field(
        default="perfcast.scheduler.live.training:train",
        pattern=r"^[\w.]+:\w+$",
        description="the training loop, `module:function(job_id, spec, hook)`",
    )

    @model_validator(mode="after")
    def _batch_divides(self) -> JobSpec:
        if self.batch_size % self.num_gpus:
            raise ValueError(
                f"batch_size {self.batch_size} is not divisible by num_gpus {self.num_gpus}"
            )
        if self.grad_shards is not None:
            check_shards(self.grad_shards, self.batch_size, self.num_gpus)
        low, high = self.min_gpus or 1, self.max_gpus or self.num_gpus
        if not low <= self.num_gpus <= high:
            raise ValueError(
                f"num_gpus {self.num_gpus} is not between min_gpus {low} and max_gpus {high}"
            )
        return self

    @property
    def total_samples(self) -> int:
        return self.iterations * self.batch_size


def parse_job(data: object, source: str = "<job>") -> JobSpec:
    """Validate a job description, raising `JobSpecError` naming `source` and the field."""
    if not isinstance(data, dict):
        raise JobSpecError(
            f"{source}: a job must be a mapping of fields, got {type(data).__name__}"
        )
    try:
        return JobSpec.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'job'}: {e['msg']}" for e in err.errors()
        )
        raise JobSpecError(f"{source}: {problems}") from None


def load_job(path: str | Path) -> JobSpec:
    """Read a JOB.yaml file."""
    path = Path(path)
    if not path.is_file():
        raise JobSpecError(f"{path}: no such job file")
    try:
        data = yaml.safe_load(read_text(path))
    except yaml.YAMLError as err:
        raise JobSpecError(f"{path}: not valid YAML: {err}") from None
    return parse_job(data, str(path))

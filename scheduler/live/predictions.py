"""Predictions for the live scheduler: `--predictor NAME` becomes a `JobPredictor`.

A live job is predicted from what its spec carries: the job name in the contract rows is the
spec's `model` (`mlp`, `cnn`), its size and batch are the placement's, and the GPU type is the
node's (Ray's `accelerator_type`, else `--gpu-type`, else `logical`). None of these are in the
public training data, so the predictors answer with their out-of-distribution figures and
flags: the policies use the p50 and the interval width, which is what they get.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfcast.errors import PerfcastError

if TYPE_CHECKING:  # pandas and the predictors load when a run needs them, not for `--help`
    import pandas as pd

    from perfcast.predictor.backend import PredictionBackend, Task
    from perfcast.scheduler.core.loop import SchedulingPolicy
    from perfcast.scheduler.core.predictions import JobPredictor

LIVE_PREDICTORS = ("inprocess", "http", "none")
LOGICAL_GPU = "logical"  # the type of a node whose Ray resources name no accelerator

# policies that decide without predictions and use them when given (gandiva time-slices, and
# packs only with interference predictions)
DECIDE_WITHOUT_PREDICTIONS = frozenset({"gandiva"})

PREDICTOR_HELP = (
    "prediction backend of the policy: inprocess (the registered champion models, one trained "
    "first where there is none: minutes), http (the service at --predictor-url) or none. "
    "Default: inprocess for a policy that cannot decide without predictions (elastic, "
    "srtf-predicted, hypersched), which would otherwise not run at all; none for the "
    "others (gandiva then time-slices and never packs). oracle has no true values live."
)


class PredictorChoiceError(PerfcastError):
    """A --predictor the live scheduler cannot use, or a policy left without predictions."""


class LiveRowsBackend:
    """A backend whose rows get `gpu_type` in place of `logical`: on a cluster of logical
    GPUs (CPU workers) the predictions are asked for the GPU type the user names."""

    def __init__(self, backend: PredictionBackend, gpu_type: str | None) -> None:
        self.backend, self.gpu_type = backend, gpu_type

    def predict(self, task: Task, rows: pd.DataFrame) -> pd.DataFrame:
        if self.gpu_type and "gpu_type" in rows:
            rows = rows.assign(gpu_type=rows["gpu_type"].replace(LOGICAL_GPU, self.gpu_type))
        return self.backend.predict(task, rows)


def needs_predictor(policy: SchedulingPolicy) -> bool:
    """Whether `policy` cannot decide at all without predictions."""
    name = getattr(policy, "name", type(policy).__name__)
    return bool(getattr(policy, "needs_predictions", False)) and (
        name not in DECIDE_WITHOUT_PREDICTIONS
    )


def choose_predictor(policy: SchedulingPolicy, predictor: str | None) -> str | None:
    """The backend name a run uses: the one given, else the default for `policy` (see
    `PREDICTOR_HELP`). None: no predictions. Refuses `oracle`, unknown names, and `none` for a
    policy that needs predictions, naming the option."""
    name = getattr(policy, "name", type(policy).__name__)
    if predictor == "oracle":
        raise PredictorChoiceError(
            "--predictor oracle: a live job has no true step times to give the policy; "
            "use --predictor inprocess or http"
        )
    if predictor is not None and predictor not in LIVE_PREDICTORS:
        raise PredictorChoiceError(
            f"unknown --predictor {predictor!r}; choose one of {', '.join(LIVE_PREDICTORS)}"
        )
    if predictor == "none" and needs_predictor(policy):
        raise PredictorChoiceError(
            f"policy {name!r} needs predictions: give --predictor inprocess or http"
        )
    if predictor is None:
        return "inprocess" if needs_predictor(policy) else None
    return None if predictor == "none" else predictor


def prepare_predictor(policy: SchedulingPolicy, backend: str | None, echo=print) -> None:
    """Before a service starts: train the champions an `inprocess` run lacks (minutes), so the
    service's first round does not wait for them."""
    if backend == "inprocess":
        from perfcast.training.trainer import ensure_champions

        ensure_champions(list(getattr(policy, "prediction_tasks", ())), echo=echo)


def live_predictor(
    inner: PredictionBackend | None, *, gpu_type: str | None, gpus_per_node: int
) -> JobPredictor | None:
    """The `JobPredictor` of a live run over backend `inner` (None: no predictions); the
    command line builds `inner` from the `--predictor` name."""
    if inner is None:
        return None
    from perfcast.scheduler.core.predictions import JobPredictor

    return JobPredictor(LiveRowsBackend(inner, gpu_type), gpus_per_node=gpus_per_node)

"""The scheduler core: cluster and job state, decisions, the three-step loop and the executor
protocol. Simulated and real clusters share all of it; only the executor differs."""

from scheduler.core.cluster import ClusterSpec, ClusterState, GpuSlot, NodeGroup
from scheduler.core.decisions import Decision, Migrate, Resize, Run, Suspend
from scheduler.core.executor import Executor
from scheduler.core.jobs import Job, JobState, JobStatus, JobTable
from scheduler.core.loop import (
    AdmissionControl,
    Allocation,
    JobPlacement,
    RoundContext,
    Schedule,
    SchedulingLoop,
    SchedulingPolicy,
)

__all__ = [
    "AdmissionControl",
    "Allocation",
    "ClusterSpec",
    "ClusterState",
    "Decision",
    "Executor",
    "GpuSlot",
    "Job",
    "JobPlacement",
    "JobState",
    "JobStatus",
    "JobTable",
    "Migrate",
    "NodeGroup",
    "Resize",
    "RoundContext",
    "Run",
    "Schedule",
    "SchedulingLoop",
    "SchedulingPolicy",
    "Suspend",
]

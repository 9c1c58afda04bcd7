"""The scheduler core: cluster and job state, decisions, the three-step loop and the executor
protocol. Simulated and real clusters share all of it; only the executor differs."""

from perfcast.scheduler.core.cluster import ClusterSpec, ClusterState, GpuSlot, NodeGroup
from perfcast.scheduler.core.decisions import Decision, Migrate, Resize, Run, Suspend
from perfcast.scheduler.core.executor import Executor
from perfcast.scheduler.core.jobs import Job, JobState, JobStatus, JobTable
from perfcast.scheduler.core.loop import (
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

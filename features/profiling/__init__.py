"""Profilers that measure real jobs and write what they measure in the data contract: training
steps (time, memory, counters), co-located pairs, operator DAGs and SQL query plans."""

from perfcast.features.profiling.step_profiler import StepProfile, profile_step

__all__ = ["StepProfile", "profile_step"]

"""What preemption, migration, resizing and time-slicing cost, from published measurements.

- `restart_s` = 50 s: resuming a preempted job by checkpoint-restart. Salus measured 10-100 s
  for checkpoint-restart; Gandiva reports its migration (under 1 s) as about 50x faster than
  stop-and-restart, which puts a restart at about 50 s.
- `migrate_s` = 1 s: Gandiva's migration, under a second including multi-GPU jobs.
- `resize_s` = 50 s: growing or shrinking a job by checkpoint-restart with a new worker count.
- `timeslice_overhead` = 0.02: Gandiva's time-slicing overhead (under 2%).
- `start_s` = 0 s: a job's first start is free by default; the Pollux artifact's simulator
  charges every (re)allocation, the first one included, 30 s (`Job.reallocate`).
The GPUs stay held (and counted) while a job pays these; it makes no progress meanwhile.

`DEFAULT_MIN_RUN_S`, the minimum quantum that pays for them: a job runs at least 60 s after
each (re)start before a policy may preempt it (`SchedulingLoop.min_run_s`), so its preemptions
are at most its time held / 60 s and no policy can make it thrash. As long as the Pollux
artifact's 60 s rounds, so a run in rounds of 60 s or more never meets it.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MIN_RUN_S = 60.0


@dataclass(frozen=True, slots=True)
class Costs:
    restart_s: float = 50.0
    migrate_s: float = 1.0
    resize_s: float = 50.0
    timeslice_overhead: float = 0.02
    start_s: float = 0.0

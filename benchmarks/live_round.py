"""How long the live scheduler takes to decide one round on a large cluster: 5,000 jobs on
1250x8 V100 = 10,000 GPUs, each policy. Writes section `live-round` of docs/BENCHMARKS.md.

    .venv/bin/python -m benchmarks.live_round [--jobs 5000] [--rounds 30]

The live runner (`scheduler/live/runner.py`) decides each round with the scheduler core's
`SchedulingLoop` (the operator's holds around the policy, then placement) and hands the
decisions to Ray; this benchmark runs that same loop with an executor that only records the
decisions, so the time is the decision's alone, not Ray's. Jobs are the first Philly jobs
(Pollux's `philly.csv`, measured job types drawn as the simulator draws them), all submitted at
once; the first round places the queue, then each round follows 1% of the running jobs
finishing and as many new jobs arriving. Oracle predictions for the policies that need them.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Sequence

import pandas as pd

from benchmarks.report import markdown, write_section
from perfcast.scheduler.core.cluster import ClusterSpec, ClusterState
from perfcast.scheduler.core.decisions import Decision
from perfcast.scheduler.core.jobs import JobTable
from perfcast.scheduler.core.loop import SchedulingLoop
from perfcast.scheduler.core.predictions import JobPredictor
from perfcast.scheduler.live.runner import OperatorHolds
from perfcast.scheduler.policies import make_policy
from perfcast.scheduler.sim.run import oracle_backend, prepare_workload

CLUSTER = "1250x8:v100"
POLICIES = ("fifo", "tiresias", "srtf-predicted", "gandiva", "elastic", "pollux")


class RecordingExecutor:
    """Takes the decisions and does nothing with them (Ray's part is not timed here)."""

    def __init__(self) -> None:
        self.decisions = 0

    def apply(self, decisions: Sequence[Decision], jobs: JobTable, now: float) -> None:
        self.decisions += len(decisions)


def round_times(policy_name: str, num_jobs: int, rounds: int) -> dict[str, object]:
    spec = ClusterSpec.parse(CLUSTER)
    workload = prepare_workload("pollux-philly", spec, max_jobs=2 * num_jobs)
    first, rest = workload.jobs[:num_jobs], workload.jobs[num_jobs:]
    policy = make_policy(policy_name)
    policy.configure(workload)
    predictor = None
    if policy.needs_predictions:
        predictor = JobPredictor(oracle_backend(workload), spec.groups[0].gpus_per_node)
    executor = RecordingExecutor()
    loop = SchedulingLoop(ClusterState(spec), OperatorHolds(policy, ()), executor,
                          predictor=predictor)  # fmt: skip
    pick = random.Random(0)
    loop.submit(first, 0.0)
    start = time.perf_counter()
    loop.round(0.0)
    first_round = time.perf_counter() - start
    times = []
    for i in range(1, rounds + 1):
        now = 60.0 * i
        running = sorted(s.job_id for s in loop.jobs.running())
        turnover = max(1, len(running) // 100)  # 1% finish, as many arrive
        for job_id in pick.sample(running, turnover):
            loop.job_finished(job_id, now)
        arriving, rest = rest[:turnover], rest[turnover:]
        loop.submit(arriving, now)  # new arrivals, due from this round
        start = time.perf_counter()
        loop.round(now)
        times.append(time.perf_counter() - start)
    return {
        "policy": policy_name,
        "jobs": num_jobs,
        "running at the end": loop.jobs.num_running,
        "waiting": loop.jobs.num_waiting,
        "first round (ms)": 1000 * first_round,
        "steady round, median (ms)": 1000 * statistics.median(times),
        "steady round, max (ms)": 1000 * max(times),
        "decisions": executor.decisions,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=5000, help="jobs submitted at once")
    parser.add_argument("--rounds", type=int, default=30, help="steady rounds timed")
    args = parser.parse_args()
    rows = []
    for name in POLICIES:
        rows.append(round_times(name, args.jobs, args.rounds))
        print(rows[-1], flush=True)
    body = f"""
### Round decision time: {args.jobs:,} jobs on {CLUSTER} = 10,000 GPUs

{__doc__.split(chr(10) + chr(10), 2)[2].strip()}

Wall time of `SchedulingLoop.round` (policy, operator holds, placement), one process on a machine
shared with other work; {args.rounds} steady rounds after the first.

{markdown(pd.DataFrame(rows), 1)}
"""
    command = ".venv/bin/python -m benchmarks.live_round"
    if (args.jobs, args.rounds) != (5000, 30):
        command += f" --jobs {args.jobs} --rounds {args.rounds}"
    path = write_section("live-round", "Live scheduler: round decision time", command, body)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

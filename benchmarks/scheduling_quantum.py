"""What the simulator's minimum quantum (issue 38) costs and saves: average JCT, preemptions
and CPU time with `min_run_s` 0 (no quantum) and 60 s (the default), on Muri's testbed trace
(tiresias and srtf-predicted, oracle predictions) and on the first Philly jobs at load 4,
where Tiresias's queue builds up and preempts. Writes section `scheduling-quantum` of
docs/BENCHMARKS.md.

    .venv/bin/python -m benchmarks.scheduling_quantum [--philly-jobs 15000]
"""

from __future__ import annotations

import argparse
import time

import pandas as pd

from benchmarks.report import markdown, write_section
from perfcast.scheduler.core.cluster import ClusterSpec
from perfcast.scheduler.sim.run import prepare_workload, run_simulation

QUANTA = (0.0, 60.0)


def measure(trace: str, cluster: str, policy: str, *, load: float, max_jobs: int | None) -> list:
    spec = ClusterSpec.parse(cluster)
    workload = prepare_workload(trace, spec, load=load, max_jobs=max_jobs)
    rows = []
    for quantum in QUANTA:
        started = time.process_time()
        run = run_simulation(workload, spec, policy, min_run_s=quantum)
        cpu = time.process_time() - started
        per_job = run.jobs["preemptions"]
        rows.append(
            {
                "trace": trace if max_jobs is None else f"{trace} (first {max_jobs:,})",
                "load": load,
                "policy": policy,
                "min_run_s": quantum,
                "avg JCT (s)": float(run.summary["avg_jct_s"]),
                "preemptions": int(per_job.sum()),
                "most preemptions of one job": int(per_job.max()),
                "rounds": run.result.rounds,
                "simulation CPU (s)": cpu,
            }
        )
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--philly-jobs", type=int, default=15000)
    args = parser.parse_args()
    rows = []
    for policy in ("tiresias", "srtf-predicted"):
        muri = "muri-traces:testbed/cluster_trace"
        rows += measure(muri, "8x8:v100", policy, load=1.0, max_jobs=None)
    rows += measure("pollux-philly", "250x8:v100", "tiresias", load=4.0, max_jobs=args.philly_jobs)
    body = f"""
A job (re)started less than `min_run_s` ago keeps its GPUs even if the policy drops it
(docs/scheduler.md, *No trace can hang it*), so preemptions per job are at most its time held /
`min_run_s`. `min_run_s` 0 is the simulator before issue 38; 60 s is the default. Oracle
predictions; simulation CPU excludes loading the trace.

{markdown(pd.DataFrame(rows), 2)}
"""
    command = f".venv/bin/python -m benchmarks.scheduling_quantum --philly-jobs {args.philly_jobs}"
    path = write_section("scheduling-quantum", "Scheduling: the minimum quantum", command, body)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

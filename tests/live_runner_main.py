"""A scheduler process for tests/test_live_restart.py: `LiveRunner` under a policy that needs
predictions (Gandiva with packing, elastic), deciding with a synthetic prediction backend
(made-up step times and co-location speeds: these runs test recovery, not predictions).
Re-run on the same state after a kill, it recovers as `perfcast run-trace` does.

    python tests/live_runner_main.py {packed|elastic} STATE_DIR RAY_ADDRESS JOBS_YAML IDLE_WORKERS
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import ray

from perfcast.scheduler.core.predictions import JobPredictor
from perfcast.scheduler.live.executor import RayExecutor, worker_namespace
from perfcast.scheduler.live.runner import LiveRunner
from perfcast.scheduler.live.store import JobStore
from perfcast.scheduler.live.trace import load_trace
from perfcast.scheduler.policies import make_policy


class SyntheticBackend:
    """Synthetic predictions: a step time growing with the local batch and 30% per extra GPU
    (so elastic shares GPUs out when jobs wait), and pairs that pack well (0.8 + 0.8 > 1)."""

    def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
        if task == "scaling":
            gpus = rows["num_gpus"].to_numpy(float)
            step = 0.001 * rows["local_batch_size"].to_numpy(float) * (1 + 0.3 * (gpus - 1))
            targets = {"step_time_s": step}
        elif task == "interference":
            targets = {"a_speed": np.full(len(rows), 0.8), "b_speed": np.full(len(rows), 0.8)}
        else:
            raise ValueError(f"SyntheticBackend has no {task!r} predictions")
        return pd.DataFrame(
            {f"{name}{q}": v for name, v in targets.items() for q in ("", "_p10", "_p90")}
        )


def main(policy_name: str, state: str, address: str, trace: str, idle_workers: str) -> None:
    folder = Path(state)
    folder.mkdir(parents=True, exist_ok=True)
    store = JobStore(folder / "state.db")
    ray.init(address=address, namespace=worker_namespace(store), log_to_driver=False)
    if policy_name == "packed":  # 1 GB per job: two fit a V100, so every pair packs
        policy = make_policy("gandiva", memory_mb=lambda job_type, batch: 1000.0, timeslice=False)
    else:
        policy = make_policy(policy_name)
    executor = RayExecutor(
        store, folder / "checkpoints", spares_per_node=0, idle_per_node=int(idle_workers)
    )
    predictor = JobPredictor(SyntheticBackend(), gpus_per_node=4)
    runner = LiveRunner(executor, store, policy, round_s=0.2, predictor=predictor)
    recovered = runner.recover()
    known = {r.job_id for r in store.jobs()}
    for job_id, spec in load_trace(trace, time_scale=1.0, step_s=1.0):
        if job_id not in known:
            runner.submit(job_id, spec)
    print("recovered", json.dumps(recovered), flush=True)
    summary = runner.run(timeout_s=600)  # a loaded host starts workers slowly
    executor.shutdown()
    print(json.dumps(summary.as_dict() | {"round_errors": runner.round_errors}))


if __name__ == "__main__":
    main(*sys.argv[1:])

"""The live executor on Ray: time-slicing overhead, suspend/resume, migration and resize
latency, and the simulator's fidelity to a real run.

Run: `.venv/bin/python -m benchmarks.executor` (writes section `executor` of
docs/BENCHMARKS.md; `--device-label` names the machine, `--no-fidelity` skips the trace run).

- Time-slicing: two identical MLP jobs (different seeds) time-sliced on one GPU with 200 ms
  slices; over a 3 s window, the window minus the time their steps took (each job measures
  its own), per switch: the time a switch loses, also in iterations (Gandiva: < 2%).
- Suspend / resume latency: request to acknowledged at a mini-batch boundary (suspend waits
  for the step in flight), on a running job, 20 times.
- Migration of a ~25M-parameter MLP to another GPU: request to restored on the target
  (the step in flight, the state through Ray's object store, restore), with a warm spare
  worker there; the durable checkpoint is written after the hand-over. The same move through
  the checkpoint file (save, fsync, load) in the same repeat, for comparison.
- Resize 1 -> 2 -> 1 workers: request to every new worker restored.
- Fidelity: 20 real ElasticFlow jobs (cluster01, 1-2 GPUs, from its dense second day), times
  scaled down, run for real under `fifo` on 4 GPUs and in `perfcast simulate` on the same
  scaled trace; average JCT compared.
Every measure runs once per repeat (`--repeats`, interleaved, so the machine's load hits all
alike); results are medians with their range.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import ray
import torch

from benchmarks.report import write_section
from perfcast.scheduler.live.checkpoint import load_checkpoint, save_checkpoint
from perfcast.scheduler.live.executor import RayExecutor
from perfcast.scheduler.live.models import build_model, num_parameters
from perfcast.scheduler.live.reports import Finished
from perfcast.scheduler.live.runner import LiveRunner
from perfcast.scheduler.live.spec import JobSpec
from perfcast.scheduler.live.store import JobStore
from perfcast.scheduler.live.trace import load_trace
from perfcast.scheduler.policies import make_policy
from perfcast.scheduler.sim.workload import read_trace

COMMAND = ".venv/bin/python -m benchmarks.executor"
SLICE_JOB = JobSpec(name="slice", width=256, depth=3, batch_size=64, iterations=10**7)
# steps that are a fixed 10 ms wait, like a GPU kernel: immune to the shared CPU's load
DEVICE_BOUND_JOB = SLICE_JOB.model_copy(update={"width": 16, "min_step_time_s": 0.01})
BIG_JOB = JobSpec(name="big", width=4900, depth=2, batch_size=8, iterations=10**6)
SMALL_JOB = JobSpec(name="small", width=256, depth=2, batch_size=32, iterations=10**6)


class Bench:
    def __init__(self, root: Path) -> None:
        self.store = JobStore(root / "state.db")
        self.ex = RayExecutor(self.store, root / "ckpt", spares_per_node=2, slice_s=0.2)
        self.ex.warm_spares()
        self.count = 0

    def submit(self, spec: JobSpec) -> str:
        self.count += 1
        job_id = f"{spec.name}-{self.count}"
        self.store.add_job(job_id, spec.model_dump(), 0.0)
        return job_id

    def wait(self, job_ids: list[str], timeout_s: float = 600) -> dict[str, Finished]:
        done: dict[str, Finished] = {}
        deadline = time.monotonic() + timeout_s
        while len(done) < len(job_ids) and time.monotonic() < deadline:
            for report in self.ex.poll():
                if isinstance(report, Finished) and report.job_id in job_ids:
                    done[report.job_id] = report
            time.sleep(0.02)
        return done

    def stop(self, job_id: str) -> None:
        self.ex.stop(job_id, "benchmark done")

    def restored_after(self, job_id: str, t0: float) -> float:
        """Seconds from `t0` (unix) until every worker of the job has restored."""
        while True:
            statuses = ray.get([w.status.remote() for w in self.ex.live[job_id].workers])
            stamps = [s["restored_unix"] for s in statuses]
            if all(t is not None and t >= t0 for t in stamps):
                return max(stamps) - t0
            time.sleep(0.002)


def iterations_per_s(b: Bench, job_ids: list[str], window_s: float) -> float:
    """Iterations completed by `job_ids` together per second, over `window_s`."""

    def total() -> tuple[float, int]:
        statuses = ray.get([b.ex.live[j].workers[0].status.remote() for j in job_ids])
        return time.perf_counter(), sum(s["iteration"] for s in statuses)

    t0, n0 = total()
    time.sleep(window_s)
    t1, n1 = total()
    if n1 == n0:
        statuses = ray.get([b.ex.live[j].workers[0].status.remote() for j in job_ids])
        raise RuntimeError(f"no progress in {window_s} s: {statuses}")
    return (n1 - n0) / (t1 - t0)


def timeslice_loss(b: Bench, spec: JobSpec, window_s: float = 3.0) -> dict[str, float]:
    """Two jobs time-sliced on one GPU with 200 ms slices, over a window: the time their steps
    took (each job measures its own, suspended time excluded) against the window. The rest,
    per switch, is the time a switch loses, given in iterations of the window's mean step.
    One run, no comparison with a separate job-alone rate (two noisy rates whose difference
    was noise). Negative: the incoming job's first step overlapped the outgoing one's last."""
    a, c = (b.submit(spec.model_copy(update={"seed": seed})) for seed in (1, 2))
    gpu = ((0, 1),)
    b.ex.run(a, gpu, spec.batch_size, "exclusive")
    b.ex.run(c, gpu, spec.batch_size, "timeslice")
    b.ex.wait_until(c, 20)

    def snapshot() -> tuple[float, int, float, int]:
        statuses = ray.get([b.ex.live[j].workers[0].status.remote() for j in (a, c)])
        busy = sum((s["mean_step_time_s"] or 0.0) * s["steps_measured"] for s in statuses)
        steps = sum(s["steps_measured"] for s in statuses)
        return time.perf_counter(), b.ex.slicer.switches, busy, steps

    t0, s0, busy0, n0 = snapshot()
    time.sleep(window_s)
    t1, s1, busy1, n1 = snapshot()
    b.stop(c)
    b.stop(a)
    step = (busy1 - busy0) / (n1 - n0)
    lost = ((t1 - t0) - (busy1 - busy0)) / (s1 - s0)
    return {
        "lost_iterations": lost / step,
        "lost_ms": 1000 * lost,
        "step_ms": 1000 * step,
        "switches_per_s": (s1 - s0) / (t1 - t0),
    }


def checkpoint_costs(root: Path) -> dict[str, float]:
    """Save (serialize, sha256, write, fsync, rename) and load (read, verify, deserialize) of
    the big job's model and optimizer state, in this process."""
    model = build_model(BIG_JOB)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(BIG_JOB.batch_size, BIG_JOB.input_dim)).sum().backward()
    optimizer.step()
    state = {"iteration": 1, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
    t0 = time.perf_counter()
    ref = save_checkpoint(root / "big.ckpt", state)
    t1 = time.perf_counter()
    load_checkpoint(ref.path, ref.sha256)
    t2 = time.perf_counter()
    return {"save_s": t1 - t0, "load_s": t2 - t1}


def suspend_resume(b: Bench, times: int = 20) -> tuple[list[float], list[float]]:
    job = b.submit(SMALL_JOB)
    b.ex.run(job, ((0, 2),), SMALL_JOB.batch_size, "exclusive")
    b.ex.wait_until(job, 5)
    suspends, resumes = [], []
    for _ in range(times):
        suspends.append(b.ex.suspend(job))
        resumes.append(b.ex.resume(job))
        time.sleep(0.05)
    b.stop(job)
    return suspends, resumes


def migration(b: Bench, handoff: bool = True) -> dict[str, float]:
    """With `handoff=False`, through the checkpoint file instead of the object store."""
    b.ex.handoff = handoff
    job = b.submit(BIG_JOB)
    b.ex.run(job, ((0, 0),), BIG_JOB.batch_size, "exclusive")
    status = b.ex.wait_until(job, 3)
    t0 = time.time()
    b.ex.relaunch(job, ((0, 3),), BIG_JOB.batch_size, "migrate")
    latency = b.restored_after(job, t0)
    ckpt_bytes = b.store.checkpoints(job)[-1].bytes
    b.stop(job)
    b.ex.handoff = True
    return {"latency_s": latency, "step_s": status["mean_step_time_s"], "bytes": ckpt_bytes}


def resize(b: Bench) -> dict[str, float]:
    job = b.submit(SMALL_JOB)
    b.ex.run(job, ((0, 0),), SMALL_JOB.batch_size, "exclusive")
    b.ex.wait_until(job, 5)
    t0 = time.time()
    b.ex.relaunch(job, ((0, 0), (0, 1)), 2 * SMALL_JOB.batch_size, "resize")
    up = b.restored_after(job, t0)
    b.ex.wait_until(job, b.ex.status(job)["iteration"] + 5)
    t0 = time.time()
    b.ex.relaunch(job, ((0, 1),), SMALL_JOB.batch_size, "resize")
    down = b.restored_after(job, t0)
    b.stop(job)
    return {"up_s": up, "down_s": down}


def fidelity_trace(path: Path, step_s: float, time_scale: float) -> Path:
    """20 real ElasticFlow jobs, scaled in time, durations rounded to whole steps."""
    table = read_trace("elasticflow-traces:cluster01")
    table = table[table["num_gpus"].between(1, 2)].sort_values("submit_time_s").iloc[1:21]
    first = table["submit_time_s"].min()
    steps = (table["duration_s"] * time_scale / step_s).round().clip(lower=1)
    out = pd.DataFrame(
        {
            "job_id": [f"ef{i:02d}" for i in range(len(table))],
            "submit_time_s": (table["submit_time_s"] - first) * time_scale,
            "num_gpus": table["num_gpus"].astype(int),
            "duration_s": steps * step_s,
        }
    )
    out.to_csv(path, index=False)
    return path


def fidelity(root: Path, time_scale: float, step_s: float) -> dict[str, float]:
    trace = fidelity_trace(root / "ef20_scaled.csv", step_s, time_scale)
    store = JobStore(root / "fidelity.db")
    ex = RayExecutor(store, root / "fidelity-ckpt", spares_per_node=4)
    ex.warm_spares()  # before the runner starts the run's clock
    runner = LiveRunner(ex, store, make_policy("fifo"), round_s=0.2)
    for job_id, spec in load_trace(trace, time_scale=1.0, step_s=step_s):
        runner.submit(job_id, spec)
    real = runner.run(timeout_s=900)
    ex.shutdown()
    sim = subprocess.run(
        [str(Path(sys.executable).parent / "perfcast"), "simulate", "--trace", str(trace),
         "--cluster", "1x4:v100", "--policy", "fifo", "--predictor", "oracle", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    simulated = json.loads(sim.stdout.strip().splitlines()[-1])
    return {
        "real_avg_jct_s": real.avg_jct_s,
        "sim_avg_jct_s": simulated["avg_jct_s"],
        "real_makespan_s": real.makespan_s,
        "sim_makespan_s": simulated["makespan_s"],
        "error": real.avg_jct_s / simulated["avg_jct_s"] - 1,
    }


def median(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float], fmt: str, unit: str = "") -> str:
    """Median, then the range over the repeats: `1.2 s (0.9-1.5, n=5)`."""
    f = fmt.format
    return f"{f(median(values))}{unit} ({f(min(values))}-{f(max(values))}, n={len(values)})"


def latency_ms(values: list[float]) -> str:
    p90 = sorted(values)[int(0.9 * (len(values) - 1))]
    return f"{1000 * median(values):.1f} / {1000 * p90:.1f} ms"


def timeslice_rows(label: str, runs_: list[dict[str, float]]) -> list[tuple[str, str, str]]:
    lost = [r["lost_iterations"] for r in runs_]
    overhead = [100 * r["lost_ms"] / 200 for r in runs_]  # of each 200 ms slice
    return [
        (f"time-slicing, {label}: iterations lost per switch", spread(lost, "{:+.2f}"),
         "about 0 (Gandiva: < 2% of a slice)"),
        ("  time lost per switch / share of a 200 ms slice",
         f"{spread([r['lost_ms'] for r in runs_], '{:+.1f}', ' ms')} / "
         f"{median(overhead):+.1f}%", ""),
        ("  step / switches per second",
         f"{median([r['step_ms'] for r in runs_]):.1f} ms / "
         f"{median([r['switches_per_s'] for r in runs_]):.1f}", ""),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-fidelity", action="store_true")
    parser.add_argument("--time-scale", type=float, default=0.005)
    parser.add_argument("--device-label", default="CPU (logical Ray GPUs)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cuda = torch.cuda.is_available()
    ray.init(
        address="local",  # a cluster of its own, whatever `ray start` clusters are up
        num_cpus=2 if not cuda else None,
        num_gpus=None if cuda else 4,
        include_dashboard=False,
        namespace="perfcast-bench",
        log_to_driver=False,
    )
    with tempfile.TemporaryDirectory(prefix="perfcast-executor-") as tmp:
        root = Path(tmp)
        bench = Bench(root)
        slices, bound, suspends, resumes, migrations, by_file, resizes, costs = (
            [] for _ in range(8)
        )
        for r in range(args.repeats):  # every measure once per repeat: load hits all alike
            print(f"repeat {r + 1}/{args.repeats}", file=sys.stderr)
            bound.append(timeslice_loss(bench, DEVICE_BOUND_JOB))
            slices.append(timeslice_loss(bench, SLICE_JOB))
            s, u = suspend_resume(bench)
            suspends += s
            resumes += u
            migrations.append(migration(bench))
            by_file.append(migration(bench, handoff=False))
            resizes.append(resize(bench))
            costs.append(checkpoint_costs(root))
        bench.ex.shutdown()
        fid = None if args.no_fidelity else fidelity(root, args.time_scale, 0.05)
    ray.shutdown()

    big_params = num_parameters(build_model(BIG_JOB))
    migrate_s = [m["latency_s"] for m in migrations]
    rows = [
        *timeslice_rows("device-bound steps (fixed 10 ms)", bound),
        *timeslice_rows("CPU-bound steps (shared 2-core CPU)", slices),
        ("suspend latency (median / p90)", latency_ms(suspends), "within a 50-250 ms slice"),
        ("resume latency (median / p90)", latency_ms(resumes), ""),
        (
            f"migration, {big_params / 1e6:.1f}M-parameter MLP (state in Ray's object store)",
            f"{spread(migrate_s, '{:.2f}', ' s')}; step "
            f"{median([m['step_s'] for m in migrations]):.2f} s, state "
            f"{migrations[0]['bytes'] / 2**20:.0f} MiB",
            "< 1 s (Gandiva)",
        ),
        (
            "  the same migration through the checkpoint file (the old path)",
            spread([m["latency_s"] for m in by_file], "{:.2f}", " s"),
            "",
        ),
        (
            "  checkpoint file save / load of that state, in-process",
            f"{spread([c['save_s'] for c in costs], '{:.2f}', ' s')} / "
            f"{spread([c['load_s'] for c in costs], '{:.2f}', ' s')}",
            "",
        ),
        ("resize 1 -> 2 workers", spread([r["up_s"] for r in resizes], "{:.2f}", " s"), ""),
        ("resize 2 -> 1 workers", spread([r["down_s"] for r in resizes], "{:.2f}", " s"), ""),
    ]
    if fid:
        rows.append((
            "simulator fidelity: avg JCT real vs simulated (fifo, 20 ElasticFlow jobs, 4 GPUs)",
            f"{fid['real_avg_jct_s']:.1f} s vs {fid['sim_avg_jct_s']:.1f} s: "
            f"{100 * fid['error']:+.1f}% (makespan {fid['real_makespan_s']:.1f} vs "
            f"{fid['sim_makespan_s']:.1f} s; one run)", "within 15%",
        ))  # fmt: skip
    else:
        rows.append(("simulator fidelity", "not run (--no-fidelity)", "within 15%"))
    table = "| measure | result | target |\n|---|---|---|\n" + "\n".join(
        f"| {a} | {b} | {c} |" for a, b, c in rows
    )
    load = os.getloadavg()
    body = (
        f"Device: {args.device_label}. Each measure once per repeat, {args.repeats} repeats "
        f"interleaved; median (min-max over the repeats). Suspend/resume: {len(suspends)} "
        f"samples. Load average at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / "
        "5 / 15 min) on a machine shared with other work; see docs/executor.md for what each "
        "figure measures.\n\n" + table
    )
    path = write_section("executor", "Live executor (Ray)", COMMAND, body)
    print(body)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()

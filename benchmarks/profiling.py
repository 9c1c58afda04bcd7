"""Profiling overhead: the median step measured by `profile_step` (counters on) against a plain
training loop timing the same steps with nothing else running, on the same model and batch.

Runs alternate A/B, B/A, A/B, ... (`--repeats` pairs) so that noise from other processes on the
machine hits both sides alike; the overhead of a model is the median over pairs of
profiled median / plain median - 1. Writes section `profiling` of docs/BENCHMARKS.md.

    .venv/bin/python -m benchmarks.profiling [--repeats 21] [--steps 20] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.report import write_section
from perfcast.features.profiling import StepProfile, profile_step, zoo
from perfcast.features.profiling.step_profiler import (
    device_name,
    resolve_device,
    to_device,
    train_step,
)

CASES = [
    (zoo.spec("mlp", width=256, depth=3), 64),
    (zoo.spec("resnet18", width=16), 8),
    (zoo.spec("gpt-decoder", width=128, depth=2), 8),
    (zoo.spec("ncf", width=32, depth=3), 256),
]
WARMUP = 3


def plain_median(built: zoo.ZooModel, optimizer, batch, steps: int, dev: torch.device) -> float:
    """The baseline: warm-up, then `steps` steps timed with a bare clock (CUDA: synchronized)."""
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    for _ in range(WARMUP):
        train_step(built.model, optimizer, built.loss_fn, batch)
    times = []
    for _ in range(steps):
        sync()
        t0 = time.perf_counter()
        train_step(built.model, optimizer, built.loss_fn, batch)
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(spec: zoo.ZooSpec, batch_size: int, repeats: int, steps: int, device: str) -> dict:
    dev = resolve_device(device)
    built = zoo.build(spec)
    built.model.to(dev)
    optimizer = torch.optim.Adam(built.model.parameters())
    batch = to_device(built.make_batch(batch_size), dev)
    plain, profiled, ratios, walls = [], [], [], []

    def run_profiled() -> StepProfile:
        t0 = time.perf_counter()
        result = profile_step(
            built.model,
            optimizer,
            lambda: batch,
            loss_fn=built.loss_fn,
            device=dev,
            warmup=WARMUP,
            steps=steps,
        )
        walls.append(time.perf_counter() - t0)
        return result

    for i in range(repeats):
        # A/B then B/A: a slow drift of the background load cancels out between pairs
        if i % 2 == 0:
            a, result = plain_median(built, optimizer, batch, steps, dev), run_profiled()
        else:
            result = run_profiled()
            a = plain_median(built, optimizer, batch, steps, dev)
        plain.append(a)
        profiled.append(result.step_time_s)
        ratios.append(result.step_time_s / a - 1)
    deciles = statistics.quantiles(ratios, n=10, method="inclusive")
    return {
        "job": spec.job,
        "batch": batch_size,
        "plain_ms": 1000 * statistics.median(plain),
        "profiled_ms": 1000 * statistics.median(profiled),
        "overhead": statistics.median(ratios),
        "p10": deciles[0],
        "p90": deciles[-1],
        "wall_s": statistics.median(walls),
        "gpu_counters": result.counters.gpu_samples > 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = [measure(s, b, args.repeats, args.steps, args.device) for s, b in CASES]
    name = device_name(resolve_device(args.device))
    lines = [
        f"Device `{name}`, {args.threads} torch thread(s), {args.steps} measured steps after "
        f"{WARMUP} warm-up steps, {args.repeats} interleaved plain/profiled pairs per model "
        "(A/B, B/A, ...). "
        "Overhead = median over pairs of (profiled median step / plain median step - 1); "
        "p10-p90 over the pairs show the noise. Target: under 3%.",
        "",
        "| job | batch | plain median step (ms) | profiled median step (ms) | overhead | "
        "p10 .. p90 | profile_step wall (s) | GPU counters |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['job']} | {r['batch']} | {r['plain_ms']:.3f} | {r['profiled_ms']:.3f} | "
            f"{100 * r['overhead']:+.2f}% | {100 * r['p10']:+.1f}% .. {100 * r['p90']:+.1f}% | "
            f"{r['wall_s']:.2f} | {'sampled' if r['gpu_counters'] else 'none (no GPU)'} |"
        )
    worst = max(abs(r["overhead"]) for r in rows)
    sampled = any(r["gpu_counters"] for r in rows)
    on_gpu = resolve_device(args.device).type == "cuda"
    within_noise = sum(r["p10"] <= 0 <= r["p90"] for r in rows)
    lines += [
        "",
        f"Largest |overhead|: {100 * worst:.2f}% "
        f"({'meets' if worst < 0.03 else 'misses'} the 3% target); for {within_noise} of "
        f"{len(rows)} models the p10..p90 band of the pairs contains 0, i.e. the difference is "
        "within the run-to-run noise. The wall time includes "
        "warm-up and the one extra untimed step that measures activation memory. "
        + (
            (
                "The NVML sampler thread reads the GPU's counters at 20 Hz during the profiled "
                "steps; the device ran nothing else."
                if sampled
                else "NVML returned no samples on this device: the sampler did not run."
            )
            if on_gpu
            else "On CPU no sampling thread runs (NVML has no device), so this measures the "
            "timing harness only; run with `--device cuda` on a GPU machine to include the "
            "NVML sampler at 20 Hz (section `profiling-cuda`). The machine is shared with "
            "other jobs, hence the p10-p90 spread."
        ),
    ]
    command = "python -m benchmarks.profiling " + " ".join(
        f"--{k} {v}" for k, v in vars(args).items()
    )
    # one section per kind of device, so a GPU run does not replace the CPU figures
    section = "profiling-cuda" if on_gpu else "profiling"
    title = f"Profiling overhead on {name}" if on_gpu else "Profiling overhead"
    path = write_section(section, title, command, "\n".join(lines))
    print("\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

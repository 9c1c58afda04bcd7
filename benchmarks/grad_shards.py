"""What `grad_shards` costs a worker: the step time of one training step (forward, backward,
SGD step) with the global batch cut into K micro-shards whose gradients are added in shard
order, against the plain full-batch backward, in this process (one worker, one thread, as
the executor's workers run).

Run: `.venv/bin/python -m benchmarks.grad_shards` (writes section `executor-grad-shards` of
docs/BENCHMARKS.md).

Every configuration runs once per repeat (`--repeats`, interleaved, so the machine's load hits
all alike); each row gives the median over the repeats of the mean step time and its range.
With several workers the all-gather of the K shard gradients (K / world_size times an
all-reduce's traffic) comes on top; it is not measured here.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from benchmarks.report import write_section
from perfcast.scheduler.live.models import build_model, num_parameters
from perfcast.scheduler.live.shards import ShardedGradients
from perfcast.scheduler.live.spec import JobSpec

COMMAND = ".venv/bin/python -m benchmarks.grad_shards"
BATCH = 64
MODELS = {
    "MLP width 256": JobSpec(name="small", width=256, depth=2, batch_size=BATCH, iterations=1),
    "MLP width 1024": JobSpec(name="wide", width=1024, depth=3, batch_size=BATCH, iterations=1),
}
SHARDS = (None, 1, 2, 4, 8)  # None: plain backward


def step_time_s(spec: JobSpec, shards: int | None, steps: int) -> float:
    """Mean seconds per training step (after one warm-up step)."""
    model = build_model(spec)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH, spec.input_dim, generator=gen)
    y = torch.randint(0, spec.num_classes, (BATCH,), generator=gen)
    sharded = ShardedGradients(model, shards, 0, 1, BATCH) if shards else None

    def loss_of(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(xs), ys)

    def one_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        if sharded:
            sharded.backward(loss_of, x, y)
        else:
            loss_of(x, y).backward()
        optimizer.step()

    one_step()
    start = time.perf_counter()
    for _ in range(steps):
        one_step()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    times: dict[tuple[str, int | None], list[float]] = {}
    for _ in range(args.repeats):
        for label, spec in MODELS.items():
            for shards in SHARDS:
                t = step_time_s(spec, shards, args.steps)
                times.setdefault((label, shards), []).append(t)
    rows = [
        "| model | parameters | grad_shards | shard size | step (median, range) | vs plain |",
        "|---|---|---|---|---|---|",
    ]
    for label, spec in MODELS.items():
        plain = statistics.median(times[(label, None)])
        params = num_parameters(build_model(spec))
        for shards in SHARDS:
            values = times[(label, shards)]
            mid = statistics.median(values)
            rows.append(
                f"| {label} | {params / 1e6:.2f} M | {shards or 'off (plain)'} | "
                f"{BATCH // (shards or 1)} | {mid * 1e3:.2f} ms ({min(values) * 1e3:.2f}-"
                f"{max(values) * 1e3:.2f}) | {mid / plain:.2f}x |"
            )
    body = (
        f"One worker, one thread, global batch {BATCH}, SGD with momentum; {args.repeats} "
        f"interleaved repeats of {args.steps} steps each. `grad_shards` K: K backwards of "
        "BATCH/K samples, gradients added in shard order (bit-identical at any worker count); "
        "the all-gather between workers is not included.\n\n" + "\n".join(rows)
    )
    path = write_section("executor-grad-shards", "Live executor: grad_shards cost", COMMAND, body)
    print(body)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""The laws every scaling answer must obey, checked one row at a time: for each row, variants
that physics orders against it (more GPUs, more nodes, slower links, a larger local batch, a
faster GPU by datasheet, one GPU), all predicted in one batch, and each row also alone.
Shared by the property test (tests/test_scaling_physics.py) and the sweep
(`python -m benchmarks.scaling_physics`)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from perfcast.features.devices import DEVICES

LAWS = (
    "one GPU no slower",  # T(n GPUs) >= T(1 GPU) at the same local batch: never super-linear
    "more GPUs no faster",
    "more nodes no faster",
    "slower links no faster",
    "larger batch no faster",
    "faster GPU no slower",  # by datasheet, unless this job was measured on both types
    "interval in order",  # p10 < p50 < p90
    "alone as in a batch",  # bit for bit
)
TOLERANCE = 1e-12  # relative: two sums of the same terms in another order


def variants(rows: pd.DataFrame, rng: np.random.Generator) -> dict[str, pd.DataFrame]:
    """Each law's variant of every row (same index), the row it must not beat or trail."""
    gpus, nodes = rows["num_gpus"].to_numpy(), rows["num_nodes"].to_numpy()
    faster = []
    for gpu in rows["gpu_type"]:
        spec = DEVICES[gpu]
        above = [
            g
            for g, s in DEVICES.items()
            if g != gpu
            and s.peak_tflops_fp32 >= spec.peak_tflops_fp32
            and s.mem_bw_gbps >= spec.mem_bw_gbps
        ]
        faster.append(rng.choice(above) if above else gpu)
    return {
        "one GPU no slower": rows.assign(num_gpus=1, num_nodes=1),
        "more GPUs no faster": rows.assign(num_gpus=gpus * 2),
        "more nodes no faster": rows.assign(num_nodes=np.minimum(nodes * 2, gpus)),
        "slower links no faster": rows.assign(
            intra_node_bw_gbps=rows["intra_node_bw_gbps"] / 2,
            inter_node_bw_gbps=rows["inter_node_bw_gbps"] / 2,
        ),
        "larger batch no faster": rows.assign(local_batch_size=rows["local_batch_size"] * 2),
        "faster GPU no slower": rows.assign(gpu_type=faster),
    }


def violations(
    model, rows: pd.DataFrame, rng: np.random.Generator, alone: int = 50
) -> Counter[str]:
    """How many rows break each law (LAWS); `alone` rows are also predicted one by one."""
    rows = rows.reset_index(drop=True)
    cases = variants(rows, rng)
    batch = pd.concat([rows, *cases.values()], ignore_index=True)
    answer = model.predict_interval(batch)
    step = answer["step_time_s"].to_numpy()
    base, n = step[: len(rows)], len(rows)
    found: Counter[str] = Counter({law: 0 for law in LAWS})
    for k, (law, variant) in enumerate(cases.items(), start=1):
        other = step[k * n : (k + 1) * n]
        if law == "one GPU no slower":
            broken = base < other * (1 - TOLERANCE)
        elif law == "faster GPU no slower":
            broken = other > base * (1 + TOLERANCE)
            broken &= ~_measured_otherwise(model, rows, variant, broken)
        else:
            broken = other < base * (1 - TOLERANCE)
        found[law] += int(broken.sum())
    lo, hi = answer["step_time_s_p10"].to_numpy(), answer["step_time_s_p90"].to_numpy()
    found["interval in order"] += int(((lo >= step) | (step >= hi) | ~np.isfinite(step)).sum())
    for i in rng.choice(n, size=min(alone, n), replace=False):
        single = model.predict_interval(rows.iloc[[i]])
        same = single["step_time_s"].to_numpy()[0] == base[i] and (
            single["step_time_s_p90"].to_numpy()[0] == hi[i]
        )
        found["alone as in a batch"] += int(not same)
    return found


def _measured_otherwise(
    model, rows: pd.DataFrame, faster: pd.DataFrame, broken: np.ndarray
) -> np.ndarray:
    """Of the `broken` rows, those the law exempts: the job was measured on both types, or
    measured the other way on two types (`measured_against_datasheet`)."""
    exempt = np.zeros(len(rows), dtype=bool)
    measured = model.job_gpus_
    for i in np.flatnonzero(broken):
        job, batch = rows["job"].iat[i], rows["local_batch_size"].iat[i]
        types = measured.get(job, ())
        both = rows["gpu_type"].iat[i] in types and faster["gpu_type"].iat[i] in types
        exempt[i] = both or model.measured_against_datasheet(job, batch)
    return exempt


def random_rows(jobs: list[str], n: int, rng: np.random.Generator) -> pd.DataFrame:
    """`n` rows over every job given (and one never seen), every GPU type with a datasheet,
    1-128 GPUs on 1-16 nodes, local batches 1-4096 and links
    from 0.5 to 900 GB/s."""
    gpus = rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128], size=n)
    # at most 32 GPUs a node, so that the variant with twice the GPUs is within the bounds
    nodes = np.maximum(np.minimum(gpus, rng.choice([1, 2, 4, 8, 16], size=n)), -(-gpus // 32))
    return pd.DataFrame(
        {
            "job": rng.choice([*jobs, "never-seen-job"], size=n),
            "gpu_type": rng.choice(list(DEVICES), size=n),
            "num_nodes": nodes,
            "num_gpus": gpus,
            "local_batch_size": rng.choice(2 ** np.arange(13), size=n),
            "intra_node_bw_gbps": np.exp(rng.uniform(np.log(0.5), np.log(900), size=n)),
            "inter_node_bw_gbps": np.exp(rng.uniform(np.log(0.5), np.log(900), size=n)),
        }
    )

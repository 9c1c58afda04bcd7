"""Accuracy of every task × model family × split against simple baselines measured in the same
run, plus prediction speed. Writes one section per task,
`accuracy-<task>`, of docs/BENCHMARKS.md.

    .venv/bin/python -m benchmarks.accuracy [--quick] [--task scaling] [--split cluster]

Baselines: train mean (every task); perfect linear scaling from one GPU (scaling: the job's
one-GPU step time at the same local batch, i.e. no synchronization cost); roofline (runtime:
sum of per-node roofline times times the median latency/roofline ratio of the training
samples; the per-op model alone, NeuSight's method: each op's latency from its roofline, summed
over the graph); no interference (speed = 1.0).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from rich.progress import track

from benchmarks.report import write_section
from perfcast import datasets
from perfcast.datasets.splits import folds
from perfcast.features.graphs import op_table, sample_table, samples
from perfcast.predictor import make_predictor
from perfcast.predictor.runtime import OpLatencyModel
from perfcast.predictor.scaling import one_gpu_seconds
from perfcast.training.by_source import leave_one_cluster_out_folds
from perfcast.training.evaluation import truth_and_predictions
from perfcast.training.metrics import narrowest_width, regression_metrics

SCALING_DATA = ["pollux-scaling", "gavel-scaling", "muri-scaling", "sia-scaling"]


def _scaling_rows() -> pd.DataFrame:
    """The scaling datasets; every row names its `cluster` (tests/test_scaling_data.py)."""
    return pd.concat([datasets.load(name) for name in SCALING_DATA], ignore_index=True)


OBSERVED_CONFIGS = 3  # measured configurations of each job a new cluster reports


def observed_cluster_folds(rows: pd.DataFrame):
    """Leave one cluster out, then a few measurements: of each held-out job, the rows of
    OBSERVED_CONFIGS of its measured configurations (GPUs, nodes, local batch; drawn at
    random) are observed after the fit (`ScalingPredictor.observe`), the rest tested.
    Yields (train, test, cluster, observed)."""
    configs = ["num_gpus", "num_nodes", "local_batch_size"]
    for train, held, cluster in leave_one_cluster_out_folds(rows):
        part = rows.iloc[held]
        seen = np.zeros(len(held), dtype=bool)
        for _, where in part.groupby("job", sort=True).indices.items():
            keys = part.iloc[where][configs].drop_duplicates()
            chosen = keys.sample(min(OBSERVED_CONFIGS, len(keys)), random_state=0)
            seen[where] = pd.MultiIndex.from_frame(part.iloc[where][configs]).isin(
                pd.MultiIndex.from_frame(chosen)
            )
        yield train, held[~seen], cluster, held[seen]


QUICK_EPOCHS = 20  # rnn's and gnn's epochs with --quick (otherwise chosen per fit, 20 or 80)

TRACES = ["pollux-philly", "muri-traces", "chronus-traces", "elasticflow-traces"]
TRACE_ROWS = 20_000  # jobs sampled from each trace: the cross-trace fits stay cheap


def _trace_rows() -> pd.DataFrame:
    """TRACE_ROWS jobs of each cluster trace, each row with its trace as `source`."""
    return pd.concat(
        [datasets.load(n).sample(TRACE_ROWS, random_state=0).assign(source=n) for n in TRACES],
        ignore_index=True,
    )


def leave_one_trace_out_folds(rows: pd.DataFrame):
    """Duration on a cluster whose trace is not in training: (train, test, trace) per trace."""
    for trace in TRACES:
        held = (rows["source"] == trace).to_numpy()
        yield np.flatnonzero(~held), np.flatnonzero(held), trace


def by_source_interference(gavel: pd.DataFrame, measured: pd.DataFrame):
    """Rows and the one fold of the split by source: Gavel's GPU pairs in training, pairs
    measured here (new workloads, a new device: the CPU, or an H100 without MPS) as the test."""
    rows = pd.concat([gavel, measured], ignore_index=True)
    return rows, [(np.arange(len(gavel)), np.arange(len(gavel), len(rows)))]


def leave_one_device_out_folds(graphs: pd.DataFrame):
    """Runtime's headline: a device never seen. For each device: train on every other
    device's samples, test on its own. Yields (train, test, device), so the table shows which
    held-out device a model loses its points on."""
    devices = graphs["device"].astype(str).to_numpy()
    for device in sorted(set(devices)):
        held = devices == device
        yield np.flatnonzero(~held), np.flatnonzero(held), device


def leave_one_model_out_folds(graphs: pd.DataFrame):
    """A model never seen, on devices that were: for each model, train on every other
    model's samples and test on its own. Yields (train, test, model)."""
    models = graphs["model"].astype(str).to_numpy()
    for model in sorted(set(models)):
        held = models == model
        yield np.flatnonzero(~held), np.flatnonzero(held), model


def new_model_new_device_folds(graphs: pd.DataFrame):
    """A model and a device both never seen: for each (model, device) measured, train on the
    samples of neither and test on the pair's."""
    models, devices = (graphs[c].astype(str).to_numpy() for c in ("model", "device"))
    for model in sorted(set(models)):
        for device in sorted(set(devices)):
            test = (models == model) & (devices == device)
            if test.any():
                yield np.flatnonzero((models != model) & (devices != device)), np.flatnonzero(test)


def new_gpu_folds(rows: pd.DataFrame):
    """Situation (1) of the issue: a GPU type known only from its one-GPU rows. For each GPU
    type: train on everything but its multi-GPU rows, test on its multi-GPU rows of the jobs
    whose multi-GPU step times were measured on another GPU type."""
    multi = (rows["num_gpus"] > 1).to_numpy()
    for gpu in sorted(rows["gpu_type"].unique()):
        is_gpu = (rows["gpu_type"] == gpu).to_numpy()
        elsewhere = set(rows.loc[multi & ~is_gpu, "job"])
        test = is_gpu & multi & rows["job"].isin(elsewhere).to_numpy()
        if test.any():
            yield np.flatnonzero(~(is_gpu & multi)), np.flatnonzero(test)


def new_job_folds(rows: pd.DataFrame, n_folds: int = 5):
    """A job profiled on one GPU only, whose scaling was measured nowhere: jobs in 5 groups;
    train on everything but a group's multi-GPU rows, test on those rows."""
    jobs = np.random.default_rng(0).permutation(rows["job"].unique())
    multi = (rows["num_gpus"] > 1).to_numpy()
    for group in np.array_split(jobs, n_folds):
        held = rows["job"].isin(group).to_numpy() & multi
        if held.any():
            yield np.flatnonzero(~held), np.flatnonzero(held)


def baselines(task: str, train: pd.DataFrame, test: pd.DataFrame) -> dict[str, np.ndarray]:
    """Baseline predictions aligned with `truth_and_predictions` order."""
    if task == "scaling":
        mean = np.full(len(test), train["step_time_s"].mean())
        t1 = one_gpu_seconds(train, test)
        return {
            "train mean": mean,
            "linear scaling from 1 GPU": np.where(np.isfinite(t1), t1, mean),
        }
    if task == "interference":
        speeds = np.concatenate([train["a_speed"], train["b_speed"]])
        n = 2 * len(test)
        return {"train mean": np.full(n, speeds.mean()), "no interference (1.0)": np.ones(n)}
    if task == "runtime":
        y_train = np.log(samples(train)["e2e_latency_ms"].to_numpy(dtype=float))
        _, base_train = sample_table(train)
        _, base_test = sample_table(test)
        n = len(base_test)
        # NeuSight's method on its own: per-op latency from the roofline, summed over the graph
        per_op = OpLatencyModel().fit(op_table(train))
        return {
            "train mean": np.full(n, np.exp(y_train).mean()),
            "roofline": np.exp(base_test + np.median(y_train - base_train)),
            "per-op model summed (NeuSight-style)": np.exp(
                per_op.predict_log_sum(op_table(test), samples(test).index)
            ),
        }
    n = len(test)
    return {
        "train mean": np.full(n, train["duration_s"].mean()),
        "train median": np.full(n, train["duration_s"].median()),
    }


def run_case(
    task: str, kind: str, rows: pd.DataFrame, split: str, families, fold_iter, params=None
):
    """Pooled metrics per family and per baseline over the folds; folds that yield a third
    item (a label, e.g. the held-out cluster) also get rows of their own, after the pooled.
    `params`: keyword arguments of make_predictor per family (e.g. fewer epochs)."""
    truths: list[np.ndarray] = []
    labels: list[str | None] = []
    preds: dict[str, list[pd.DataFrame]] = {f: [] for f in families}
    base: dict[str, list[np.ndarray]] = {}
    fit_s = dict.fromkeys(families, 0.0)
    for train_idx, test_idx, *label in fold_iter:
        train, test = rows.iloc[train_idx], rows.iloc[test_idx]
        for family in families:
            start = time.perf_counter()
            predictor = make_predictor(task, family, **(params or {}).get(family, {})).fit(train)
            if len(label) > 1:  # measured step times observed after the fit
                predictor.observe(rows.iloc[label[1]])
            fit_s[family] += time.perf_counter() - start
            truth, predicted = truth_and_predictions(predictor, test)
            preds[family].append(predicted)
        truths.append(truth)
        labels.append(label[0] if label else None)
        for name, values in baselines(task, train, test).items():
            base.setdefault(name, []).append(values)
    groups = [(split, slice(None))]
    if any(label is not None for label in labels):
        ends = np.cumsum([len(t) for t in truths])
        groups += [
            (f"{split}: {label}", slice(end - len(t), end))
            for label, t, end in zip(labels, truths, ends, strict=True)
        ]
    y_all = np.concatenate(truths)
    out = []
    for name, part in groups:
        y = y_all[part]
        for family in families:
            p = pd.concat(preds[family], ignore_index=True).iloc[part]
            m = regression_metrics(y, p["y"], p["y_p10"], p["y_p90"])
            out.append({"task": task, "split": name, "model": family, **m,
                        "median_p90_p10": float(np.median(p["y_p90"] / p["y_p10"])),
                        "narrowest_p90_p10": narrowest_width(y, p["y"], INTERVAL_TARGET[0]),
                        "fit_s": fit_s[family] if part == slice(None) else np.nan})  # fmt: skip
        for baseline, values in base.items():
            out.append({"task": task, "split": name, "model": f"baseline: {baseline}",
                        **regression_metrics(y, np.concatenate(values)[part])})  # fmt: skip
    return out


def speed(task: str, rows: pd.DataFrame, family: str, n: int = 100_000) -> float:
    """Rows per second of one batch prediction of `n` rows (a fitted model on `rows`)."""
    predictor = make_predictor(task, family).fit(rows)
    batch = rows.sample(n, replace=True, random_state=0).reset_index(drop=True)
    batch = batch.drop(columns=list(predictor.targets))
    predictor.predict_interval(batch.head(100))  # warm
    start = time.perf_counter()
    predictor.predict_interval(batch)
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="gbm only (runtime: every family, fewer epochs), for a fast check",
    )
    parser.add_argument(
        "--task",
        choices=["scaling", "interference", "runtime", "duration"],
        help="only this task's cases (its section of docs/BENCHMARKS.md)",
    )
    parser.add_argument(
        "--split", help="only the cases whose split contains this text, printed and not written"
    )
    parser.add_argument("--families", help="only these model families (comma-separated)")
    args = parser.parse_args()
    tab = ("gbm",) if args.quick else ("gbm", "fcn")
    # runtime's headline (leave one GPU out) runs every family even with --quick: rnn and gnn
    # then train QUICK_EPOCHS epochs (gbm-gnn as shipped: its epochs chosen on held-out
    # devices) and its random split runs gbm alone, which bounds the run
    graph = ("gbm", "fcn", "rnn", "gnn", "gbm-gnn")
    graph_params = {f: {"epochs": QUICK_EPOCHS} for f in ("rnn", "gnn")} if args.quick else {}
    clusters = ("gbm", "fcn")  # scaling's headline likewise runs both with --quick
    if args.families:
        chosen = args.families.split(",")
        tab, graph = tuple(f for f in tab if f in chosen), tuple(f for f in graph if f in chosen)
        clusters = tuple(f for f in clusters if f in chosen)
    scaling = _scaling_rows()
    interference = datasets.load("gavel-interference")
    graphs = datasets.load("neusight-graphs")
    philly = datasets.load("pollux-philly")
    traces = _trace_rows()
    by_source, by_source_folds = by_source_interference(
        interference, datasets.load("measured-cpu-colocation")
    )
    by_h100, by_h100_folds = by_source_interference(
        interference, datasets.load("measured-h100-colocation")
    )
    cases = [
        ("scaling", "scaling", scaling, "leave one cluster out", clusters,
         leave_one_cluster_out_folds(scaling)),
        *([] if args.quick else [  # --quick: the headline alone (the others: ~25 CPU-min)
            ("scaling", "scaling", scaling, "random", tab, folds(scaling, "scaling", "random")),
            ("scaling", "scaling", scaling, "new GPU, 1-GPU rows only", tab,
             new_gpu_folds(scaling)),
            ("scaling", "scaling", scaling, "new job, 1-GPU rows only", tab,
             new_job_folds(scaling)),
            ("scaling", "scaling", scaling,
             f"leave one cluster out, {OBSERVED_CONFIGS} configurations of each job observed",
             clusters, observed_cluster_folds(scaling)),
        ]),
        ("interference", "interference", interference, "random", tab,
         folds(interference, "interference", "random")),
        ("interference", "interference", interference, "unseen-job pairs", tab,
         folds(interference, "interference", "job")),
        ("interference", "interference", by_source, "by source: gavel -> measured-cpu", tab,
         by_source_folds),
        ("interference", "interference", by_h100, "by source: gavel -> measured-h100", tab,
         by_h100_folds),
        ("runtime", "graph", graphs, "random", graph[:1] if args.quick else graph,
         folds(graphs, "graph", "random")),
        ("runtime", "graph", graphs, "leave one GPU out", graph,
         leave_one_device_out_folds(graphs)),
        # every family answers a new model with the op model's sum: gbm stands for them
        ("runtime", "graph", graphs, "leave one model out", graph[:1],
         leave_one_model_out_folds(graphs)),
        *([] if args.quick else [  # 50 folds: ~10 CPU-min
            ("runtime", "graph", graphs, "new model on a new GPU", graph[:1],
             new_model_new_device_folds(graphs)),
        ]),
        ("duration", "trace", philly, "random", tab, folds(philly, "trace", "random", n_folds=3)),
        ("duration", "trace", traces, "leave one trace out", tab,
         leave_one_trace_out_folds(traces)),
    ]  # fmt: skip
    if args.task:
        cases = [case for case in cases if case[0] == args.task]
    if args.split:
        cases = [case for case in cases if args.split in case[3]]
    results = []
    for task, kind, rows, split, families, fold_iter in track(cases, description="accuracy"):
        params = graph_params if task == "runtime" else None
        results.extend(run_case(task, kind, rows, split, families, fold_iter, params))
    table = pd.DataFrame(results)
    print(table.drop(columns=["rmse", "r2"], errors="ignore").to_string())
    if args.split:
        return
    data = {
        "scaling": ", ".join(SCALING_DATA),
        "interference": "gavel-interference; measured-cpu-colocation and "
        "measured-h100-colocation (split by source)",
        "runtime": "neusight-graphs",
        "duration": "pollux-philly; for leave one trace out "
        f"{TRACE_ROWS:,} jobs of each of " + ", ".join(TRACES),
    }
    for task, part in table.groupby("task", sort=False):
        speeds = [
            f"- {task} {family}: {speed(task, rows, family):,.0f} rows/s (one batch of 100,000 "
            "rows)"
            for name, rows in (("scaling", scaling), ("interference", interference))
            if name == task
            for family in tab
        ]
        body = (
            f"Data: {data[task]}. {SPLITS[task]}\n\n"
            + "\n".join(_table_lines(part))
            + (_scaling_losses(part) if task == "scaling" else "")
            + (_losses(part, "mae", "MAE") if task == "interference" else "")
            + (_losses(part, "mape", "% MAPE") if task in ("runtime", "duration") else "")
            + ("\n\nBatch prediction speed (2 cores, includes contract validation and "
               "features):\n" + "\n".join(speeds) if speeds else "")
        )  # fmt: skip
        command = f"python -m benchmarks.accuracy --task {task}" + (
            " --quick" if args.quick else ""
        )
        write_section(f"accuracy-{task}", f"Prediction accuracy against baselines: {task}",
                      command, body)  # fmt: skip


# How each task's splits are built, stated under its table.
SPLITS = {
    "scaling": "Metrics pooled over the folds. Leave one cluster out (the headline): each "
    "cluster's multi-GPU rows tested with its one-GPU rows and every other cluster in training "
    "(clusters: pollux = T4, gavel = K80/P100/V100, muri = V100, sia-rtx = RTX 2080 Ti, "
    "sia-quad = Quadro RTX 6000), pooled then per held-out cluster; random: 5-fold; new GPU: "
    "each GPU type's multi-GPU rows with its one-GPU rows in training, for jobs whose scaling "
    "was measured on another GPU type; new job: 5 groups of jobs, their multi-GPU rows tested "
    "with their one-GPU rows in training. Width: the median p90/p10 of the predicted "
    "intervals. With --quick, leave one cluster out alone (gbm and fcn).",
    "interference": "Metrics pooled over the folds (random: 5-fold; job: 5 groups of "
    "workloads, both jobs of a test pair unseen; by source: trained on every Gavel pair, tested "
    "on the 7 CPU pairs or the 10 H100 pairs (two processes, no MPS) measured here, every "
    "workload new). Both jobs' speeds count as rows. "
    "Width: the median p90/p10 of the predicted intervals.",
    "runtime": "Metrics pooled over the folds (random: 5-fold; leave one GPU out: every device "
    "once, pooled then per held-out device; leave one model out: every model once, gbm alone, "
    "as every family answers a model it never saw with the op model's sum; new model on a new "
    "GPU, without --quick: each (model, device) measured, trained on the samples of neither). "
    "Width: the median p90/p10 of the predicted intervals. The graph networks' epochs (20 "
    "or 80) are chosen in each fit on its training "
    f"rows' held-out devices; with --quick rnn and gnn train {QUICK_EPOCHS} epochs instead.",
    "duration": "Metrics pooled over the folds (random: 3-fold; leave one trace out: each "
    "cluster's trace tested with the other three in training, pooled then per trace). Width: "
    "the median p90/p10 of the predicted intervals.",
}


INTERVAL_TARGET = (0.75, 0.90, 2.0)  # issue 32: coverage band and median p90/p10 for scaling


def _losses(table: pd.DataFrame, metric: str, unit: str, skip: tuple[str, ...] = ()) -> str:
    """A line per split (pooled or one held-out source) and model whose `metric` is above a
    baseline's of the same run (baselines named in `skip` aside), or equal to it (a model that
    answers as the baseline does); "nowhere" said plainly."""
    lines = []
    for split, rows in table.groupby("split", sort=False):
        models = rows[~rows["model"].str.startswith("baseline")]
        bases = rows[rows["model"].str.startswith("baseline") & ~rows["model"].isin(skip)]
        for model in models.itertuples():
            score = getattr(model, metric)
            for verb in ("loses to", "ties with"):
                named = [
                    f"{b.model.removeprefix('baseline: ')} ({getattr(b, metric):.3g})"
                    for b in bases.itertuples()
                    if _against(getattr(b, metric), score) == verb
                ]
                if named:
                    lines.append(
                        f"- {split}, {model.model} ({score:.3g} {unit}) {verb} " + ", ".join(named)
                    )
    head = f"\n\nWhere a model loses to (or ties with) a baseline of the same run ({unit}):\n"
    return head + (
        "\n".join(lines)
        if lines
        else "- nowhere: every model beats every baseline on every split and held-out source"
    )


def _against(baseline: float, score: float) -> str | None:
    """How a model's error `score` compares with a baseline's (lower is better)."""
    if np.isclose(baseline, score, rtol=1e-9, atol=0.0):
        return "ties with"
    return "loses to" if baseline < score else None


def _scaling_losses(table: pd.DataFrame) -> str:
    """`_losses` in MAPE against perfect scaling and the overhead baseline, then whether each
    split's pooled intervals meet INTERVAL_TARGET (the per-cluster rows are left out)."""
    losses = _losses(table, "mape", "% MAPE", skip=("baseline: train mean",))
    pooled = table[~table["split"].str.contains(":") & table["interval_coverage"].notna()]
    targets = [
        f"- {r.split}, {r.model}: coverage {r.interval_coverage:.0%}, width "
        f"{r.median_p90_p10:.2f} (narrowest possible {r.narrowest_p90_p10:.2f}): "
        + ("met" if INTERVAL_TARGET[0] <= r.interval_coverage <= INTERVAL_TARGET[1]
           and r.median_p90_p10 < INTERVAL_TARGET[2] else "**missed**")
        for r in pooled.itertuples()
    ]  # fmt: skip
    head = (
        f"\n\nInterval target, pooled per split (coverage "
        f"{INTERVAL_TARGET[0]:.0%}-{INTERVAL_TARGET[1]:.0%}, median p90/p10 under "
        f"{INTERVAL_TARGET[2]}). Narrowest possible: the p90/p10 of the narrowest interval of "
        f"one scale around the model's p50 (the same factors on every row) holding "
        f"{INTERVAL_TARGET[0]:.0%} of the rows, placed knowing the answers "
        f"(`training.metrics.narrowest_width`); where it is above {INTERVAL_TARGET[2]}, no "
        f"calibration of that p50 meets the target, only a better p50 can:\n"
    )
    return losses + (head + "\n".join(targets) if targets else "")


def _table_lines(table: pd.DataFrame) -> list[str]:
    lines = [
        "| split | model | n | MAPE % | MAE | Spearman | p10-p90 coverage | width p90/p10 "
        "| fit s (all folds) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in table.itertuples():
        coverage = getattr(r, "interval_coverage", np.nan)
        width = getattr(r, "median_p90_p10", np.nan)
        cov = "" if pd.isna(coverage) else f"{coverage:.0%}"
        wide = "" if pd.isna(width) else f"{width:.2f}"
        fit = "" if pd.isna(r.fit_s) else f"{r.fit_s:.1f}"
        lines.append(
            f"| {r.split} | {r.model} | {r.n} | {r.mape:.1f} | {r.mae:.4g} "
            f"| {r.spearman:.3f} | {cov} | {wide} | {fit} |"
        )
    return lines


if __name__ == "__main__":
    main()

"""Query task accuracy: a big-data job's run time from its DAG, per engine, on honest splits.

Run: `.venv/bin/python -m benchmarks.query` (writes section `query` of docs/BENCHMARKS.md).
For each engine (DuckDB: `measured-cpu-tpch-sweep`, measured here; Spark: `decima-tpch-stages`,
job time replayed from Decima's measured task durations) and each split:
- `query`: queries held out, 5 folds over the queries (each query is predicted once, by a model
  that never saw it, on any scale or resource setting);
- `scale`: the engine's largest scale predicted from its smaller ones (DuckDB sf 1 from 0.1 and
  0.3; Spark 50g from 2g..20g).
Every family (gbm, fcn, rnn, gnn) against two baselines fitted on the same training rows: the
training median, and the physical base alone (`QueryPredictor.base_ms`). Reported: MAPE over
the held-out runs, p10-p90 coverage, and the median p90/p10 width ratio.

Each (engine, split, model) result is kept under the state directory as it is measured, so
several processes can share the work (`--engines`, `--families`) and a cut-off run resumes;
the section is written once every result is there. `--fresh` forgets the kept results.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.report import write_section
from perfcast import datasets
from perfcast.datasets.splits import folds
from perfcast.features.plans import PlanRates
from perfcast.paths import state_dir
from perfcast.predictor import FAMILIES, make_predictor

COMMAND = ".venv/bin/python -m benchmarks.query"
ENGINES = {
    "DuckDB (measured here)": "measured-cpu-tpch-sweep",
    "Spark (Decima)": "decima-tpch-stages",
}
SPLITS = ("query", "scale")
BASELINES = ("median", "base")
LABELS = {"median": "train median", "base": "physical base alone"}


def _kept(engine: str, split: str, family: str) -> Path:
    return state_dir() / "bench-query" / f"{ENGINES[engine]}-{split}-{family}.json"


def _truth(rows: pd.DataFrame) -> pd.Series:
    return rows.drop_duplicates("sample_id").set_index("sample_id")["e2e_latency_ms"]


def _held_out(rows: pd.DataFrame, split: str, family: str, epochs: int) -> pd.DataFrame:
    """Predictions (y, p10, p90, truth) of every held-out run of `split`, pooled over folds;
    the baselines come from the same folds."""
    parts = []
    for train_idx, test_idx in folds(rows, "plan", split, n_folds=5):
        train, test = rows.iloc[train_idx], rows.iloc[test_idx]
        truth = _truth(test)
        if family == "median":
            y = np.full(len(truth), _truth(train).median())
            out = pd.DataFrame({"y": y, "p10": np.nan, "p90": np.nan}, index=truth.index)
        elif family == "base":  # the rates QueryPredictor learns, and nothing else
            y = PlanRates().fit(train).base_ms(test).reindex(truth.index)
            out = pd.DataFrame({"y": y, "p10": np.nan, "p90": np.nan}, index=truth.index)
        else:
            params = {"epochs": epochs} if family in ("rnn", "gnn") else {}
            predictor = make_predictor("query", family, **params).fit(train)
            pred = predictor.predict_interval(test).reindex(truth.index)
            target = "e2e_latency_ms"
            out = pred[[target, f"{target}_p10", f"{target}_p90", "flags"]]
            out = out.set_axis(["y", "p10", "p90", "flags"], axis=1)
        parts.append(out.assign(truth=truth))
    return pd.concat(parts)


def _metrics(out: pd.DataFrame) -> dict[str, float]:
    ape = (out["y"] - out["truth"]).abs() / out["truth"]
    inside = (out["truth"] >= out["p10"]) & (out["truth"] <= out["p90"])
    return {
        "runs": len(out),
        "mape": float(ape.mean() * 100),
        "coverage": float(inside.mean()) if out["p10"].notna().any() else np.nan,
        "width": float((out["p90"] / out["p10"]).median()) if out["p10"].notna().any() else np.nan,
    }


def _line(engine: str, split: str, family: str, m: dict) -> str:
    coverage = "" if m["coverage"] is None else f"{m['coverage']:.0%}"
    width = "" if m["width"] is None else f"{m['width']:.2f}"
    return (
        f"| {engine} | {split} | {LABELS.get(family, family)} | {m['runs']} | {m['mape']:.1f} | "
        f"{coverage} | {width} | {m['seconds']:.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-write", action="store_true", help="print, do not write the doc")
    parser.add_argument("--epochs", type=int, default=20, help="rnn/gnn training epochs")
    parser.add_argument("--engines", default=",".join(ENGINES.values()))
    parser.add_argument("--families", default=",".join((*BASELINES, *FAMILIES["query"])))
    parser.add_argument("--fresh", action="store_true", help="forget kept results first")
    parser.add_argument(
        "--partial", action="store_true", help="write the section with what is kept so far"
    )
    args = parser.parse_args()
    if args.fresh:
        shutil.rmtree(state_dir() / "bench-query", ignore_errors=True)
    every = [*BASELINES, *FAMILIES["query"]]
    for engine, name in ENGINES.items():
        if name not in args.engines.split(","):
            continue
        rows = datasets.load(name)
        for split in SPLITS:
            for family in filter(None, args.families.split(",")):
                kept = _kept(engine, split, family)
                if kept.exists():
                    continue
                start = time.perf_counter()
                m = _metrics(_held_out(rows, split, family, args.epochs))
                m["seconds"] = time.perf_counter() - start
                m = {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in m.items()}
                kept.parent.mkdir(parents=True, exist_ok=True)
                kept.write_text(json.dumps(m))
                print(_line(engine, split, family, m), flush=True)
    missing = [
        (e, s, f) for e in ENGINES for s in SPLITS for f in every if not _kept(e, s, f).exists()
    ]
    if missing and not args.partial:
        print(f"{len(missing)} results still to measure, e.g. {missing[0]}; section not written")
        return
    lines = [
        "| engine | split | model | held-out runs | MAPE % | p10-p90 coverage | p90/p10 "
        "| fit+predict s |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for e in ENGINES:
        for s in SPLITS:
            for f in every:
                if _kept(e, s, f).exists():
                    lines.append(_line(e, s, f, json.loads(_kept(e, s, f).read_text())))
                else:
                    lines.append(f"| {e} | {s} | {LABELS.get(f, f)} | not measured: cut off |")
    body = (
        "A big-data job's run time from its DAG, input scale and resources (`query` task). "
        "`query`: queries held out (5 folds over the queries, so every query is predicted by "
        "a model that never saw it); `scale`: each engine's largest scale predicted from its "
        "smaller ones (DuckDB sf 1 from 0.1-0.3, Spark 50g from 2g-20g). Baselines fitted on "
        "the same training rows; rnn and gnn trained for 20 epochs. Spark job times are "
        "replayed from Decima's measured task durations (no end-to-end time in the source); "
        "DuckDB times were measured on this 2-core VM with nothing else running (median "
        "repeat-to-repeat variation 6%). The seconds column is wall time on this machine, "
        "shared with other work. Chou reports about 8% error on Hive jobs.\n\n"
        "The DuckDB base is fitted on the relative error, which puts it below the median: "
        "every family's p50 is a median (of log time), and the base shifted to the training "
        "runs' median ratio errs 45.1% on unseen queries where the base alone errs 38.8%. "
        "DuckDB's own per-operator times (`EXPLAIN ANALYZE`), summed plus the best constant, "
        "are 13% (MAPE) from the same runs' end-to-end times at one thread and 45% at two (its "
        "profiler adds the threads' times; a second thread gives 1.05-1.3x at the median, not "
        "2x): what is missing is each operator's cost beyond its rows (the base errs 39% on "
        "unseen queries: the truth is 0.65x the base on q6, 2.8x on q19, median by query), "
        "not the sum. An Amdahl base (a shared and an unshared cost per row for each "
        "operator kind) was tried: base alone 37.5% -> 34.3% on the largest scale, but gbm "
        "and fcn worse on both splits (unseen queries gbm 47.3% -> 48.7%, fcn 41.9% -> "
        "43.8%), so not kept.\n\n" + "\n".join(lines)
    )
    if args.no_write:
        print(body)
    else:
        print(f"wrote {write_section('query', 'Query task: job time from its DAG', COMMAND, body)}")


if __name__ == "__main__":
    main()

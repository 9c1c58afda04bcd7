"""How differently each cluster's links move a job's gradients, beyond what its link facts say:
why a cluster never seen at scale is hard to predict (issue 32's leave-one-cluster-out target).

The scaling model fits, per (job, cluster, spread), the *effective* gradient bytes B that its
links (the interconnect table's figures) would have to move to explain the measured steps. If
the link facts were the whole story, B / (parameters x 4 bytes) would be about the same for a
job on every cluster. This prints that ratio across nodes for every job measured on several
clusters, fitted on all the scaling data (gbm; B does not depend on the family), and writes
section `scaling-clusters` of docs/BENCHMARKS.md.

    .venv/bin/python -m benchmarks.scaling_clusters [--no-write]
"""

from __future__ import annotations

import argparse
import sys
import textwrap

import numpy as np
import pandas as pd

from benchmarks.accuracy import _scaling_rows
from benchmarks.report import markdown, write_section
from perfcast.features.devices import interconnect_of
from perfcast.features.scaling import nominal_gradient_bytes
from perfcast.predictor import make_predictor

ACROSS = 1  # the spread whose bytes cross the network


def effective_ratios(rows: pd.DataFrame) -> pd.DataFrame:
    """B / nominal gradient bytes across nodes, a row per job measured across nodes on two or
    more clusters, a column per cluster (NaN where the job was not measured there)."""
    model = make_predictor("scaling", "gbm").fit(rows)
    fitted = [
        (job, cluster, float(np.exp(log_bytes)))
        for (job, cluster, spread), (log_bytes, _) in model.bytes_.items()
        if spread == ACROSS
    ]
    table = pd.DataFrame(fitted, columns=["job", "cluster", "bytes"])
    nominal = nominal_gradient_bytes(table["job"].to_numpy(), np.full(len(table), np.nan))
    table["ratio"] = table["bytes"] / nominal
    wide = table.pivot(index="job", columns="cluster", values="ratio")
    return wide[wide.notna().sum(axis=1) >= 2].dropna(axis=1, how="all")


def _links(rows: pd.DataFrame) -> str:
    """Each cluster's network figure as the interconnect table gives it."""
    pairs = rows[["gpu_type", "cluster"]].drop_duplicates().sort_values("cluster")
    return ", ".join(
        f"{c} ({g}) {interconnect_of(g, c)[1]:g} GB/s" for g, c in pairs.itertuples(index=False)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    rows = _scaling_rows()
    wide = effective_ratios(rows)
    medians = wide.median()
    table = wide.reset_index().rename(columns={"job": "job (B / nominal bytes)"})
    wrap = textwrap.fill  # prose at 100 columns (docs/BENCHMARKS.md's lines stay short)
    body = "\n\n".join(
        [
            wrap(
                "Fitted effective gradient bytes across nodes ÷ the job's parameters × 4 bytes, "
                "for every job measured across nodes on two or more clusters (gbm fitted on all "
                "the scaling data). The network figures the model is given: " + _links(rows) + ".",
                width=100,
            ),
            markdown(table, digits=2),
            wrap(
                "Median per cluster: "
                + ", ".join(f"{c} {v:.2f}" for c, v in medians.items() if np.isfinite(v))
                + ". A cluster whose ratio differs from the others' by a factor is one whose links "
                "do not perform as their figures say (transport, NIC sharing, stragglers): a model "
                "that has not seen that cluster at scale answers with the other clusters' ratio, "
                "and no form of the step time can know better from the one-GPU rows alone. "
                "`POST /v1/observe` (a few measured configurations) fixes it per job; a measured "
                "all-reduce bandwidth per cluster would fix it for every job.",
                width=100,
            ),
        ]
    )
    print(body)
    if not args.no_write:
        command = " ".join([".venv/bin/python -m benchmarks.scaling_clusters", *sys.argv[1:]])
        path = write_section("scaling-clusters", "Scaling: links per cluster", command, body)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()

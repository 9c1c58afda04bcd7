"""Features for the `query` task: a big-data job's run time from its DAG (the `plan` table).

Two forms of DAG share the table: operator plans (DuckDB: a node is an operator with its row
counts) and stage DAGs (Spark: a node is a stage of `num_tasks` tasks of `task_ms` each).
Each node gets a work and a time on the run's parallelism (threads or executors):
- an operator's work is the rows it reads and writes (its inputs' cardinalities and its own;
  a scan reads its share of the run's `rows_scanned` when given); its time is work / threads;
- a stage's work is num_tasks x task_ms; its time is the waves it needs, ceil(tasks /
  executors), x task_ms.
The physical base is the plan's time through its DAG: the longest path for stage DAGs (Spark
runs independent stages at once) at one learned rate; for operator plans (DuckDB runs a plan's
pipelines one after another, each on all threads) a fixed cost plus a learned cost per row and
thread for each operator kind. `PlanRates` learns both from training runs; the models predict
log(e2e / base). Views of a plan:
- `plan_table`: one row per run, aggregates of the DAG (for gbm and fcn);
- `plan_graphs`: node features in topological order with the edges (for the rnn and the gnn),
  laid out as `features.graphs.GraphArrays` (11 op-kind slots, then 5 numbers, the last the
  node's share of the base) so the graph models read either.
"""

from __future__ import annotations

import json
from typing import Self

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from perfcast.datasets.contract import PLAN_RUN_COLUMNS
from perfcast.errors import ContractError
from perfcast.features.graphs import NODE_FEATURES, OP_KINDS, GraphArrays

PLAN_OP_KINDS = (
    "scan", "filter", "projection", "hash_join", "join_other", "group_by", "aggregate", "sort",
    "stage", "misc", "other",
)  # fmt: skip
assert len(PLAN_OP_KINDS) == len(OP_KINDS)  # the graph models' node layout
_KIND_RULES = (  # first match wins
    ("scan", "scan"), ("filter", "filter"), ("projection", "projection"),
    ("hash_join", "hash_join"), ("join", "join_other"), ("cross_product", "join_other"),
    ("group_by", "group_by"), ("aggregate", "aggregate"), ("order_by", "sort"),
    ("top_n", "sort"), ("stage", "stage"), ("limit", "misc"), ("window", "misc"),
    ("union", "misc"), ("cte", "misc"),
)  # fmt: skip
MB_PER_SCALE_FACTOR = 1000.0  # TPC-H scale factor 1 is about 1 GB of data


def op_kind(op: pd.Series) -> pd.Series:
    """Normalized operator kind (`PLAN_OP_KINDS`) of engine operator names."""
    text = op.astype(str).str.lower()
    kind = pd.Series("other", index=op.index)
    for pattern, name in reversed(_KIND_RULES):
        kind = kind.mask(text.str.contains(pattern, regex=False), name)
    return kind


def runs(plan: pd.DataFrame) -> pd.DataFrame:
    """One row per run (sample) with the run columns, in first-appearance order."""
    present = [c for c in PLAN_RUN_COLUMNS if c in plan.columns]
    return plan.drop_duplicates("sample_id")[present].set_index("sample_id")


def _parsed_inputs(plan: pd.DataFrame) -> pd.Series:
    return plan["inputs"].map(json.loads)


def topological(ids: list[int], inputs: list[list[int]], sample_id: str) -> list[int]:
    """Positions of the nodes with every node after its inputs (inputs outside the sample are
    ignored); a cycle is refused naming the sample."""
    position = {node: i for i, node in enumerate(ids)}
    parents = [[position[p] for p in ins if p in position] for ins in inputs]
    waiting = [len(p) for p in parents]
    children: list[list[int]] = [[] for _ in ids]
    for child, ps in enumerate(parents):
        for p in ps:
            children[p].append(child)
    order, stack = [], [i for i in range(len(ids)) if waiting[i] == 0][::-1]
    while stack:
        i = stack.pop()
        order.append(i)
        for child in children[i]:
            waiting[child] -= 1
            if waiting[child] == 0:
                stack.append(child)
    if len(order) != len(ids):
        raise ContractError(f"plan {sample_id!r} has a cycle in its inputs", column="inputs")
    return order


def _column(table: pd.DataFrame, name: str) -> pd.Series:
    """An optional numeric column as floats, all missing when absent."""
    if name not in table.columns:
        return pd.Series(np.nan, index=table.index)
    return table[name].astype("Float64").astype(float)


def node_table(plan: pd.DataFrame) -> pd.DataFrame:
    """Per node: kind, form, work and time at the run's parallelism (in the form's units)."""
    nodes = plan.reset_index(drop=True)
    kind = op_kind(nodes["op"])
    is_stage = kind == "stage"
    parallel = nodes["threads"].astype(float)
    out = pd.DataFrame({"sample_id": nodes["sample_id"], "node_id": nodes["node_id"]})
    out["kind"] = kind
    out["stage"] = is_stage
    card = _column(nodes, "cardinality")
    if (~is_stage & card.isna()).any():
        sample = nodes.loc[~is_stage & card.isna(), "sample_id"].iloc[0]
        raise ContractError(
            f"operator plan {sample!r} has operators without a cardinality: the query task "
            "needs every operator's row count",
            column="cardinality",
        )
    out["cardinality"] = card
    # rows an operator reads: the cardinalities of the operators feeding it
    pairs = zip(nodes["sample_id"], nodes["node_id"], strict=True)
    key = dict(zip(pairs, card.fillna(0.0), strict=True))
    inputs = _parsed_inputs(nodes)
    read = [
        sum(key.get((s, p), 0.0) for p in ins)
        for s, ins in zip(nodes["sample_id"], inputs, strict=True)
    ]
    out["inputs"] = inputs
    rows_work = card.fillna(0.0) + np.asarray(read, dtype=float)
    # a scan reads its table, not the rows it passes on (filters are pushed into it): where
    # the run says how many rows its scans read, they are shared out by the scans' output
    scans = kind == "scan"
    scanned = _column(nodes, "rows_scanned")
    share = card.where(scans, 0.0).fillna(0.0) + scans
    share = share / share.groupby(nodes["sample_id"]).transform("sum").replace(0.0, 1.0)
    rows_work = rows_work + (scanned * share).fillna(0.0)
    tasks, task_ms = _column(nodes, "num_tasks"), _column(nodes, "task_ms")
    missing = is_stage & (tasks.isna() | task_ms.isna())
    if missing.any():
        raise ContractError(
            f"stage DAG {nodes.loc[missing, 'sample_id'].iloc[0]!r} has stages without "
            "num_tasks or task_ms",
            column="num_tasks",
        )
    waves = np.ceil(tasks / parallel)
    out["work"] = np.where(is_stage, tasks * task_ms, rows_work)
    out["time"] = np.where(is_stage, waves * task_ms, rows_work / parallel)
    out["tasks"] = np.where(is_stage, tasks, np.nan)
    return out


def _through_dag(part: pd.DataFrame) -> tuple[float, np.ndarray, list[int]]:
    """(time through the DAG, per-node critical flag, topological order) of one run."""
    ids = part["node_id"].tolist()
    inputs = part["inputs"].tolist()
    order = topological(ids, inputs, str(part["sample_id"].iat[0]))
    time = part["time"].to_numpy(dtype=float)
    if not part["stage"].to_numpy().all():  # operator plan: pipelines one after another
        return float(time.sum()), np.ones(len(ids), dtype=bool), order
    position = {node: i for i, node in enumerate(ids)}
    finish = np.zeros(len(ids))
    best_parent = np.full(len(ids), -1)
    for i in order:
        parents = [position[p] for p in inputs[i] if p in position]
        if parents:
            best_parent[i] = max(parents, key=lambda p: finish[p])
            finish[i] = finish[best_parent[i]]
        finish[i] += time[i]
    critical = np.zeros(len(ids), dtype=bool)
    node = int(np.argmax(finish))
    while node >= 0:
        critical[node] = True
        node = int(best_parent[node])
    return float(finish.max()), critical, order


def form(plan: pd.DataFrame) -> pd.Series:
    """Each run's DAG form, "stage" or "operator", indexed by sample_id."""
    stage = op_kind(plan["op"]) == "stage"
    return (
        stage.groupby(plan["sample_id"], sort=False).all().map({True: "stage", False: "operator"})
    )


class PlanRates:
    """The physical base's learned rates, per DAG form.

    Stage DAGs: milliseconds per unit of the longest path (already in ms), the median of
    e2e / base units over the training runs. Operator plans: a fixed cost per run plus a cost
    per row and thread for each operator kind, e2e ~ overhead + sum_k rate_k x rows_k / threads,
    fitted by non-negative least squares on the relative error (a hash join's row costs more
    than a projection's; no rate or overhead can be negative, so no plan is predicted faster
    for doing more work). With fewer operator runs than rates to fit, one median rate."""

    def fit(
        self,
        plan: pd.DataFrame,
        nodes: pd.DataFrame | None = None,
        units: pd.Series | None = None,
    ) -> Self:
        """Fit on `plan`'s runs; `nodes` and `units` where the caller already has them (they
        may cover more runs than `plan`: only `plan`'s are read)."""
        nodes = node_table(plan) if nodes is None else nodes
        units = base_units(plan, nodes) if units is None else units
        info = runs(plan).join(form(plan).rename("form"))
        ratio = info["e2e_latency_ms"] / units.reindex(info.index)
        self.rates_ = ratio.groupby(info["form"]).median().to_dict()
        self.default_ = float(ratio.median())
        self.overhead_ms_, self.kind_rates_ = 0.0, {}
        operator = info.index[info["form"] == "operator"]
        if len(operator) > len(PLAN_OP_KINDS) + 1:
            self.overhead_ms_, self.kind_rates_ = _kind_rates(
                _time_by_kind(nodes).reindex(operator),
                info.loc[operator, "e2e_latency_ms"].to_numpy(dtype=float),
            )
        return self

    def base_ms(
        self,
        plan: pd.DataFrame,
        nodes: pd.DataFrame | None = None,
        units: pd.Series | None = None,
    ) -> pd.Series:
        """Each run's base in ms; `nodes` and `units` where the caller already has them."""
        nodes = node_table(plan) if nodes is None else nodes
        units = base_units(plan, nodes) if units is None else units
        forms = form(plan).reindex(units.index)
        base = units * forms.map(self.rates_).fillna(self.default_)
        if self.kind_rates_:
            operator = forms == "operator"
            by_kind = _time_by_kind(nodes).reindex(units.index)
            rates = pd.Series(self.kind_rates_).reindex(PLAN_OP_KINDS).fillna(0.0)
            fitted = self.overhead_ms_ + by_kind.to_numpy() @ rates.to_numpy()
            base = base.where(~operator, fitted)
        return base.clip(lower=1e-9)


def _time_by_kind(nodes: pd.DataFrame) -> pd.DataFrame:
    """Per run (rows) and operator kind (columns): the rows read and written per thread."""
    by_kind = nodes.groupby(["sample_id", "kind"], sort=False)["time"].sum().unstack("kind")
    return by_kind.reindex(columns=list(PLAN_OP_KINDS)).fillna(0.0)


def _kind_rates(by_kind: pd.DataFrame, e2e_ms: np.ndarray) -> tuple[float, dict[str, float]]:
    """(overhead ms, ms per row and thread by kind): NNLS of 1 ~ (overhead + X rates) / e2e."""
    X = np.column_stack([np.ones(len(by_kind)), by_kind.to_numpy(dtype=float)])
    scale = X.max(axis=0)
    scale[scale <= 0] = 1.0  # a kind no training run has: its rate stays 0
    coef, _ = nnls(X / scale / e2e_ms[:, None], np.ones(len(X)))
    coef = coef / scale
    return float(coef[0]), dict(zip(by_kind.columns, coef[1:].tolist(), strict=True))


def base_units(plan: pd.DataFrame, nodes: pd.DataFrame | None = None) -> pd.Series:
    """Each run's time through its DAG in the form's units, indexed by sample_id."""
    nodes = node_table(plan) if nodes is None else nodes
    values = {s: _through_dag(part)[0] for s, part in nodes.groupby("sample_id", sort=False)}
    return pd.Series(values).reindex(runs(plan).index).clip(lower=1e-9)


def plan_table(plan: pd.DataFrame, rates: PlanRates) -> tuple[pd.DataFrame, np.ndarray]:
    """(features per run, log physical base in ms per run), indexed by sample_id."""
    nodes = node_table(plan)
    info = runs(plan)
    units = base_units(plan, nodes)
    base = rates.base_ms(plan, nodes, units)
    grouped = nodes.groupby(["sample_id", "kind"], sort=False)
    work_by_kind = grouped["work"].sum().unstack("kind").reindex(
        index=info.index, columns=PLAN_OP_KINDS
    ).fillna(0.0)  # fmt: skip
    count_by_kind = grouped.size().unstack("kind").reindex(
        index=info.index, columns=PLAN_OP_KINDS
    ).fillna(0.0)  # fmt: skip
    per_run = nodes.groupby("sample_id", sort=False)
    total_work = per_run["work"].sum().reindex(info.index)
    total_time = per_run["time"].sum().reindex(info.index)
    X = pd.DataFrame(index=info.index)
    X["stage_dag"] = (form(plan).reindex(info.index) == "stage").astype(float)
    X["log_scale"] = np.log(info["scale_factor"].astype(float))
    X["log_parallelism"] = np.log2(info["threads"].astype(float))
    data_mb = info["scale_factor"].astype(float) * MB_PER_SCALE_FACTOR
    X["log_memory_vs_data"] = np.log2(_column(info, "memory_limit_mb") / data_mb)
    X["log_base_units"] = np.log(units)
    X["log_work"] = np.log1p(total_work)
    # how much of the work the parallelism leaves on one path (1: a chain)
    X["path_share"] = units / total_time.clip(lower=1e-9)
    X["log_nodes"] = np.log(per_run.size().reindex(info.index).astype(float))
    X["log_tasks"] = np.log1p(per_run["tasks"].sum().reindex(info.index))
    X["log_max_card"] = np.log1p(per_run["cardinality"].max().reindex(info.index)).fillna(0.0)
    for kind in PLAN_OP_KINDS:
        X[f"work_share_{kind}"] = work_by_kind[kind] / total_work.clip(lower=1e-9)
        X[f"log_n_{kind}"] = np.log1p(count_by_kind[kind])
    return X, np.log(base.to_numpy(dtype=float))


def plan_graphs(
    plan: pd.DataFrame, rates: PlanRates, table: pd.DataFrame | None = None
) -> list[GraphArrays]:
    """Per run: node features in topological order (inputs first), edges input -> consumer,
    the run's `plan_table` row as global features."""
    if table is None:
        table, log_base = plan_table(plan, rates)
    else:
        log_base = np.log(rates.base_ms(plan).reindex(table.index).to_numpy(dtype=float))
    globals_ = table.fillna(0.0)
    base_by_run = dict(zip(table.index, log_base, strict=True))
    kind_index = {k: i for i, k in enumerate(PLAN_OP_KINDS)}
    k = len(PLAN_OP_KINDS)
    out = []
    for sample_id, part in node_table(plan).groupby("sample_id", sort=False):
        part = part.reset_index(drop=True)
        _, critical, order = _through_dag(part)
        part, critical = part.iloc[order].reset_index(drop=True), critical[order]
        n = len(part)
        x = np.zeros((n, NODE_FEATURES), dtype=np.float32)
        x[np.arange(n), part["kind"].map(kind_index).to_numpy()] = 1.0
        time = part["time"].to_numpy(dtype=float)
        x[:, k] = np.log1p(part["work"].to_numpy(dtype=float)) / 20
        x[:, k + 1] = np.log1p(part["cardinality"].fillna(part["tasks"]).to_numpy(float)) / 20
        x[:, k + 2] = np.log1p(time) / 20
        x[:, k + 3] = critical
        x[:, k + 4] = time / max(time.sum(), 1e-12)
        position = {node: i for i, node in enumerate(part["node_id"].to_numpy())}
        src, dst = [], []
        for i, inputs in enumerate(part["inputs"]):
            for p in inputs:
                if p in position:
                    src.append(position[p])
                    dst.append(i)
        out.append(
            GraphArrays(
                str(sample_id),
                x,
                np.array([src, dst], dtype=np.int64).reshape(2, -1),
                globals_.loc[sample_id].to_numpy(dtype=np.float32),
                float(base_by_run[sample_id]),
            )
        )
    return out

"""Features for the `runtime` task: a model's iteration latency from its operator graph.

Every node gets a roofline time on the sample's device, max(flops / peak, bytes / bandwidth)
(GEMMs at the peak of the device's matrix units), and a repeat count: a graph that traces one
transformer layer of a `num_layers`-layer model runs that layer's nodes `num_layers` times.
Their weighted sum is the physical base the models correct (they predict log(latency / base)),
so a faster device, seen or not, moves the prediction the right way. Views of a graph:
- `op_table`: one row per node that does work, with features of the op against the device (for
  the per-operator latency model, trained on measured node latencies as in NeuSight);
- `sample_table`: one row per sample, aggregated per op kind (for the tabular models);
- `node_arrays`: per-node feature matrices in topological order with the graph's edges (for
  the RNN and the GNN).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfcast.datasets.contract import GRAPH_SAMPLE_COLUMNS
from perfcast.errors import ContractError
from perfcast.features.devices import SPEC_COLUMNS, fill_specs, matrix_speedup

# op kinds that get their own aggregate columns; anything else counts as "other"
OP_KINDS = (
    "linear", "bmm", "conv2d", "softmax", "layernorm", "elementwise", "embedding", "dropout",
    "activation", "reduction", "other",
)  # fmt: skip
_MS = 1e3
GEMM_KINDS = ("linear", "bmm", "conv2d")
# a node of a numbered layer: `transformer.h.0.ln_1`, `bert.encoder.layer.3.output.dense`, ...
_LAYER_NAME = r"(?:^|[._])(?:h|layer|layers|block|blocks)[._]\d+(?:[._]|$)"


def _normalize_op(op: pd.Series) -> pd.Series:
    return op.where(op.isin(OP_KINDS[:-1]), "other")


def node_repeat(nodes: pd.DataFrame) -> pd.Series:
    """How many times each node runs per iteration. NeuSight traces ONE layer (with the
    embeddings and the head) of a `num_layers`-layer model (see datasets/sources/neusight.py):
    the nodes from the first to the last that belong to a numbered layer run
    num_layers / graph_layers times, the others once. A graph with `num_layers` but no named
    layer repeats whole; graphs without `num_layers` run once."""
    if "num_layers" not in nodes.columns:
        return pd.Series(1.0, index=nodes.index)
    traced = nodes["graph_layers"] if "graph_layers" in nodes.columns else 1.0
    if (nodes["num_layers"] < 1).any() or (pd.Series(traced, index=nodes.index) < 1).any():
        bad = nodes.loc[nodes["num_layers"] < 1, "sample_id"].astype(str).unique()
        raise ContractError(
            "num_layers and graph_layers must be >= 1 (layers in the model and in the traced "
            f"graph); a layer run 0 times would drop its nodes. Samples: {', '.join(bad[:3])}",
            column="num_layers",
        )
    times = (nodes["num_layers"].astype(float) / traced).fillna(1.0)
    names = pd.Series("", index=nodes.index)
    for column in ("fx_target", "node_name"):
        if column in nodes.columns:
            names = names + " " + nodes[column].fillna("").astype(str)
    in_layer = names.str.contains(_LAYER_NAME, regex=True)
    position = nodes["node_id"].astype(float)
    layer_pos = position.where(in_layer)
    by_sample = layer_pos.groupby(nodes["sample_id"], sort=False)
    first, last = by_sample.transform("min"), by_sample.transform("max")
    block = ((position >= first) & (position <= last)) | first.isna()
    return times.where(block, 1.0)


_ROOFLINE_SPECS = ("peak_tflops_fp32", "mem_bw_gbps")


def require_device_specs(nodes: pd.DataFrame, source: str) -> None:
    """Refuse samples whose device has no peak FLOP rate or memory bandwidth (in the rows or
    in the datasheet table): their roofline, hence their prediction, would be NaN."""
    specs = fill_specs(nodes[["sample_id", "device", *[c for c in _ROOFLINE_SPECS if c in nodes]]],
                       "device")  # fmt: skip
    bad = ~(specs[list(_ROOFLINE_SPECS)] > 0).all(axis=1)
    if bad.any():
        devices = sorted(specs.loc[bad, "device"].astype(str).unique())
        sample_ids = specs.loc[bad, "sample_id"].astype(str).unique()
        raise ContractError(
            f"{source}: device(s) {', '.join(map(repr, devices))} have no "
            f"{' / '.join(_ROOFLINE_SPECS)} in the rows or in perfcast's datasheet table, so "
            f"their roofline is unknown; give those columns (or use a known device name). "
            f"{len(sample_ids)} sample(s), e.g. {sample_ids[0]!r}",
            column=_ROOFLINE_SPECS[0],
        )


def idle_in_inference(nodes: pd.DataFrame) -> pd.Series:
    """Nodes that run no kernel: dropout in an inference graph is the identity (`model.eval()`),
    whatever flops and bytes its source estimated from its shapes. NeuSight measured them at
    ~16 us each, a launch (V100: 0.53 ms in all where their bytes would take 21 ms), and
    counted as memory traffic they were 3-7% of an inference graph's roofline, the most on
    the GPUs with the least bandwidth per FLOP."""
    mode = nodes["mode"] if "mode" in nodes.columns else pd.Series("", index=nodes.index)
    return (nodes["op"] == "dropout") & (mode != "train")


def with_roofline(nodes: pd.DataFrame) -> pd.DataFrame:
    """Nodes with device specs filled, `roofline_ms` and `repeat` per node (zero time, no
    flops, no bytes for a node that runs no kernel: `idle_in_inference`)."""
    nodes = fill_specs(nodes, "device")
    idle = idle_in_inference(nodes)
    if idle.any():
        nodes["flops"] = nodes["flops"].where(~idle, 0.0)
        nodes["bytes"] = nodes["bytes"].where(~idle, 0.0)
    nodes["op_kind"] = _normalize_op(nodes["op"])
    speedup = matrix_speedup(nodes["device"]).where(nodes["op_kind"].isin(GEMM_KINDS), 1.0)
    nodes["peak_op_tflops"] = nodes["peak_tflops_fp32"] * speedup
    compute_s = nodes["flops"] / (nodes["peak_op_tflops"] * 1e12)
    memory_s = nodes["bytes"] / (nodes["mem_bw_gbps"] * 1e9)
    nodes["roofline_ms"] = np.maximum(compute_s, memory_s) * _MS
    nodes["repeat"] = node_repeat(nodes)
    return nodes


def op_table(nodes: pd.DataFrame) -> pd.DataFrame:
    """One row per node that moves bytes or computes (others take no kernel time), with
    features that relate the op to the device as ratios to physical quantities (intensity
    against the ridge point, bytes against L2, work per SM), so a tree needs no
    extrapolation to rate a new device. Keeps `sample_id`, `repeat` and `roofline_ms`."""
    if "roofline_ms" not in nodes.columns:
        nodes = with_roofline(nodes)
    busy = nodes[(nodes["flops"] > 0) | (nodes["bytes"] > 0)]
    flops, nbytes = busy["flops"].astype(float), busy["bytes"].astype(float).clip(lower=1.0)
    ridge = busy["peak_op_tflops"] * 1e12 / (busy["mem_bw_gbps"] * 1e9)
    # astype: mapping an empty column keeps its string dtype, and the division below would fail
    numel = busy["output_shape"].map(lambda s: float(np.prod(json.loads(s) or [1]))).astype(float)
    out = pd.DataFrame(index=busy.index)
    out["op"] = busy["op"].astype(str)
    out["train"] = (busy["mode"] == "train").astype(float)
    out["log_roofline_us"] = np.log(busy["roofline_ms"] * 1e3)
    out["log_flops"] = np.log1p(flops)
    out["log_bytes"] = np.log(nbytes)
    out["log_intensity_vs_ridge"] = np.log((flops + 1.0) / nbytes / ridge)
    out["log_bytes_vs_l2"] = np.log(nbytes / (busy["l2_mb"] * 2**20))
    out["log_elements_per_sm"] = np.log(numel.clip(lower=1.0) / busy["num_sm"].astype(float))
    out["log_ridge"] = np.log(ridge)
    for column in ("peak_op_tflops", "mem_bw_gbps", "num_sm", "l2_mb"):
        out[f"log_{column}"] = np.log(busy[column].astype(float))
    out["sample_id"] = busy["sample_id"]
    out["repeat"] = busy["repeat"]
    out["roofline_ms"] = busy["roofline_ms"]
    if "latency_ms" in busy.columns:
        out["latency_ms"] = busy["latency_ms"]
    return out


def samples(nodes: pd.DataFrame) -> pd.DataFrame:
    """One row per sample with the sample columns, in first-appearance order."""
    present = [c for c in GRAPH_SAMPLE_COLUMNS if c in nodes.columns]
    return nodes.drop_duplicates("sample_id")[present].set_index("sample_id")


def sample_table(nodes: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """(features per sample, log roofline base per sample), indexed by sample_id."""
    nodes = with_roofline(nodes)
    info = fill_specs(samples(nodes).reset_index(), "device").set_index("sample_id")
    nodes["roofline_ms"] *= nodes["repeat"]  # per iteration from here on
    nodes["flops"] *= nodes["repeat"]
    nodes["bytes"] *= nodes["repeat"]
    grouped = nodes.groupby(["sample_id", "op_kind"], sort=False)
    per_kind = {
        name: series.unstack("op_kind").reindex(index=info.index, columns=OP_KINDS).fillna(0.0)
        for name, series in (("n", grouped.size()), ("roofline_ms", grouped["roofline_ms"].sum()))
    }
    X = pd.DataFrame(index=info.index)
    totals = nodes.groupby("sample_id", sort=False)[["flops", "bytes", "roofline_ms"]].sum()
    totals = totals.reindex(info.index)
    X["log_flops"] = np.log1p(totals["flops"])
    X["log_bytes"] = np.log1p(totals["bytes"])
    X["log_nodes"] = np.log(nodes.groupby("sample_id", sort=False).size().reindex(info.index))
    for kind in OP_KINDS:
        X[f"roofline_share_{kind}"] = per_kind["roofline_ms"][kind] / totals["roofline_ms"]
        X[f"log_n_{kind}"] = np.log1p(per_kind["n"][kind])
    for column in SPEC_COLUMNS:
        X[column] = np.log(info[column].astype(float))
    X["train"] = (info["mode"] == "train").astype(float)
    X["log_batch"] = np.log2(info["batch_size"].astype(float))
    seq = info["seq_len"] if "seq_len" in info.columns else pd.Series(np.nan, index=info.index)
    X["log_seq"] = np.log2(seq.astype(float))
    X["log_repeat"] = np.log(nodes.groupby("sample_id", sort=False)["repeat"].max())
    return X, np.log(totals["roofline_ms"].to_numpy(dtype=float))


NODE_FEATURES = len(OP_KINDS) + 5


@dataclass
class GraphArrays:
    """One sample in arrays: node features (n, NODE_FEATURES) in topological order, edges
    (2, m) as (source, target) positions, and the sample's global features."""

    sample_id: str
    x: np.ndarray
    edges: np.ndarray
    globals: np.ndarray
    log_base: float


def node_arrays(nodes: pd.DataFrame, extra: pd.DataFrame | None = None) -> list[GraphArrays]:
    """Per-sample arrays for the sequence and graph models; `extra` adds global features."""
    nodes = with_roofline(nodes)
    table, log_base = sample_table(nodes)
    if extra is not None:
        table = table.join(extra)
    base_by_sample = dict(zip(table.index, log_base, strict=True))
    globals_by_sample = table.fillna(0.0)
    kind_index = {k: i for i, k in enumerate(OP_KINDS)}
    out = []
    for sample_id, part in nodes.groupby("sample_id", sort=False):
        n = len(part)
        x = np.zeros((n, NODE_FEATURES), dtype=np.float32)
        x[np.arange(n), part["op_kind"].map(kind_index).to_numpy()] = 1.0
        flops = part["flops"].to_numpy(dtype=float)
        nbytes = part["bytes"].to_numpy(dtype=float)
        k = len(OP_KINDS)
        x[:, k] = np.log1p(flops) / 20
        x[:, k + 1] = np.log1p(nbytes) / 20
        x[:, k + 2] = np.log1p(part["roofline_ms"].to_numpy(dtype=float) * 1e3) / 10
        x[:, k + 3] = np.log1p(flops / np.maximum(nbytes, 1.0)) / 5
        x[:, k + 4] = part["roofline_ms"].to_numpy() / max(part["roofline_ms"].sum(), 1e-12)
        position = {nid: i for i, nid in enumerate(part["node_id"].to_numpy())}
        src, dst = [], []
        for i, inputs in enumerate(part["inputs"].to_numpy()):
            for parent in json.loads(inputs):
                if parent in position:
                    src.append(position[parent])
                    dst.append(i)
        out.append(
            GraphArrays(
                str(sample_id),
                x,
                np.array([src, dst], dtype=np.int64).reshape(2, -1),
                globals_by_sample.loc[sample_id].to_numpy(dtype=np.float32),
                float(base_by_sample[sample_id]),
            )
        )
    return out

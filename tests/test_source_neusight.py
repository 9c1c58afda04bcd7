"""The NeuSight loader against values read by hand from the raw files."""

from __future__ import annotations

import ast
import gzip
import hashlib
import importlib
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from perfcast import datasets
from perfcast.datasets.contract import validate
from perfcast.datasets.fetch import fetch, shared_data_available
from perfcast.datasets.io import read_table
from perfcast.errors import ContractError, PerfcastError
from perfcast.features.graphs import node_repeat

pytestmark = pytest.mark.skipif(
    not shared_data_available(), reason="the public datasets (../shared/datasets) are not here"
)

H100_BERT = "NVIDIA_H100_80GB_HBM3/bert_large-train-512-2"


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFCAST_HOME", str(tmp_path_factory.mktemp("home")))
        return datasets.load("neusight-graphs")


def node(graphs: pd.DataFrame, sample: str, node_id: int) -> pd.Series:
    rows = graphs[(graphs["sample_id"] == sample) & (graphs["node_id"] == node_id)]
    assert len(rows) == 1
    return rows.iloc[0]


def test_counts(graphs: pd.DataFrame) -> None:
    samples = graphs.groupby("sample_id").first()
    # 103 label/*/*.csv node tables, each with its .json; label/NVIDIA_H100_80GB_HBM3 has 18.
    assert len(samples) == 103
    assert (samples["device"] == "NVIDIA_H100_80GB_HBM3").sum() == 18
    # bert_large-train-512-2.csv has 82 data lines
    assert (graphs["sample_id"] == H100_BERT).sum() == 82


def test_sample_columns_from_json_and_device_config(graphs: pd.DataFrame) -> None:
    first = node(graphs, H100_BERT, 0)
    # bert_large-train-512-2.json: {"num_layer": 24, "e2e_latency": 74.7511417388916,
    #   "fw_latency": 29.458060836791994, "bwall_latency": 45.29308090209961}
    assert first["e2e_latency_ms"] == pytest.approx(74.7511417388916)
    assert first["e2e_fw_latency_ms"] + first["e2e_bw_latency_ms"] == pytest.approx(74.75114, 1e-6)
    assert first["num_layers"] == 24
    assert (first["model"], first["mode"], first["seq_len"], first["batch_size"]) == (
        "bert_large", "train", 512, 2,
    )  # fmt: skip
    # NVIDIA_H100_80GB_HBM3.json: Dev_Mem 80, Mem_Bw 3430, Num_Sm 132, SingleFLOPs 66908 (GFLOP/s),
    # L2Cache 50
    assert first["mem_gb"] == 80
    assert first["mem_bw_gbps"] == 3430
    assert first["num_sm"] == 132
    assert first["peak_tflops_fp32"] == pytest.approx(66.908)
    assert first["l2_mb"] == 50
    assert first["op"] == "placeholder"
    assert json.loads(first["output_shape"]) == [2, 512]


def test_devices_without_config_have_missing_specs(graphs: pd.DataFrame) -> None:
    amd = graphs[graphs["device"] == "AMD_Instinct_MI250"]
    assert len(amd) > 0
    assert amd[["mem_gb", "mem_bw_gbps", "num_sm", "peak_tflops_fp32", "l2_mb"]].isna().all().all()


def test_linear_node(graphs: pd.DataFrame) -> None:
    # row 33: call_module bert.encoder.layer.0.attention.self.query, input [[2, 512, 1024]],
    # output (2, 512, 1024), latency 0.248339 = fw 0.081389 + bw 0.154650 + acc 0.012301 (ms)
    q = node(graphs, H100_BERT, 32)
    assert q["op"] == "linear"
    m, k, n = 2 * 512, 1024, 1024
    assert q["flops"] == 2 * m * k * n == 2_147_483_648
    # fp32: input 2*512*1024 + output 2*512*1024 + weight 1024*1024 elements, 4 bytes each
    assert q["bytes"] == (2 * 512 * 1024 * 2 + 1024 * 1024) * 4
    assert q["params"] == 1024 * 1024
    assert q["latency_ms"] == pytest.approx(0.081389 + 0.154650 + 0.012301, abs=2e-6)
    assert q["fw_latency_ms"] == pytest.approx(0.081389, abs=1e-6)


def test_bmm_node_and_its_inputs(graphs: pd.DataFrame) -> None:
    # row 52: matmul of permute_2 (row 50) and transpose (row 51):
    # [[2, 16, 512, 64], [2, 16, 64, 512]] -> (2, 16, 512, 512)
    mm = node(graphs, H100_BERT, 51)
    assert mm["op"] == "bmm"
    batch, m, k, n = 2 * 16, 512, 64, 512
    assert mm["flops"] == 2 * batch * m * k * n
    assert json.loads(mm["inputs"]) == [49, 50]
    assert json.loads(mm["input_shapes"]) == [[2, 16, 512, 64], [2, 16, 64, 512]]
    assert node(graphs, H100_BERT, 49)["op"] == "view"  # permute: zero cost
    assert node(graphs, H100_BERT, 49)["flops"] == 0


@pytest.mark.parametrize(
    "stem", ["bert_large-train-512-2", "gpt2_large-inf-1024-4", "opt_13-train-2048-1"]
)
def test_gemm_flops_match_neusight_opgraph(graphs: pd.DataFrame, stem: str) -> None:
    """NeuSight's results/opgraph lists each GEMM as Linear (M, K, N) or BMM (B, M, K, N); its
    total 2*prod(dims) must equal ours from the shapes exactly (same graph, same model)."""
    opgraph = pd.read_csv(fetch(f"neusight/results/opgraph/{stem}.csv"))
    expected = {"Linear": 0, "BMM": 0}
    for ops in opgraph["FwOps"]:
        for name, dims in ast.literal_eval(ops):
            if name in expected:
                expected[name] += 2 * math.prod(dims)
    sample = graphs[graphs["sample_id"] == f"NVIDIA_H100_80GB_HBM3/{stem}"]
    assert sample.loc[sample["op"] == "linear", "flops"].sum() == pytest.approx(
        expected["Linear"], rel=1e-12
    )
    assert sample.loc[sample["op"] == "bmm", "flops"].sum() == pytest.approx(
        expected["BMM"], rel=1e-12
    )


def test_op_kinds_cover_every_node(graphs: pd.DataFrame) -> None:
    assert "other" not in set(graphs["op"])
    # imported here, not at collection: importing one source module before the registry has
    # discovered them all would leave the registry holding only that module's datasets
    neusight = importlib.import_module("perfcast.datasets.sources.neusight")
    assert neusight.op_kind("call_module", "bert.encoder.layer.0.output.LayerNorm", True) == (
        "layernorm"
    )
    assert neusight.op_kind("call_function", "<built-in function add>", False) == "scalar"


@pytest.mark.parametrize(("column", "bad"), [("inputs", "[1, 2"), ("e2e_latency_ms", float("nan"))])
def test_broken_graph_file_is_refused(
    graphs: pd.DataFrame, tmp_path, column: str, bad: object
) -> None:
    small = graphs[graphs["sample_id"] == H100_BERT].copy()
    small[column] = small[column].astype(object)
    small.loc[small.index[3], column] = bad
    path = tmp_path / "broken.csv"
    small.to_csv(path, index=False)
    with pytest.raises(ContractError) as err:
        read_table(path, kind="graph")
    assert err.value.column == column
    assert column in str(err.value)


# NeuSight's other label layout, on its one real file (tests/data/neusight/README.md)
L4_SWITCH = Path(__file__).parent / "data" / "neusight" / "NVIDIA_L4" / "switch4-inf-512-1"
L4_SWITCH_SHA256 = "932ba84599bd7b3b04676efd31dcbc4463f3f210225bc1e157132ef982bda0af"


@pytest.fixture(scope="module")
def switch_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("label")
    table = folder / "switch4-inf-512-1.csv"
    table.write_bytes(gzip.decompress(L4_SWITCH.with_suffix(".csv.gz").read_bytes()))
    assert hashlib.sha256(table.read_bytes()).hexdigest() == L4_SWITCH_SHA256  # unchanged
    return table, L4_SWITCH.with_suffix(".json")


def _neusight():
    # imported late: see test_op_kinds_cover_every_node
    return importlib.import_module("perfcast.datasets.sources.neusight")


def _read_switch(table: Path, e2e: Path) -> pd.DataFrame:
    neusight = _neusight()
    return neusight.read_sample(table, e2e, "NVIDIA_L4", neusight.device_specs("NVIDIA_L4"))


def test_e2e_latency_layout_loads_like_the_other(
    graphs: pd.DataFrame, switch_files: tuple[Path, Path]
) -> None:
    sample = _read_switch(*switch_files)
    assert list(sample.columns) == list(graphs.columns)
    raw = pd.read_csv(switch_files[0])
    assert "latency" not in raw.columns and "e2e_latency" in raw.columns
    assert len(sample) == len(raw) == 3391
    assert sample["latency_ms"].to_numpy() == pytest.approx(raw["e2e_latency"].to_numpy())
    assert sample["bw_latency_ms"].to_numpy() == pytest.approx(raw["bw_latency"].to_numpy())
    # switch4-inf-512-1.json: {"num_layer": 0, "e2e_latency": 50.59174346923828, ...}
    first = sample.iloc[0]
    assert first["e2e_latency_ms"] == pytest.approx(50.59174346923828)
    assert first["mode"] == "inference" and first["batch_size"] == 1 and first["seq_len"] == 512
    assert first["peak_tflops_fp32"] == pytest.approx(31.334)  # NVIDIA_L4.json SingleFLOPs
    assert "other" not in set(sample["op"])
    assert len(validate(sample, "graph", source="switch4")) == len(sample)


def test_whole_model_graph_counts_its_layers_and_repeats_nothing(
    switch_files: tuple[Path, Path],
) -> None:
    """num_layer 0: the table traces every layer (12 encoder + 12 decoder blocks, named
    encoder_block_<i>_... / decoder_block_<i>_...), so no node may repeat, and none may vanish
    (the bug: num_layers 0 made every layer node count 0 times, predicting 4.3 ms for 50.6)."""
    sample = _read_switch(*switch_files)
    assert (sample["num_layers"] == 24).all() and (sample["graph_layers"] == 24).all()
    assert (node_repeat(sample) == 1.0).all()


def test_modules_mapped_by_class(switch_files: tuple[Path, Path]) -> None:
    sample = _read_switch(*switch_files)
    kinds = sample.assign(name=sample["fx_target"].str.rsplit(".", n=1).str[-1])
    by_name = kinds[kinds["fx_target"].str.contains(r"(?:^|\.)(?:wi|wo|q|act|softmax_0)$")]
    mapped = by_name.groupby("name")["op"].unique().map(list).to_dict()
    assert mapped == {
        "wi": ["linear"], "wo": ["linear"], "q": ["linear"], "act": ["elementwise"],
        "softmax_0": ["softmax"],
    }  # fmt: skip


def test_unknown_module_is_refused_naming_the_file(
    switch_files: tuple[Path, Path], tmp_path: Path
) -> None:
    raw = pd.read_csv(switch_files[0])
    row = raw.index[raw["target"].astype(str).str.endswith(".wi")][0]
    raw.loc[row, "target"] = raw.loc[row, "target"].replace(".wi", ".mystery")
    raw.loc[row, "meta"] = raw.loc[row, "meta"].replace("torch.nn.modules.linear.Linear", "X.Y")
    table = tmp_path / "switch4-inf-512-1.csv"
    raw.to_csv(table, index=False)
    with pytest.raises(PerfcastError, match=r"switch4-inf-512-1\.csv, row \d+.*mystery"):
        _read_switch(table, switch_files[1])


def test_table_without_latency_columns_is_refused(
    switch_files: tuple[Path, Path], tmp_path: Path
) -> None:
    table = tmp_path / "switch4-inf-512-1.csv"
    pd.read_csv(switch_files[0]).drop(columns=["e2e_latency"]).to_csv(table, index=False)
    with pytest.raises(PerfcastError, match=r"switch4-inf-512-1\.csv: no node latency columns"):
        _read_switch(table, switch_files[1])


def test_whole_model_without_numbered_layers_is_refused(
    switch_files: tuple[Path, Path], tmp_path: Path
) -> None:
    raw = pd.read_csv(switch_files[0])
    raw["Name"] = [f"node{i}" for i in range(len(raw))]
    table = tmp_path / "switch4-inf-512-1.csv"
    raw.assign(_input_nodes="[]").to_csv(table, index=False)
    with pytest.raises(PerfcastError, match=r"switch4-inf-512-1\.csv: num_layer is 0"):
        _read_switch(table, switch_files[1])

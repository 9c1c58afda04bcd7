"""The NeuSight loader against values read by hand from the raw files."""

from __future__ import annotations

import ast
import importlib
import json
import math

import pandas as pd
import pytest

from perfcast import datasets
from perfcast.datasets.fetch import fetch, shared_data_available
from perfcast.datasets.io import read_table
from perfcast.errors import ContractError

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

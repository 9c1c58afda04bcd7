"""Scaling rows within physical bounds (issue 32): GPU counts, node counts, GPUs per node,
local batch sizes and link bandwidths beyond what any cluster has are refused alike by the data
contract (`validate`, its few-row fast path), the service (422 naming the field and the bound,
on every route that takes or builds scaling rows) and the CLI; the bounds themselves are not.

The service here answers with a stand-in scaling model that checks its rows against the
contract as the predictors do and predicts 1 s: what is tested is which rows are refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from perfcast.cli import app as perfcast_cli
from perfcast.datasets.contract import (
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_LINK_BW_GBPS,
    MAX_LOCAL_BATCH_SIZE,
    MAX_NODES,
    few_row_columns,
    validate,
    validate_prediction_rows,
)
from perfcast.errors import ContractError, PerfcastError
from perfcast.optimizer import candidates
from perfcast.predictor.base import CheckedRows
from perfcast.serving.app import create_app
from perfcast.serving.models import ServedModels
from perfcast.serving.settings import Settings
from perfcast.training import model_store

TARGETS = ("step_time_s",)
ROW = {"job": "resnet18", "gpu_type": "v100", "num_nodes": 1, "num_gpus": 4,
       "local_batch_size": 128}  # fmt: skip
# the largest row of every bound at once: 65536 GPUs on 1024 nodes (64 a node)
EDGE = {**ROW, "num_gpus": MAX_GPUS, "num_nodes": MAX_GPUS // MAX_GPUS_PER_NODE,
        "local_batch_size": MAX_LOCAL_BATCH_SIZE, "intra_node_bw_gbps": MAX_LINK_BW_GBPS,
        "inter_node_bw_gbps": MAX_LINK_BW_GBPS}  # fmt: skip

# (the change to ROW, the field named, the bound's words)
OVER = [
    ({"num_gpus": 10**18}, "num_gpus", "num_gpus must be <= 65536"),
    ({"num_gpus": MAX_GPUS + 1, "num_nodes": 2048}, "num_gpus", "num_gpus must be <= 65536"),
    ({"num_nodes": MAX_NODES + 1, "num_gpus": 16384}, "num_nodes", "num_nodes must be <= 8192"),
    ({"local_batch_size": 2**20}, "local_batch_size", "local_batch_size must be <= 65536"),
    ({"intra_node_bw_gbps": 1e5}, "intra_node_bw_gbps", "intra_node_bw_gbps must be <= 10000"),
    ({"inter_node_bw_gbps": 10_001}, "inter_node_bw_gbps", "inter_node_bw_gbps must be <= 10000"),
]
# rules across columns: the contract's alone (the rows' JSON schema has no such rule)
PER_NODE = ({"num_gpus": 65, "num_nodes": 1}, "num_gpus", "num_gpus must be <= 64 * num_nodes")
CASES = [*OVER, PER_NODE]
IDS = [f"{field}-{i}" for i, (_, field, _) in enumerate(CASES)]


# ---- the contract ------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "field", "words"), CASES, ids=IDS)
def test_the_contract_refuses_a_row_over_a_bound_naming_field_and_bound(
    change, field, words
) -> None:
    rows = [{**ROW, "step_time_s": 1.0}, {**ROW, **change, "step_time_s": 1.0}]
    assert few_row_columns(rows, "scaling") is None  # the fast path leaves it to the frame's
    with pytest.raises(ContractError) as err:
        validate(pd.DataFrame(rows), "scaling")
    assert (err.value.row, err.value.column) == (2, field)
    assert words in str(err.value)
    with pytest.raises(ContractError, match=words.replace("*", r"\*")):
        validate_prediction_rows(pd.DataFrame([{**ROW, **change}]), "scaling", TARGETS)


def test_the_contract_takes_the_bounds_themselves_on_either_path() -> None:
    rows = [{**EDGE, "step_time_s": 1.0}, {**ROW, "num_gpus": 64, "step_time_s": 1.0}]
    columns = few_row_columns(rows, "scaling")
    assert columns is not None and columns["num_gpus"] == [MAX_GPUS, 64]
    clean = validate(pd.DataFrame(rows), "scaling")
    assert clean["num_gpus"].tolist() == [MAX_GPUS, 64]
    assert clean["local_batch_size"].tolist() == [MAX_LOCAL_BATCH_SIZE, 128]


def test_a_frame_past_the_few_row_path_is_refused_at_its_row() -> None:
    rows = [{**ROW, "step_time_s": 1.0}] * 80
    rows[41] = {**rows[41], "num_gpus": 129, "num_nodes": 2}
    with pytest.raises(ContractError) as err:
        validate(pd.DataFrame(rows), "scaling")
    assert (err.value.row, err.value.column) == (42, "num_gpus")
    assert "num_gpus must be <= 64 * num_nodes" in str(err.value)


def test_the_cli_validates_files_with_the_same_bounds(tmp_path) -> None:
    path = tmp_path / "scaling.csv"
    pd.DataFrame([{**ROW, "step_time_s": 1.0}, {**EDGE, "step_time_s": 2.0}]).to_csv(path)
    runner = CliRunner()
    out = runner.invoke(perfcast_cli, ["datasets", "validate", str(path), "--kind", "scaling"])
    assert out.exit_code == 0, out.output
    pd.DataFrame([{**ROW, "num_nodes": 9000, "num_gpus": 9000, "step_time_s": 1.0}]).to_csv(path)
    out = runner.invoke(perfcast_cli, ["datasets", "validate", str(path), "--kind", "scaling"])
    assert out.exit_code == 2 and "num_nodes must be <= 8192" in out.output, out.output


# ---- the service -------------------------------------------------------------------------


class _ContractChecked:
    """A scaling model that refuses rows as the predictors do (records: the contract's
    few-row check, else `validate_prediction_rows` of their frame; a frame: that check;
    `CheckedRows`: none) and predicts 1 s for the others."""

    def predict_interval(self, rows, groups=None, *, columns: bool = False):
        frame = rows if isinstance(rows, pd.DataFrame) else None
        if frame is None and few_row_columns(rows, "scaling", exclude=TARGETS) is None:
            frame = pd.DataFrame.from_records(list(rows))
        if frame is not None and not isinstance(frame, CheckedRows):
            validate_prediction_rows(frame, "scaling", TARGETS, source="scaling rows")
        answer = {f"step_time_s{q}": np.ones(len(rows)) for q in ("", "_p10", "_p90")}
        answer["flags"] = np.full(len(rows), "", dtype=object)
        if columns:
            return answer
        return pd.DataFrame(answer, index=None if frame is None else frame.index)


class _Backend:
    def __init__(self, tasks: tuple[str, ...]) -> None:
        self.champion = model_store.Champion(
            "scaling", _ContractChecked(), "1", "run", "stand-in", "now", {}
        )

    def load_all(self) -> list[str]:
        return []

    def loaded(self) -> dict[str, object]:
        return {"scaling": self.champion}


@pytest.fixture(scope="module")
def http() -> TestClient:
    models = ServedModels(("scaling",), backend_factory=_Backend)
    models.reload()
    return TestClient(create_app(Settings(tasks=("scaling",)), models))


def _refused(response, loc: list, words: str) -> None:
    assert response.status_code == 422, response.text
    first = response.json()["detail"][0]
    assert first["loc"] == loc and words in first["msg"], first


@pytest.mark.parametrize("rows", [1, 80], ids=["one-row", "past-the-few-row-path"])
@pytest.mark.parametrize(("change", "field", "words"), CASES, ids=IDS)
def test_predict_refuses_a_row_over_a_bound_with_a_422_naming_it(
    http, rows, change, field, words
) -> None:
    body = [ROW] * rows
    body[rows // 2] = {**ROW, **change}
    r = http.post("/v1/predict/scaling", json={"rows": body})
    _refused(r, ["body", "rows", rows // 2, field], words)


def test_predict_takes_the_bounds_themselves(http) -> None:
    r = http.post("/v1/predict/scaling", json={"rows": [EDGE, {**ROW, "num_gpus": 64}]})
    assert r.status_code == 200, r.text
    assert [p["step_time_s"] for p in r.json()["predictions"]] == [1.0, 1.0]


def test_predict_schema_states_the_bounds(http) -> None:
    row = http.get("/openapi.json").json()["components"]["schemas"]["ScalingRow"]["properties"]
    assert row["num_gpus"]["maximum"] == MAX_GPUS and row["num_nodes"]["maximum"] == MAX_NODES
    assert row["local_batch_size"]["maximum"] == MAX_LOCAL_BATCH_SIZE


RECOMMEND = {
    "job": {"job": "resnet18"},
    "pools": [{"gpu_type": "v100", "gpus_per_node": 8, "nodes": 2}],
    "local_batch_sizes": [64],
    "objective": "max_throughput_per_gpu",
}


@pytest.mark.parametrize(
    ("change", "loc", "words"),
    [
        ({"local_batch_sizes": [64, 2**20]},
         ["local_batch_sizes", 1], "local_batch_size must be <= 65536"),
        ({"gpu_counts": [10**18]}, ["gpu_counts", 0], "num_gpus must be <= 65536"),
        ({"pools": [{"gpu_type": "v100", "gpus_per_node": 128, "nodes": 1}]},
         ["pools", 0, "gpus_per_node"], "gpus_per_node must be <= 64"),
        ({"pools": [{"gpu_type": "v100", "gpus_per_node": 64, "nodes": 2048}]},
         ["pools", 0], "(num_gpus) must be <= 65536"),
        ({"job": {"job": "resnet18", "inter_node_bw_gbps": 1e6}},
         ["job"], "inter_node_bw_gbps must be <= 10000"),
    ],
    ids=["batch", "gpu-count", "per-node", "pool-gpus", "job-link"],
)  # fmt: skip
def test_recommend_refuses_what_would_build_rows_over_a_bound(http, change, loc, words) -> None:
    _refused(http.post("/v1/recommend", json={**RECOMMEND, **change}), ["body", *loc], words)


def test_recommend_takes_the_bounds_themselves(http) -> None:
    edge = {
        **RECOMMEND,
        "pools": [{"gpu_type": "v100", "gpus_per_node": 64, "nodes": 1024}],
        "local_batch_sizes": [MAX_LOCAL_BATCH_SIZE],
        "gpu_counts": [MAX_GPUS],
        "job": {"job": "resnet18", "intra_node_bw_gbps": MAX_LINK_BW_GBPS},
    }
    r = http.post("/v1/recommend", json=edge)
    assert r.status_code == 200, r.text
    shapes = {(c["num_gpus"], c["num_nodes"], c["local_batch_size"]) for c in r.json()["top"]}
    assert (MAX_GPUS, 1024, MAX_LOCAL_BATCH_SIZE) in shapes


PREDICTED = {"job_id": "b", "job": {"job": "resnet18"}, "gpu_type": "v100",
             "local_batch_sizes": [64], "max_gpus": 8}  # fmt: skip


@pytest.mark.parametrize(
    ("body", "loc", "words"),
    [
        ({"total_gpus": 10**18, "jobs": [PREDICTED]},
         ["total_gpus"], "total_gpus must be <= 65536"),
        ({"total_gpus": 8, "jobs": [{**PREDICTED, "local_batch_sizes": [2**20]}]},
         ["jobs", 0, "local_batch_sizes", 0], "local_batch_size must be <= 65536"),
        ({"total_gpus": 8, "jobs": [{**PREDICTED, "gpus_per_node": 65}]},
         ["jobs", 0, "gpus_per_node"], "gpus_per_node must be <= 64"),
        ({"total_gpus": 8, "jobs": [{**PREDICTED, "job": {"job": "x", "intra_node_bw_gbps": 2e4}}]},
         ["jobs", 0, "job"], "intra_node_bw_gbps must be <= 10000"),
        ({"total_gpus": MAX_GPUS, "jobs": [{**PREDICTED, "max_gpus": None, "gpus_per_node": 1}]},
         [], "num_nodes must be <= 8192"),
    ],
    ids=["total", "batch", "per-node", "job-link", "nodes"],
)  # fmt: skip
def test_allocate_refuses_what_would_build_rows_over_a_bound(http, body, loc, words) -> None:
    _refused(http.post("/v1/allocate", json=body), ["body", *loc], words)


def test_place_refuses_a_job_whose_rows_would_be_over_a_bound(http) -> None:
    body = {
        "nodes": [{"name": "n0", "gpu_type": "v100", "gpus": 4, "gpu_memory_mb": 16384}],
        "jobs": [{"job_id": "j", "num_gpus": 2,
                  "features": {"job": "resnet18", "local_batch_size": 2**20}}],
    }  # fmt: skip
    r = http.post("/v1/place", json=body)
    _refused(r, ["body", "jobs", 0, "features"], "local_batch_size must be <= 65536")


def test_cli_recommend_refuses_the_same_requests(tmp_path) -> None:
    bad = tmp_path / "job.yaml"
    bad.write_text("job: {job: x}\npools: [{gpu_type: v100, gpus_per_node: 8, nodes: 1}]\n"
                   "local_batch_sizes: [1048576]\nobjective: max_throughput_per_gpu\n")  # fmt: skip
    out = CliRunner().invoke(perfcast_cli, ["recommend", str(bad)])
    assert out.exit_code == 2, out.output
    assert "local_batch_sizes.0: local_batch_size must be <= 65536" in out.output


def test_the_optimizer_builds_no_candidate_over_a_bound() -> None:
    """Its pools and batch sizes are bounded too: `checked_candidates` checks one row a pool."""
    for per_node, nodes, words in [(65, 1, "gpus_per_node must be <= 64"),
                                   (1, MAX_NODES + 1, "(num_nodes) must be <= 8192"),
                                   (64, 1025, "(num_gpus) must be <= 65536")]:  # fmt: skip
        with pytest.raises(PerfcastError, match=words.replace("(", r"\(").replace(")", r"\)")):
            candidates.GpuPool("v100", per_node, nodes)
    pools = [candidates.GpuPool("v100", 64, 1024)]
    with pytest.raises(PerfcastError, match="local_batch_size must be <= 65536"):
        candidates.enumerate_candidates({"job": "x"}, pools, [64, 2**20], [MAX_GPUS])
    rows = candidates.enumerate_candidates({"job": "x"}, pools, [MAX_LOCAL_BATCH_SIZE], [MAX_GPUS])
    assert rows["num_gpus"].max() == MAX_GPUS and rows["num_nodes"].max() == 1024

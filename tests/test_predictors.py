"""Every predictor family on real data: it fits, its intervals are ordered, unseen categories
do not crash, and the physical structure moves predictions the right way."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import requires_data
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone

from perfcast import datasets
from perfcast.errors import ContractError
from perfcast.features.devices import DEVICES, INTERCONNECTS
from perfcast.predictor import FAMILIES, make_predictor
from perfcast.predictor.base import FLAGS
from perfcast.predictor.throughput import SyncLaw

pytestmark = requires_data
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def gavel_scaling() -> pd.DataFrame:
    return datasets.load("gavel-scaling")


@pytest.fixture(scope="module")
def graphs() -> pd.DataFrame:
    return datasets.load("neusight-graphs")


def _check_intervals(frame: pd.DataFrame, target: str) -> None:
    assert frame[target].notna().all() and (frame[target] > 0).all()
    assert (frame[f"{target}_p10"] <= frame[target]).all()
    assert (frame[target] <= frame[f"{target}_p90"]).all()


@pytest.mark.parametrize("family", FAMILIES["scaling"])
def test_scaling_families_fit_and_predict(gavel_scaling: pd.DataFrame, family: str) -> None:
    rows = gavel_scaling.sample(frac=1.0, random_state=0)
    train, test = rows.iloc[:300], rows.iloc[300:]
    model = make_predictor("scaling", family).fit(train)
    out = model.predict_interval(test.drop(columns=["step_time_s"]))
    _check_intervals(out, "step_time_s")
    error = np.abs(out["step_time_s"] / test["step_time_s"] - 1)
    assert np.median(error) < 0.5  # far better than a guess across 100x range of step times


def test_scaling_follows_the_new_gpus_one_gpu_time(gavel_scaling: pd.DataFrame) -> None:
    """A GPU seen only on one GPU: doubling its one-GPU times must roughly double the
    predicted multi-GPU times (the structure is what carries the prediction)."""
    new = gavel_scaling["gpu_type"] == "k80"
    single = gavel_scaling[new & (gavel_scaling["num_gpus"] == 1)]
    multi = gavel_scaling[new & (gavel_scaling["num_gpus"] > 1)]
    others = gavel_scaling[~new]
    base = make_predictor("scaling", "gbm").fit(pd.concat([others, single]))
    slow = make_predictor("scaling", "gbm").fit(
        pd.concat([others, single.assign(step_time_s=single["step_time_s"] * 2)])
    )
    ratio = slow.predict(multi) / base.predict(multi)
    assert 1.6 < np.median(ratio) < 2.4


def test_only_a_new_gpus_scaling_gets_the_new_gpu_margin(gavel_scaling: pd.DataFrame) -> None:
    """Gavel's k80 known from one-GPU rows only: its multi-GPU rows are flagged and get a
    wider interval than Muri's, whose jobs were measured at scale on their own cluster."""
    muri = datasets.load("muri-scaling")
    new = gavel_scaling["gpu_type"] == "k80"
    train = pd.concat([gavel_scaling[~new | (gavel_scaling["num_gpus"] == 1)], muri])
    model = make_predictor("scaling", "gbm").fit(train)

    def answer(rows: pd.DataFrame) -> pd.DataFrame:
        return model.predict_interval(rows[rows["num_gpus"] > 1].drop(columns=["step_time_s"]))

    def median_width(out: pd.DataFrame) -> float:
        return float(np.median(np.log(out["step_time_s_p90"] / out["step_time_s_p10"])))

    k80, measured = answer(gavel_scaling[new]), answer(muri)
    assert all("unmeasured_config" in t for t in _tokens(k80))
    assert not any("unmeasured_config" in t for t in _tokens(measured))
    assert median_width(k80) > 1.25 * median_width(measured)


def test_unknown_job_and_gpu_do_not_crash(gavel_scaling: pd.DataFrame) -> None:
    model = make_predictor("scaling", "gbm").fit(gavel_scaling)
    row = gavel_scaling.iloc[:1].assign(job="never-seen-job", gpu_type="b200")
    out = model.predict_interval(row.drop(columns=["step_time_s"]))
    _check_intervals(out, "step_time_s")


@pytest.fixture(scope="module")
def gavel_model(gavel_scaling: pd.DataFrame):
    return make_predictor("scaling", "gbm").fit(gavel_scaling)


def _tokens(frame: pd.DataFrame) -> list[set[str]]:
    return [set(filter(None, text.split(","))) for text in frame["flags"]]


def test_an_unseen_job_on_an_unseen_gpu_is_flagged_and_uncertain(gavel_model) -> None:
    """The issue's example: my-llama-7b on h100 must not come back as p10 == p50, unflagged."""
    row = pd.DataFrame(
        [{"job": "my-llama-7b", "gpu_type": "h100", "num_nodes": 1, "num_gpus": 8,
          "local_batch_size": 8}]
    )  # fmt: skip
    out = gavel_model.predict_interval(row)
    assert {"new_job", "new_gpu_type", "unmeasured_config"} <= _tokens(out)[0]
    assert out["step_time_s_p90"].iloc[0] >= 2 * out["step_time_s"].iloc[0]
    assert out["step_time_s_p10"].iloc[0] <= out["step_time_s"].iloc[0] / 2


def test_flags_are_from_the_vocabulary_and_empty_on_measured_rows(
    gavel_model, gavel_scaling: pd.DataFrame
) -> None:
    out = gavel_model.predict_interval(gavel_scaling.drop(columns=["step_time_s"]))
    assert set().union(*_tokens(out)) <= set(FLAGS)
    assert (out["flags"] == "").all()  # every row is a training row: nothing to flag
    more = gavel_scaling.iloc[:1].assign(num_gpus=64, num_nodes=8, placement=None)
    more = pd.concat([more, gavel_scaling.iloc[:1].assign(local_batch_size=60_000)])
    tokens = _tokens(gavel_model.predict_interval(more.drop(columns=["step_time_s"])))
    assert "extrapolated_gpus" in tokens[0] and "extrapolated_batch" in tokens[1]


def test_a_gpu_without_interconnect_facts_assumes_the_slowest_links(
    gavel_scaling: pd.DataFrame,
) -> None:
    """K80 renamed to a GPU no table knows, profiled on one GPU only: its multi-GPU steps are
    predicted over PCIe gen3 and 10 Gbit/s Ethernet (the slowest links of the table), slower
    than its one-GPU step at the same batch, and flagged; a link stated on the row is used."""
    rows = gavel_scaling.assign(
        gpu_type=gavel_scaling["gpu_type"].replace({"k80": "mystery-accelerator"})
    )
    new = rows["gpu_type"] == "mystery-accelerator"
    multi = rows[new & (rows["num_gpus"] > 1)].drop(columns=["step_time_s"])
    model = make_predictor("scaling", "gbm").fit(rows[~new | (rows["num_gpus"] == 1)])
    out = model.predict_interval(multi)
    alone = model.predict(multi.assign(num_gpus=1, num_nodes=1, placement=None))
    assert len(multi) > 50 and (out["step_time_s"].to_numpy() > alone).all()
    assert all("no_interconnect_facts" in t for t in _tokens(out))
    stated = model.predict(multi.assign(intra_node_bw_gbps=15.75, inter_node_bw_gbps=1.25))
    np.testing.assert_array_equal(stated, out["step_time_s"].to_numpy())


@settings(max_examples=50, deadline=None)
@given(bw=st.floats(0.5, 500), scale=st.floats(1.5, 8), gpus=st.sampled_from([2, 4, 8]))
def test_synchronization_time_follows_the_link(bw, scale, gpus) -> None:
    """Synchronization is bytes over the link: a link `scale` times faster takes `scale`
    times less time (no latency term); none on one GPU."""
    law = SyncLaw(gamma=2.0, growth=(0.5, 0.25))
    terms = (np.full(3, 4e7), np.zeros(3))  # bytes, no latency
    slow, fast, one = law.sync_seconds(
        np.array([gpus, gpus, 1]), np.ones(3), np.array([bw, bw * scale, bw]),
        np.full(3, 10.0), terms, terms,
    )  # fmt: skip
    assert slow > 0 and one == 0
    assert fast == pytest.approx(slow / scale, rel=1e-9)


@pytest.mark.parametrize("gpu", ["k80", "p100"])
def test_a_faster_network_given_per_row_predicts_faster_steps(
    gavel_scaling: pd.DataFrame, gpu: str
) -> None:
    """A GPU's multi-node rows for a model that knows it from one GPU only: along a sweep of the
    row's own `inter_node_bw_gbps` a faster network never predicts a slower step (p100 did,
    on 51 of 57 rows, when a regression corrected the physics)."""
    held = (gavel_scaling["gpu_type"] == gpu) & (gavel_scaling["num_gpus"] > 1)
    model = make_predictor("scaling", "gbm").fit(gavel_scaling[~held])
    rows = gavel_scaling[held & (gavel_scaling["num_nodes"] > 1)].drop(columns=["step_time_s"])
    assert len(rows) > 40
    sweep = np.vstack(
        [model.predict(rows.assign(inter_node_bw_gbps=bw)) for bw in (0.01, 0.1, 1.0, 3.0, 30.0)]
    )
    assert (np.diff(sweep, axis=0) <= 1e-12 * sweep[1:]).all()


def test_a_link_bandwidth_must_be_positive(gavel_model, gavel_scaling: pd.DataFrame) -> None:
    row = gavel_scaling.iloc[:1].drop(columns=["step_time_s"]).assign(intra_node_bw_gbps=-1.0)
    with pytest.raises(ContractError) as err:
        gavel_model.predict_interval(row)
    assert err.value.column == "intra_node_bw_gbps"


def test_interconnect_table_covers_the_shipped_clusters() -> None:
    clusters = {"pollux": "t4", "muri": "v100", "sia-rtx": "rtx2080ti", "sia-quad": "rtx6000"}
    for cluster, gpu in clusters.items():
        assert (gpu, cluster) in INTERCONNECTS
    assert all(gpu in DEVICES for gpu, _ in INTERCONNECTS)


def test_bad_prediction_rows_are_refused(gavel_scaling: pd.DataFrame) -> None:
    model = make_predictor("scaling", "gbm").fit(gavel_scaling.iloc[:200])
    bad = gavel_scaling.iloc[:2].drop(columns=["step_time_s"]).assign(num_gpus=[1, np.nan])
    with pytest.raises(ContractError) as err:
        model.predict_interval(bad)
    assert err.value.column == "num_gpus"


@pytest.mark.parametrize("family", FAMILIES["interference"])
def test_interference_predicts_both_sides(family: str) -> None:
    rows = datasets.load("gavel-interference")
    train, test = rows.iloc[:700], rows.iloc[700:]
    # the shape of the intervals and the swap, not accuracy: networks train 20 epochs
    model = make_predictor("interference", family, epochs=20).fit(train)
    out = model.predict_interval(test)
    for side in ("a_speed", "b_speed"):
        _check_intervals(out, side)
    # swapping the jobs swaps the predictions: one model serves both sides
    swap = {c: {"a": "b", "b": "a"}[c[0]] + c[1:] for c in test.columns if c[:2] in ("a_", "b_")}
    swapped = test.rename(columns=swap)
    out_swapped = model.predict_interval(swapped)
    np.testing.assert_allclose(out["a_speed"], out_swapped["b_speed"], rtol=1e-6)


@pytest.mark.parametrize("family", ["gbm", "fcn", "rnn", "gnn"])
def test_runtime_families_predict_one_row_per_sample(graphs: pd.DataFrame, family: str) -> None:
    held_out = graphs["device"] == "Tesla_T4"
    # trained on three of the other nine GPUs (45 of their 98 samples): the answer's shape does
    # not depend on how many, and the gbm stage under every family fits an op model per
    # device held out
    train = graphs["device"].isin(
        ["NVIDIA_H100_80GB_HBM3", "AMD_Instinct_MI250", "Tesla_V100-PCIE-32GB"]
    )
    model = make_predictor("runtime", family, epochs=5).fit(graphs[train])
    out = model.predict_interval(graphs[held_out].drop(columns=["e2e_latency_ms"]))
    assert set(out.index) == set(graphs.loc[held_out, "sample_id"])
    _check_intervals(out, "e2e_latency_ms")


def test_duration_handles_unseen_users() -> None:
    trace = datasets.load("pollux-philly").iloc[:3000]
    model = make_predictor("duration", "gbm").fit(trace.iloc[:2500])
    rows = trace.iloc[2500:].drop(columns=["duration_s"])
    rows = rows.assign(vc="a-new-virtual-cluster") if "vc" in rows else rows
    _check_intervals(model.predict_interval(rows), "duration_s")


@pytest.mark.parametrize("task", ["scaling", "interference"])
def test_a_model_saved_before_its_epochs_parameter_existed_still_gives_its_parameters(task):
    """Champions pickled before `epochs` was a parameter have no such attribute: get_params,
    repr and clone read the class default (None) instead of failing."""
    new = make_predictor(task, "gbm")
    state = new.__getstate__()
    del state["epochs"]
    old = type(new).__new__(type(new))
    old.__setstate__(state)
    assert "epochs" not in vars(old) and old.get_params()["epochs"] is None
    assert repr(old) == repr(new) and clone(old).get_params() == new.get_params()

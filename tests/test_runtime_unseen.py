"""What a runtime prediction knows of its sample, on the real NeuSight graphs: a model never
seen is answered by the op model's sum (stage 2's correction, learned on the training models,
made a new one worse), every row says what was new, and within a request a device at least
as fast is never predicted slower, nor a larger batch faster."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import (
    RUNTIME_HELD_MODEL,
    RUNTIME_TRAIN_DEVICES,
    requires_data,
    runtime_model_without_a_model,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfcast import datasets
from perfcast.features.devices import SPEC_COLUMNS, fill_specs
from perfcast.features.graphs import op_table, sample_table, samples
from perfcast.predictor.runtime import _measured_slower_pairs, _monotonic

pytestmark = requires_data
torch.set_num_threads(1)
_FIXTURES = [HealthCheck.function_scoped_fixture]

HELD_MODEL = RUNTIME_HELD_MODEL
TRAIN_DEVICES = list(RUNTIME_TRAIN_DEVICES)
NEW_DEVICE = "NVIDIA_H100_80GB_HBM3"
# devices a request may name: trained, measured but not trained, and datasheet-only
REQUEST_DEVICES = [*TRAIN_DEVICES, NEW_DEVICE, "a10", "l4", "rtx4090", "a100-sxm4-80gb", "p40"]


@pytest.fixture(scope="module")
def graphs() -> pd.DataFrame:
    return datasets.load("neusight-graphs")


@pytest.fixture(scope="module")
def model():
    return runtime_model_without_a_model()  # shared with tests/test_flag_properties.py


def _mape(predicted: pd.Series, truth: pd.Series) -> float:
    return float(np.mean(np.abs(predicted / truth.reindex(predicted.index) - 1)))


def model_view(model, rows: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """(the tabular stage-2 features, the log op-model sum) of `rows`, as `RuntimePredictor`
    builds them."""
    X, log_base = sample_table(rows)
    log_op = model.ops_.predict_log_sum(op_table(rows), X.index)
    return X.assign(log_op_vs_roofline=log_op - log_base), log_op


def test_a_new_model_is_the_op_models_sum_and_says_so(graphs: pd.DataFrame, model) -> None:
    """Stage 2 learned the op model's error on a new device for known models; on a new model,
    here on the devices the op model knows, its correction errs more than the sum alone."""
    rows = graphs[(graphs["model"] == HELD_MODEL) & graphs["device"].isin(TRAIN_DEVICES)]
    out = model.predict_interval(rows.drop(columns=["e2e_latency_ms"]))
    assert set(out["flags"]) == {"new_model"}
    X, log_op = model_view(model, rows)
    np.testing.assert_allclose(out["e2e_latency_ms"], np.exp(log_op))
    margin = model.op_margins_["new_model"]
    np.testing.assert_allclose(out["e2e_latency_ms_p90"], np.exp(log_op + margin))
    np.testing.assert_allclose(out["e2e_latency_ms_p10"], np.exp(log_op - margin))
    truth = samples(rows)["e2e_latency_ms"]
    _, stage2, _ = model.regressor_.predict_quantiles(X)
    corrected = pd.Series(np.exp(stage2 + log_op), index=out.index)
    assert _mape(out["e2e_latency_ms"], truth) < _mape(corrected, truth)


def test_a_known_model_takes_stage_two_and_a_new_one_the_op_sum(
    graphs: pd.DataFrame, model
) -> None:
    rows = graphs[graphs["device"].isin([NEW_DEVICE, TRAIN_DEVICES[0]])]
    # one request per device: the guard compares the devices of a request
    out = pd.concat([model.predict_interval(part) for _, part in rows.groupby("device")])
    out = out.reindex(samples(rows).index)
    info = samples(rows)
    held = (info["model"] == HELD_MODEL).to_numpy()
    new = (info["device"] == NEW_DEVICE).to_numpy()
    assert (out.loc[new & ~held, "flags"] == "new_gpu_type").all()
    assert (out.loc[new & held, "flags"] == "new_gpu_type,new_model").all()
    assert (out.loc[~new & ~held, "flags"] == "").all()
    X, log_op = model_view(model, rows)
    _, stage2, _ = model.regressor_.predict_quantiles(X)
    p50 = out["e2e_latency_ms"].to_numpy()
    np.testing.assert_allclose(p50[~held], np.exp(stage2 + log_op)[~held])
    np.testing.assert_allclose(p50[held], np.exp(log_op)[held])
    # a new model on a new device: the widest interval, both margins in quadrature
    both = np.log(out.loc[new & held, "e2e_latency_ms_p90"] / out.loc[new & held, "e2e_latency_ms"])
    margins = model.op_margins_
    np.testing.assert_allclose(both, np.hypot(margins["new_model"], margins["new_device"]))


def test_devices_measured_slower_than_their_datasheet_says_are_found() -> None:
    """NeuSight's MI210 and MI250 (one die) have the same datasheet, and the MI210 was
    measured slower: the guard must not lower it to the MI250's time. No other pair of its
    GPUs contradicts the datasheet order."""
    info = samples(datasets.load("neusight-graphs"))
    assert _measured_slower_pairs(info) == [("AMD_Instinct_MI210", "AMD_Instinct_MI250")]


def test_the_guard_lowers_a_faster_device_and_raises_a_larger_batch() -> None:
    info = pd.DataFrame(
        {
            "model": "m",
            "mode": "inference",
            "seq_len": 512,
            "device": ["t4", "h100", "t4", "h100"],
            "batch_size": [4, 4, 8, 8],
            "peak_tflops_fp32": [8.1, 67.0, 8.1, 67.0],
            "mem_bw_gbps": [320.0, 3350.0, 320.0, 3350.0],
        }
    )
    mid = np.array([10.0, 12.0, 9.0, 30.0])
    # t4 at 8 raised to its batch 4 (10); h100 lowered to t4's at each batch (10, then 10)
    np.testing.assert_array_equal(_monotonic(info, mid, []), [10.0, 10.0, 10.0, 10.0])
    # the pair measured otherwise is left alone: only the batch floor applies
    np.testing.assert_array_equal(_monotonic(info, mid, [("h100", "t4")]), [10, 12, 10, 30])
    # nothing to compare: a request of one sample is answered as predicted
    np.testing.assert_array_equal(_monotonic(info.iloc[:1], mid[:1], []), mid[:1])


def _request(graphs: pd.DataFrame, model_name: str, devices: list[str]) -> pd.DataFrame:
    """Every sample of `model_name` measured on the V100, relabelled to each of `devices`
    (specs from the datasheet), as a user asks "this model on these GPUs"."""
    base = graphs[(graphs["model"] == model_name) & (graphs["device"] == "Tesla_V100-PCIE-32GB")]
    base = base.drop(columns=["e2e_latency_ms", "latency_ms"])
    parts = []
    for device in devices:
        part = base.assign(device=device, sample_id=device + "/" + base["sample_id"].astype(str))
        parts.append(part.assign(**{c: np.nan for c in SPEC_COLUMNS if c in part.columns}))
    return pd.concat(parts, ignore_index=True)


@settings(max_examples=12, deadline=None, suppress_health_check=_FIXTURES)
@given(
    model_name=st.sampled_from(["bert_large", "gpt2_large", "opt_13", "gpt3_xl"]),
    devices=st.lists(st.sampled_from(REQUEST_DEVICES), min_size=2, max_size=5, unique=True),
)
def test_a_faster_gpu_is_never_slower_nor_a_larger_batch_faster(
    graphs: pd.DataFrame, model, model_name: str, devices: list[str]
) -> None:
    out = model.predict_interval(_request(graphs, model_name, devices))
    p10, p50, p90 = (out[f"e2e_latency_ms{s}"] for s in ("_p10", "", "_p90"))
    assert (p10 <= p50).all() and (p50 <= p90).all()
    info = fill_specs(samples(_request(graphs, model_name, devices)).reset_index(), "device")
    info = info.set_index("sample_id").assign(p50=p50)
    measured = set(model.slower_pairs_)
    for _, same in info.groupby(["mode", "batch_size"]):
        for a in same.itertuples():
            for b in same.itertuples():
                faster = a.peak_tflops_fp32 >= b.peak_tflops_fp32 and a.mem_bw_gbps >= b.mem_bw_gbps
                if faster and (a.device, b.device) not in measured:
                    assert a.p50 <= b.p50, (a.device, b.device, a.batch_size)
    for _, same in info.groupby(["mode", "device"]):
        ordered = same.sort_values("batch_size")["p50"].to_numpy()
        assert (np.diff(ordered) >= 0).all()

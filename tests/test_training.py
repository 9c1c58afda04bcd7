"""`perfcast train` and `perfcast evaluate` end to end, with the embedded MLflow store."""

from __future__ import annotations

import json

import mlflow
import pytest
from conftest import requires_data
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from perfcast import datasets
from perfcast.cli import app
from perfcast.predictor import runtime
from perfcast.training import model_store

pytestmark = requires_data
runner = CliRunner()


def _last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def test_train_registers_and_champion_moves_only_on_a_win(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERFCAST_HOME", str(tmp_path))  # an empty registry, whatever ran before
    # Gavel's V100 pairs: a third of the table, the same promotion (the fcn's 40 networks are
    # most of this test's time, and their steps grow with the rows)
    rows = datasets.load("gavel-interference")
    data = tmp_path / "v100-pairs.csv"
    datasets.write_table(rows[rows["gpu_type"] == "v100"], data, kind="interference")
    first = runner.invoke(
        app, ["train", "--task", "interference", "--data", str(data), "--model", "gbm", "--json"]
    )
    assert first.exit_code == 0, first.output
    one = _last_json(first.output)
    client = MlflowClient()
    name = model_store.model_name("interference")
    assert one["version"] == "1" and one["promoted"]  # the first model is the champion
    run = client.get_run(one["run_id"])
    assert run.data.params["model"] == "gbm"
    assert run.data.metrics["mape"] == pytest.approx(one["mape"])
    artifacts = {a.path for a in client.list_artifacts(one["run_id"])}
    assert "feature_schema.json" in artifacts

    second = runner.invoke(
        app, ["train", "--task", "interference", "--data", str(data), "--model", "fcn", "--json"]
    )
    assert second.exit_code == 0, second.output
    two = _last_json(second.output)
    champion = str(client.get_model_version_by_alias(name, model_store.CHAMPION).version)
    # the alias sits on the better of the two on the same held-out rows
    better = two if two["mape"] < one["mape"] else one
    assert champion == better["version"]
    assert two["promoted"] == (two["mape"] < one["mape"])

    # what was registered is what a server loads: a pyfunc answering predict(DataFrame)
    loaded = mlflow.pyfunc.load_model(f"models:/{name}@{model_store.CHAMPION}")
    assert loaded.metadata.signature is not None
    example = loaded.input_example
    out = loaded.predict(example)
    assert {"a_speed", "a_speed_p10", "a_speed_p90", "b_speed"} <= set(out.columns)


def test_evaluate_prints_the_metrics_json(tmp_path) -> None:
    from perfcast import datasets

    rows = datasets.load("gavel-scaling")
    train, test = tmp_path / "train.csv", tmp_path / "test.csv"
    datasets.write_table(rows[rows["gpu_type"] != "p100"], train, kind="scaling")
    datasets.write_table(rows[rows["gpu_type"] == "p100"], test, kind="scaling")
    result = runner.invoke(
        app, ["evaluate", "--task", "scaling", "--train", str(train), "--test", str(test),
              "--model", "gbm", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    metrics = _last_json(result.output)
    expected = {"n", "mape", "mae", "rmse", "r2", "spearman", "interval_coverage", "fit_s",
                "predict_us_per_row"}  # fmt: skip
    assert expected <= set(metrics)
    assert metrics["n"] == int((rows["gpu_type"] == "p100").sum())
    assert 0 <= metrics["interval_coverage"] <= 1


def test_evaluate_cross_validates_by_unseen_job() -> None:
    result = runner.invoke(
        app, ["evaluate", "--task", "interference", "--train", "gavel-interference",
              "--split", "job", "--model", "gbm", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert _last_json(result.output)["n"] > 0


def test_bad_task_and_data_exit_2(tmp_path) -> None:
    assert runner.invoke(app, ["train", "--task", "nope"]).exit_code == 2
    bad = tmp_path / "bad.csv"
    bad.write_text("job,gpu_type\nx,v100\n")
    result = runner.invoke(app, ["train", "--task", "scaling", "--data", str(bad)])
    assert result.exit_code == 2
    assert "step_time_s" in result.output


def test_a_champion_of_another_model_format_is_replaced() -> None:
    """A champion saved by an earlier perfcast (another MODEL_FORMAT) is not loaded, since its
    pickled predictor may not match today's code; the next training takes its place."""
    first = runner.invoke(
        app, ["train", "--task", "interference", "--data", "gavel-interference",
              "--model", "gbm", "--json"],
    )  # fmt: skip
    assert first.exit_code == 0, first.output
    client = MlflowClient()
    name = model_store.model_name("interference")
    champion = client.get_model_version_by_alias(name, model_store.CHAMPION)
    client.set_tag(champion.run_id, model_store.FORMAT_TAG, "1")
    assert model_store.load_champion("interference") is None

    second = runner.invoke(
        app, ["train", "--task", "interference", "--data", "gavel-interference",
              "--model", "gbm", "--json"],
    )  # fmt: skip
    assert second.exit_code == 0, second.output
    result = _last_json(second.output)
    assert result["promoted"]
    assert model_store.load_champion("interference").version == result["version"]


def test_runtime_trains_on_profiled_cpu_graphs_once_the_device_specs_are_given(tmp_path) -> None:
    """The zoo graphs profiled on this CPU: the CPU is not in the datasheet table, so training
    is refused with a reason naming the device until the rows carry its specs; then the model
    trains and registers although the input example's `seq_len` is missing (nullable int)."""
    from perfcast import datasets
    from perfcast.datasets.io import write_table

    rows = datasets.load("measured-cpu-zoo-graphs")
    plain = tmp_path / "cpu-graphs.parquet"
    write_table(rows, plain)
    refused = runner.invoke(app, ["train", "--task", "runtime", "--data", str(plain)])
    assert refused.exit_code == 2
    assert "'cpu'" in refused.output and "peak_tflops_fp32" in refused.output

    # datasheet figures supplied by the user (round numbers for a 2-core VM, for this test)
    specified = tmp_path / "cpu-graphs-with-specs.parquet"
    write_table(rows.assign(peak_tflops_fp32=0.1, mem_bw_gbps=20.0), specified)
    trained = runner.invoke(
        app, ["train", "--task", "runtime", "--data", str(specified), "--model", "gbm", "--json"]
    )
    assert trained.exit_code == 0, trained.output
    version = _last_json(trained.output)["version"]
    loaded = mlflow.pyfunc.load_model(f"models:/{model_store.model_name('runtime')}/{version}")
    assert loaded.input_example["seq_len"].isna().all()
    out = loaded.predict(loaded.input_example)
    assert out["e2e_latency_ms"].gt(0).all() and out["e2e_latency_ms"].notna().all()


def test_a_graph_network_run_records_the_epochs_it_chose(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gbm-gnn picks its epochs on held-out devices inside the training rows; the run says
    which, so a registered model can be traced to what it trained. The choices here are a
    few epochs each: what is recorded, not how well the network learns."""
    monkeypatch.setenv("PERFCAST_HOME", str(tmp_path))
    monkeypatch.setattr(runtime, "EPOCH_CHOICES", (2, 3))
    graphs = datasets.load("neusight-graphs")
    ids = graphs["sample_id"].drop_duplicates()
    subset = graphs[graphs["sample_id"].isin(ids.iloc[::3])]  # ~35 samples, every device
    path = tmp_path / "graphs.csv"
    subset.to_csv(path, index=False)
    result = runner.invoke(
        app, ["train", "--task", "runtime", "--data", str(path), "--model", "gbm-gnn", "--json"]
    )
    assert result.exit_code == 0, result.output
    run = MlflowClient().get_run(_last_json(result.output)["run_id"])
    assert run.data.params["model"] == "gbm-gnn"
    assert run.data.params["chosen_epochs"] in {"2", "3"}


def test_the_store_follows_perfcast_home_and_a_users_tracking_uri_wins(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mlflow exports the URI it is set to as MLFLOW_TRACKING_URI; read back as the user's,
    it kept every later PERFCAST_HOME of the process on the first store (the serving tests
    then served another module's champion)."""
    monkeypatch.setenv("PERFCAST_HOME", str(tmp_path / "one"))
    first = model_store.configure()
    monkeypatch.setenv("PERFCAST_HOME", str(tmp_path / "two"))
    second = model_store.configure()
    assert first != second and str(tmp_path / "two") in second
    users = f"sqlite:///{tmp_path / 'users.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", users)
    assert model_store.configure() == users == mlflow.get_tracking_uri()

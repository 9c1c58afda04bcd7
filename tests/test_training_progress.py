"""Long work says what it does (issue 35): `perfcast train` names each stage as it ends, keeps
MLflow's notices out of its output, and says why a model was or was not promoted, in a line
that MLflow records as the run's `perfcast.promotion` tag; `evaluate --model auto` says what it
chose. Figures read in human units."""

from __future__ import annotations

import json
import re

import pytest
from conftest import requires_data
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from perfcast.cli import app
from perfcast.training import model_store, trainer
from perfcast.units import pct

runner = CliRunner()
STAGE = re.compile(r"^  (data|choose|fit|score|register|compare) +\S.* (\d[\d.,]*) (ms|s|min)$")


def _train(*args: str) -> tuple[list[str], dict]:
    result = runner.invoke(app, ["train", "--task", "interference", *args, "--json"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    return lines[:-1], json.loads(lines[-1])


@requires_data
def test_train_shows_its_stages_quietly_and_says_why_it_promoted_or_kept(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERFCAST_HOME", str(tmp_path))  # an empty registry
    lines, first = _train("--data", "gavel-interference", "--model", "gbm")
    stages = [m.group(1) for line in lines if (m := STAGE.match(line))]
    assert stages == ["data", "fit", "score", "register", "compare"], lines
    text = "\n".join(lines)
    # MLflow's notices and warnings stay out; what is said instead is ours
    for noise in ("CloudPickle", "Successfully registered", "Created version", "WARNING"):
        assert noise not in text
    assert first["promoted"]
    assert "  promoted v1: no perfcast-interference champion to compare with" in lines
    assert not re.search(r"\de[+-]\d", text)  # no e-notation anywhere

    # the same fit again: a tie keeps the champion, and the line says on what rows
    lines, second = _train("--data", "gavel-interference", "--model", "gbm")
    assert not second["promoted"] and second["version"] == "2"
    kept = [line.strip() for line in lines if line.startswith("  kept ")]
    assert len(kept) == 1, lines
    mape = pct(second["mape_vs_champion_rows"])
    match = re.fullmatch(
        rf"kept v1: new model {re.escape(mape)} vs (\S+)% MAPE on the same ([\d,]+) held-out rows",
        kept[0],
    )
    assert match, kept[0]
    assert int(match.group(2).replace(",", "")) > 100

    # MLflow says why, on the run and on the model version
    client = MlflowClient()
    assert client.get_run(second["run_id"]).data.tags[trainer.PROMOTION_TAG] == kept[0]
    version = client.get_model_version(model_store.model_name("interference"), "2")
    assert version.tags[trainer.PROMOTION_TAG] == kept[0]
    first_tag = client.get_run(first["run_id"]).data.tags[trainer.PROMOTION_TAG]
    assert first_tag.startswith("promoted v1")


@requires_data
def test_evaluate_auto_says_what_it_chose(tmp_path) -> None:
    from perfcast import datasets

    rows = datasets.load("gavel-interference")
    train, test = tmp_path / "train.csv", tmp_path / "test.csv"
    # trained on the V100's pairs, not the P100's too: auto's choice says the same at half the
    # rows (validating the fcn is most of this test's time)
    datasets.write_table(rows[rows["gpu_type"] == "v100"], train, kind="interference")
    datasets.write_table(rows[rows["gpu_type"] == "k80"], test, kind="interference")
    result = runner.invoke(
        app, ["evaluate", "--task", "interference", "--train", str(train), "--test", str(test),
              "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.output.strip().splitlines()[-1])
    chose = re.search(
        r"auto chose (\w+) \(validation MAPE: gbm (\S+)%, fcn (\S+)%\)", result.output
    )
    assert chose, result.output
    assert metrics["model"] == chose.group(1) != "auto"
    best = min(("gbm", float(chose.group(2))), ("fcn", float(chose.group(3))), key=lambda x: x[1])
    assert chose.group(1) == best[0]
    assert re.search(r"^ +mape: \d+(\.\d)?%$", result.output, re.M), result.output


def test_what_auto_chose_reads_as_a_sentence() -> None:
    from perfcast.training.evaluation import describe_choice, describe_folds

    assert describe_choice({"gbm": 9.13, "fcn": 10.71}) == (
        "auto chose gbm (validation MAPE: gbm 9.1%, fcn 10.7%)"
    )
    assert describe_choice({"gbm": 412.6, "fcn": 92.7}).startswith("auto chose fcn")
    assert describe_folds(["gbm", "fcn", "gbm", "gbm", "gbm"]) == (
        "auto chose gbm in 4 folds, fcn in 1 fold"
    )

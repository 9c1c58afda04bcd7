"""`perfcast simulate` end to end on the shipped Muri testbed trace (first jobs only)."""

from __future__ import annotations

import json
import re

from conftest import requires_data
from typer.testing import CliRunner

from perfcast.cli import app

runner = CliRunner()


@requires_data
def test_simulate_prints_a_table_and_a_json_last_line(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(
        app,
        [
            "simulate", "--trace", "muri-traces:testbed/cluster_trace", "--cluster", "8x8:v100",
            "--policy", "srtf-predicted", "--max-jobs", "40", "--out", str(out), "--json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("jobs", "avg_jct_s", "p99_jct_s", "makespan_s", "avg_queue_s", "utilization"):
        assert key in summary
    assert summary["jobs"] == 40 and 0 < summary["utilization"] <= 1
    assert summary["avg_jct_s"] <= summary["p99_jct_s"]
    assert (out / "jct_cdf.png").stat().st_size > 0 and (out / "jobs.csv").exists()
    assert json.loads((out / "metrics.json").read_text())["policy"] == "srtf-predicted"


def test_bad_cluster_spec_is_a_clear_error(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time_s,num_gpus,duration_s\na,0,1,10\n")
    result = runner.invoke(
        app, ["simulate", "--trace", str(trace), "--cluster", "8 by 8", "--policy", "fifo"]
    )
    assert result.exit_code == 2
    assert "cluster spec '8 by 8'" in result.output


def test_policy_options_reach_the_policy_and_bad_ones_are_clear_errors(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time_s,num_gpus,duration_s\na,0,1,10\n")
    base = ["simulate", "--trace", str(trace), "--cluster", "1x1:v100", "--policy", "tiresias"]
    ok = runner.invoke(app, [*base, "--policy-option", "thresholds=57600", "--start-s", "30"])
    assert ok.exit_code == 0, ok.output
    # the one job waits for nobody: its JCT is its 10 s plus the 30 s start delay
    assert re.search(r"avg_jct_s +│ +40 s │", ok.stdout), ok.stdout
    bad = runner.invoke(app, [*base, "--policy-option", "threshold=57600"])
    assert bad.exit_code == 2
    assert "no option threshold" in bad.output and "thresholds" in bad.output
    malformed = runner.invoke(app, [*base, "--policy-option", "57600"])
    assert malformed.exit_code == 2 and "KEY=VALUE" in malformed.output


def test_every_cost_of_the_artifacts_configuration_is_settable(tmp_path, monkeypatch):
    """The Pollux artifact charges 30 s at every (re)allocation: start, restart, resize and
    migration are each an option, and each reaches the simulation's costs."""
    import perfcast.scheduler.sim.run as sim_run

    seen = {}

    def capture(*args, costs, **kwargs):
        seen["costs"] = costs
        raise SystemExit(0)

    monkeypatch.setattr(sim_run, "run_simulation", capture)
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time_s,num_gpus,duration_s\na,0,1,10\n")
    costs = ["--start-s", "31", "--restart-s", "32", "--resize-s", "33", "--migrate-s", "34"]
    runner.invoke(
        app,
        ["simulate", "--trace", str(trace), "--cluster", "1x1:v100", "--policy", "fifo", *costs],
    )
    chosen = seen["costs"]
    assert (chosen.start_s, chosen.restart_s, chosen.resize_s, chosen.migrate_s) == (31, 32, 33, 34)

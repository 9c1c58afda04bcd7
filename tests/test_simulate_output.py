"""`perfcast simulate` substitutes nothing silently and reads well at 80 columns (issue 35): a GPU
no step time was measured on is refused (a typo gets "did you mean"), a trace name that merges
several traces says so, the title is one line and the figures are in human units."""

from __future__ import annotations

import re

import pytest
from conftest import requires_data
from typer.testing import CliRunner

from perfcast.cli import app

runner = CliRunner()
TRACE = "muri-traces:testbed/cluster_trace"


def _simulate(trace: str, cluster: str, *more: str) -> tuple[int, str]:
    result = runner.invoke(
        app,
        ["simulate", "--trace", trace, "--cluster", cluster, "--policy", "fifo",
         "--max-jobs", "20", *more],
        env={"COLUMNS": "80"},
    )  # fmt: skip
    return result.exit_code, result.output


@requires_data
@pytest.mark.parametrize(
    "cluster,hint",
    [
        ("8x8:h100", "(a GPU no scaling dataset measured)"),  # was: exactly the V100 figures
        ("8x8:v1oo", "(did you mean 'v100'?)"),
        ("4x8:v100,2x4:p10", "(did you mean 'p100'?)"),
        ("8x8:tesla_v100", "is 'v100' by another name"),
    ],
)
def test_an_unmeasured_gpu_is_refused_not_replaced(cluster: str, hint: str) -> None:
    code, output = _simulate(TRACE, cluster)
    assert code == 2, output
    flat = " ".join(output.split())
    assert hint in flat and "GPU types measured: k80, p100, t4, v100" in flat
    assert "avg_jct_s" not in output


@requires_data
def test_gpu_names_are_case_insensitive_and_figures_human() -> None:
    code, output = _simulate(TRACE, "8x8:V100")
    assert code == 0, output
    lines = output.splitlines()
    # the title is one line, whole (it read "cluster_trac e" wrapped inside the table)
    assert f"{TRACE} on 8x8:v100, fifo (no predictions)" in lines
    assert all(len(line) <= 80 for line in lines)
    assert not re.search(r"\de[+-]?\d", output)
    figures = dict(re.findall(r"│ (\w+) +│ +(.+?) │", output))
    for key in ("avg_jct_s", "p99_jct_s", "makespan_s", "avg_queue_s"):
        assert re.fullmatch(r"[\d.,]+ (ms|s|min|h|d)", figures[key]), figures
    assert re.fullmatch(r"\d+(\.\d)?%", figures["utilization"]), figures
    assert "merged" not in output


@requires_data
def test_a_trace_that_merges_several_says_so() -> None:
    code, output = _simulate("muri-traces", "8x8:v100")
    assert code == 0, output
    flat = " ".join(output.split())
    match = re.search(r"warning: muri-traces is (\d+) traces .*merged trace; name one as", flat)
    assert match and int(match.group(1)) > 1, flat

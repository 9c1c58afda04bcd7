"""`perfcast datasets list` at 80 columns and piped (issue 35): whole values or a column left out
and named, never "Ap…"; a misspelt dataset name gets "did you mean"."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from perfcast.cli import app
from perfcast.tables import Column, fit

runner = CliRunner()


def test_datasets_list_at_80_columns_cuts_nothing() -> None:
    narrow = runner.invoke(app, ["datasets", "list"], env={"COLUMNS": "80"})
    assert narrow.exit_code == 0, narrow.output
    lines = narrow.output.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "…" not in narrow.output
    listed = json.loads(runner.invoke(app, ["datasets", "list", "--json"]).output)
    for row in listed:  # every name, licence and row count whole on its own line
        line = next(line for line in lines if f"│ {row['name']} " in line)
        assert f"{row['rows']:,}" in line and row["license"] in line
    assert "source left out at 80 columns" in narrow.output

    wide = runner.invoke(app, ["datasets", "list"], env={"COLUMNS": "160"})
    assert "left out" not in wide.output and "…" not in wide.output
    assert "github.com/stanford-futuredata/gavel" in wide.output


def test_fit_drops_columns_by_priority_and_keeps_the_required() -> None:
    columns = [Column("name", 0), Column("a", 2), Column("b", 1), Column("long", 3, wrap=True)]
    rows = [["x" * 10, "a" * 10, "b" * 10, "y" * 60]]
    table, left_out = fit(columns, rows, width=63)  # 10+10+10+20 and borders
    assert [c.header for c in table.columns] == ["name", "a", "b", "long"] and not left_out
    table, left_out = fit(columns, rows, width=39)
    assert [c.header for c in table.columns] == ["name", "b"] and left_out == ["a", "long"]
    table, left_out = fit(columns, rows, width=5)  # the required column stays
    assert [c.header for c in table.columns] == ["name"]


def test_a_misspelt_dataset_gets_did_you_mean() -> None:
    result = runner.invoke(app, ["datasets", "show", "gavel-interferance"])
    assert result.exit_code == 2
    assert "did you mean 'gavel-interference'?" in result.output
    far = runner.invoke(app, ["datasets", "show", "zzzz"])
    assert far.exit_code == 2 and "did you mean" not in far.output


def test_command_lists_wrap_summaries_as_sentences_at_80_columns() -> None:
    """A summary fills each line before it wraps (the docstring's own line ends broke it:
    "... source repositories at" then "the pinned commits ..." on a short line)."""
    for group in (["datasets"], ["profile"], []):
        result = runner.invoke(app, [*group, "--help"], env={"COLUMNS": "80"})
        assert result.exit_code == 0
        panel = result.output.split("Commands")[1].splitlines()[1:]
        entries: list[list[str]] = []
        for line in panel:
            if not line.startswith("│"):
                break
            body = line[1:].rstrip().rstrip("│").strip()
            if line[2] != " ":  # a command's first line: its name, then its summary
                entries.append([body.split(maxsplit=1)[1]])
            elif entries:
                entries[-1].append(body)
        assert len(entries) >= 3
        for lines in entries:
            for text in lines[:-1]:  # every line but a summary's last is (nearly) full
                assert len(text) >= 50, (group, lines)

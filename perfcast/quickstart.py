"""`perfcast quickstart`: the main job on embedded defaults (what `make run` runs)."""

from __future__ import annotations

import typer

from datasets.cli import list_datasets

app = typer.Typer()


@app.command()
def quickstart() -> None:
    """Load and validate every shipped dataset and print the overview."""
    list_datasets(as_json=False)

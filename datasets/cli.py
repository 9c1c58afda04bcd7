"""`perfcast datasets ...`: list, inspect, export and validate contract tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from perfcast.datasets.contract import KINDS
from perfcast.datasets.io import read_table, write_table
from perfcast.datasets.registry import get, load, registry

app = typer.Typer(help="Public measurements and traces in the data contract.", no_args_is_help=True)
console = Console()


@app.command("list")
def list_datasets(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a JSON list instead of a table.")
    ] = False,
) -> None:
    """List every dataset with its kind, row count, licence and source.

    The first run loads and validates every dataset (a minute or so); results are cached.
    """
    rows = []
    specs = list(registry().values())
    with Progress(console=Console(stderr=True), transient=True, disable=as_json) as progress:
        task = progress.add_task("loading datasets", total=len(specs))
        for spec in specs:
            progress.update(task, description=f"loading {spec.name}")
            rows.append(
                {
                    "name": spec.name,
                    "kind": spec.kind,
                    "rows": len(load(spec.name)),
                    "license": spec.license,
                    "source": spec.source,
                    "measured": spec.measured,
                    "description": spec.description,
                }
            )
            progress.advance(task)
    if as_json:
        print(json.dumps(rows))
        return
    table = Table(title="perfcast datasets")
    for column in ("name", "kind", "rows", "license", "source"):
        table.add_column(column, justify="right" if column == "rows" else "left")
    for row in rows:
        name = row["name"] + (" (measured here)" if row["measured"] else "")
        table.add_row(name, row["kind"], f"{row['rows']:,}", row["license"], row["source"])
    console.print(table)


@app.command()
def show(
    name: Annotated[str, typer.Argument(help="Dataset name from `perfcast datasets list`.")],
    rows: Annotated[int, typer.Option(help="Sample rows to print.")] = 5,
) -> None:
    """Show a dataset's schema, row count, a sample and summary statistics."""
    spec = get(name)
    df = load(name)
    console.print(f"[bold]{spec.name}[/] ({spec.kind}, {len(df):,} rows) - {spec.description}")
    console.print(f"source: {spec.source}; licence: {spec.license}")
    schema = Table(title="schema")
    schema.add_column("column")
    schema.add_column("dtype")
    schema.add_column("missing", justify="right")
    for column in df.columns:
        schema.add_row(column, str(df[column].dtype), f"{int(df[column].isna().sum()):,}")
    console.print(schema)
    console.print("[bold]sample[/]")
    console.print(df.head(rows).to_string(max_colwidth=40))
    numeric = df.select_dtypes("number")
    if not numeric.empty:
        console.print("[bold]summary[/]")
        console.print(numeric.describe().T.to_string(float_format=lambda v: f"{v:.4g}"))


@app.command()
def export(
    name: Annotated[str, typer.Argument(help="Dataset name from `perfcast datasets list`.")],
    out: Annotated[Path, typer.Option("--out", help="Output file, .csv or .parquet.")],
) -> None:
    """Write a dataset's contract table to a CSV or Parquet file (atomically)."""
    spec = get(name)
    path = write_table(load(name), out, kind=spec.kind)
    console.print(f"wrote {path} ({spec.kind})")


@app.command("validate")
def validate_file(
    file: Annotated[Path, typer.Argument(help="A .csv or .parquet file.")],
    kind: Annotated[str, typer.Option("--kind", help=f"Table kind: {'|'.join(KINDS)}.")],
) -> None:
    """Check a file against the data contract: prints `ok: N rows`, or what is wrong (exit 2)."""
    df = read_table(file, kind=kind)
    print(f"ok: {len(df)} rows")

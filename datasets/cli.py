"""`perfcast datasets ...`: list, inspect, export and validate contract tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

# Only typer and rich at import time: `perfcast --help` must not pay for pandas and pandera.
# The table kinds are listed in docs/data-contract.md; an unknown --kind names them all.

app = typer.Typer(help="Public measurements and traces in the data contract.", no_args_is_help=True)
console = Console()


@app.command("list")
def list_datasets(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a JSON list instead of a table.")
    ] = False,
) -> None:
    """List every dataset with its kind, row count, licence and source.

    Row counts come from datasets/row_counts.json (checked against the loaders by the tests);
    a dataset missing there is loaded and counted, with a progress bar.
    """
    from perfcast.datasets.registry import load, recorded_rows, registry

    rows = []
    specs = list(registry().values())
    counts = recorded_rows()
    with Progress(console=Console(stderr=True), transient=True, disable=as_json) as progress:
        task = progress.add_task("counting rows", total=len(specs))
        for spec in specs:
            progress.update(task, description=f"counting {spec.name}")
            n = counts.get(spec.name)
            rows.append(
                {
                    "name": spec.name,
                    "kind": spec.kind,
                    "rows": n if n is not None else len(load(spec.name)),
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
    table.add_column("name", no_wrap=True)  # names are typed back: never cut or folded
    table.add_column("kind", no_wrap=True)
    table.add_column("rows", justify="right", no_wrap=True)
    table.add_column("license")
    table.add_column("source")
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
    from perfcast.datasets.registry import get, load

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
    from perfcast.datasets.io import write_table
    from perfcast.datasets.registry import get, load

    spec = get(name)
    path = write_table(load(name), out, kind=spec.kind)
    console.print(f"wrote {path} ({spec.kind})")


@app.command("validate")
def validate_file(
    file: Annotated[Path, typer.Argument(help="A .csv or .parquet file.")],
    kind: Annotated[
        str, typer.Option("--kind", help="Table kind: scaling, interference, trace, graph, ...")
    ],
) -> None:
    """Check a file against the data contract: prints `ok: N rows`, or what is wrong (exit 2)."""
    from perfcast.datasets.io import read_table

    df = read_table(file, kind=kind)
    print(f"ok: {len(df)} rows")

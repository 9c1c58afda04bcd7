"""`perfcast datasets ...`: list, fetch, inspect, export and validate contract tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

# Only typer and rich at import time: `perfcast --help` must not pay for pandas and pandera.
# The table kinds are listed in docs/data-contract.md; an unknown --kind names them all.

app = typer.Typer(help="Public measurements and traces in the data contract.", no_args_is_help=True)


@app.command("list")
def list_datasets(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a JSON list instead of a table.")
    ] = False,
) -> None:
    """List every dataset with its kind, row count, licence, source, and whether it is here.

    `here`: present (its files are here: the data folder or the download cache), measured
    (measured by perfcast, shipped in the package), embedded (the package's starter table
    stands in) or fetchable (`perfcast datasets fetch NAME` gets it). Row counts come from
    datasets/row_counts.json (checked against the loaders by the tests); a dataset missing
    there is loaded and counted, with a progress bar. Columns that do not fit the terminal
    are left out by priority (source first, then licence) and named; --json has them all.
    """
    # a console per call, not per import: the width is the terminal's when the command runs
    console = Console()
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
                    "status": spec.status(),
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
    from perfcast.tables import Column, fit

    columns = [
        Column("name", 0),  # names are typed back: never cut or folded
        Column("kind", 1),
        Column("here", 0),
        Column("rows", 2, justify="right"),
        Column("license", 3),
        Column("source", 4, wrap=True),
    ]
    table, left_out = fit(
        columns,
        [
            [row["name"], row["kind"], "measured" if row["measured"] else row["status"],
             f"{row['rows']:,}", row["license"], row["source"]]
            for row in rows
        ],
        console.width,
    )  # fmt: skip
    console.print(table)
    console.print(
        "here: present; measured (by perfcast, in the package); embedded (a starter table\n"
        "stands in); fetchable (`perfcast datasets fetch NAME`)",
        highlight=False,
    )
    if left_out:
        console.print(
            f"{' and '.join(left_out)} left out at {console.width} columns: see --json or a "
            "wider terminal",
            highlight=False,
        )


@app.command("fetch")
def fetch_datasets(
    names: Annotated[
        list[str] | None, typer.Argument(help="Dataset names from `perfcast datasets list`.")
    ] = None,
    all_datasets: Annotated[
        bool, typer.Option("--all", help="Every file of the manifest (every public dataset).")
    ] = False,
) -> None:
    """Get datasets' files into the download cache: downloaded from their source repositories at
    the pinned commits (derived files rebuilt from their originals), every sha256 checked. Files
    already here are verified, not downloaded again; an interrupted run resumes where it stopped.
    """
    console = Console()
    from perfcast.datasets.fetch import fetch, find_local, manifest, recipes
    from perfcast.datasets.registry import get
    from perfcast.errors import PerfcastError

    if bool(names) == all_datasets:
        raise PerfcastError("name the datasets to fetch, or give --all (not both)")
    table = manifest()
    if all_datasets:  # every manifest file, also those no loader reads yet
        what, paths = "every public dataset", sorted(table)
    else:
        specs = [get(n) for n in names or []]
        what = ", ".join(s.name for s in specs)
        for spec in specs:
            if spec.measured:
                console.print(f"{spec.name}: measured here, ships in the package")
        paths = list(dict.fromkeys(p for spec in specs for p in spec.files if p in table))
    missing = [p for p in paths if find_local(p) is None]
    size = sum(
        sum(o.bytes for o in recipes().get(p, [])) if table[p].derived else table[p].bytes
        for p in missing
    )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("verifying", total=size)
        for path in paths:
            progress.update(task, description=path if path in missing else f"verifying {path}")
            fetch(path, progress=lambda n: progress.advance(task, n))
    here = len(paths) - len(missing)
    console.print(
        f"{what}: {len(paths)} files ready ({len(missing)} fetched, "
        f"{here} already here, all sha256-checked)"
    )


@app.command()
def show(
    name: Annotated[str, typer.Argument(help="Dataset name from `perfcast datasets list`.")],
    rows: Annotated[int, typer.Option(help="Sample rows to print.")] = 5,
) -> None:
    """Show a dataset's schema, row count, a sample and summary statistics."""
    console = Console()
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
    console = Console()
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

"""Write one section of docs/BENCHMARKS.md, leaving the other benchmarks' sections alone.

Each benchmark script owns the text between `<!-- BEGIN name -->` and `<!-- END name -->`;
the section always starts with the command that produced it. Every write also wraps the prose
at 100 columns and makes the summary at the top anew from the sections (benchmarks/summary.py).
"""

from __future__ import annotations

import platform
import re
import time
from pathlib import Path

import pandas as pd
import psutil

from benchmarks.summary import measured_stamp, sections, table_rows, with_summary
from perfcast.atomic import atomic_write_text

BENCHMARKS_MD = Path(__file__).resolve().parent.parent / "docs" / "BENCHMARKS.md"
HEADER = (
    "# Benchmarks\n\nEvery table below was written by the script named in its section, on the "
    "machine described there. Re-run the command to refresh a section.\n"
)


def machine() -> str:
    """The machine a section was measured on. The CPU's model is named: machines of one kind
    (2 CPUs, 24 GiB) have differed 2.5x in the speed of one simulation."""
    return (
        f"{platform.machine()} ({cpu_model()}), {psutil.cpu_count(logical=True)} CPUs, "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()}"
    )


def cpu_model() -> str:
    """The CPU's model as the kernel names it, with its family and model numbers (a name such as
    "AMD EPYC" covers generations); elsewhere what `platform` knows."""
    try:
        fields = dict(
            (key.strip(), value.strip())
            for key, _, value in (
                line.partition(":") for line in Path("/proc/cpuinfo").read_text().splitlines()
            )
            if key.strip() in ("model name", "cpu family", "model")
        )
    except OSError:
        fields = {}
    if "model name" in fields:
        numbers = (
            f", family {fields['cpu family']} model {fields['model']}"
            if ("cpu family" in fields and "model" in fields)
            else ""
        )
        return fields["model name"] + numbers
    return platform.processor() or "CPU model unknown"


def write_section(name: str, title: str, command: str, body: str) -> Path:
    """Replace (or append) section `name` of docs/BENCHMARKS.md, atomically."""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    section = (
        f"<!-- BEGIN {name} -->\n## {title}\n\n"
        f"Command: `{command}`  \nMeasured {stamp} on {machine()}.\n\n{body.strip()}\n"
        f"<!-- END {name} -->"
    )
    text = BENCHMARKS_MD.read_text() if BENCHMARKS_MD.exists() else HEADER
    pattern = re.compile(
        rf"<!-- BEGIN {re.escape(name)} -->.*?<!-- END {re.escape(name)} -->", re.S
    )
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else f"{text}\n{section}\n"
    return atomic_write_text(BENCHMARKS_MD, with_summary(text))


def section_text(name: str) -> str | None:
    """Section `name` as it stands in docs/BENCHMARKS.md; None without it."""
    text = BENCHMARKS_MD.read_text() if BENCHMARKS_MD.exists() else ""
    return sections(text).get(name)


def section_rows(name: str) -> tuple[list[dict[str, str]], str | None]:
    """The table rows of section `name` as it stands in docs/BENCHMARKS.md (header -> cell),
    and the date its `Measured` stamp gives; ([], None) without the section."""
    section = section_text(name)
    if section is None:
        return [], None
    return table_rows(section), measured_stamp(section)


def markdown(table: pd.DataFrame, digits: int = 2) -> str:
    """A DataFrame as a Markdown table (numbers rounded to `digits`)."""

    def cell(value: object) -> str:
        if isinstance(value, float):
            return "n/a" if value != value else f"{value:,.{digits}f}"
        return str(value)

    lines = ["| " + " | ".join(map(str, table.columns)) + " |"]
    lines.append("|" + "---|" * len(table.columns))
    for row in table.itertuples(index=False):
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(lines)

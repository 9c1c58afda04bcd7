"""The summary that opens docs/BENCHMARKS.md: each headline figure beside its napkin answer or its
target, read out of the generated section that measured it, with that section's date and
command. Nothing here measures: `python -m benchmarks.summary` rewrites the summary (and wraps
long prose lines) from the sections as they stand; every benchmark's `write_section` calls it.

A headline names a section, the row of one of its tables (cells that must match) and a column;
a headline whose row or section is gone is shown as missing, and tests/test_benchmarks_doc.py
fails on it, so the summary cannot quietly drift from the tables.
"""

from __future__ import annotations

import contextlib
import re
import textwrap
from dataclasses import dataclass, field

SUMMARY = "summary"
WIDTH = 100  # prose is wrapped here; a table row stays one line


@dataclass(frozen=True)
class Headline:
    what: str
    section: str
    row: dict[str, str]  # header -> cell of the row to read
    column: str
    against: dict[str, str] = field(default_factory=dict)  # the napkin's row, same column
    against_label: str = ""
    target: str = ""
    pattern: str = ""  # instead of a table cell: the first group of this regex in the section


HEADLINES = (
    Headline(
        "scaling, a cluster never seen (MAPE %)", "accuracy-scaling",
        {"split": "leave one cluster out", "model": "gbm"}, "MAPE %",
        {"split": "leave one cluster out", "model": "baseline: linear scaling from 1 GPU"},
        "perfect scaling", "≤ 0.5×",
    ),
    Headline(
        "scaling, answers breaking a law (of 100,000)",
        "scaling-physics", {"law": "more GPUs no faster"}, "gbm", target="0",
    ),
    Headline(
        "runtime, a GPU never seen (MAPE %)", "accuracy-runtime",
        {"split": "leave one GPU out", "model": "gbm-gnn"}, "MAPE %",
        {"split": "leave one GPU out", "model": "baseline: per-op model summed (NeuSight-style)"},
        "NeuSight-style", "< NeuSight",
    ),
    Headline(
        "interference, a workload never seen (MAE)", "accuracy-interference",
        {"split": "leave one workload out", "model": "gbm"}, "MAE",
        {"split": "leave one workload out", "model": "baseline: no interference (1.0)"},
        '"1.0"', "≤ 0.75×",
    ),
    Headline(
        "duration, a trace never seen (MAPE %)", "accuracy-duration",
        {"split": "leave one trace out", "model": "gbm"}, "MAPE %",
        {"split": "leave one trace out", "model": "baseline: train median"},
        "train median", "≤ 1×",
    ),
    Headline(
        "query never seen, DuckDB (MAPE %)", "query",
        {"engine": "DuckDB (measured here)", "split": "query", "model": "gbm"}, "MAPE %",
        {"engine": "DuckDB (measured here)", "split": "query", "model": "train median"},
        "train median", "≤ 8%",
    ),
    Headline(
        "predict one row at 500 req/s, p50", "serving",
        {"measure": "single-row predict p50 (median of rounds; each round)"}, "result",
        target="< 2 ms",
    ),
    Headline(
        "predict one row at 500 req/s, p99", "serving",
        {"measure": "single-row predict p99 (median of rounds; each round)"}, "result",
        target="< 10 ms",
    ),
    Headline(
        "recommend over 10^5 candidates", "serving",
        {"measure": "recommend, 102,368 candidates"}, "result", target="< 100 ms",
    ),
    Headline(
        "elastic allocation, 10,000 jobs × 10,000 GPUs (s)", "optimizer",
        {"jobs": "10,000", "GPUs": "10,000"}, "hull (s, best of 3)", target="< 1 s",
    ),
    Headline(
        "placement, 10,000 jobs on 10,000 GPUs (s)", "optimizer",
        {"jobs": "10,000", "GPUs (nodes × 8)": "10,000"}, "place (s)", target="< 1 s",
    ),
    Headline(
        "simulate 1M jobs on 10,000 GPUs, tiresias at load 4 (CPU s)", "scheduling-scale",
        {"policy": "tiresias", "load": "4"}, "CPU (s)", target="< 60 s",
    ),
    Headline(
        "simulate 1M jobs on 10,000 GPUs, tiresias at load 4 (peak MiB)", "scheduling-scale",
        {"policy": "tiresias", "load": "4"}, "peak RSS (MiB)", target="< 2,048 MiB",
    ),
    Headline(
        "pollux per job below published Pollux (8 workloads, median of roundings)",
        "scheduling-peer", {}, "", target="8 of 8",
        pattern=r"by\s+the\s+median\s+of\s+the\s+\d+\s+roundings:\s+(\d+\s+of\s+8)",
    ),
    Headline(
        "live migration, 24.2M parameters", "executor",
        {"measure": "migration, 24.2M-parameter MLP (state in Ray's object store)"}, "result",
        target="< 1 s",
    ),
)  # fmt: skip


def sections(text: str) -> dict[str, str]:
    """Each generated section's text, by name."""
    found = re.finditer(r"<!-- BEGIN (\S+) -->\n(.*?)<!-- END \1 -->", text, re.S)
    return {m.group(1): m.group(2) for m in found}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def table_rows(section: str) -> list[dict[str, str]]:
    """Every row of every table of a section, as header -> cell."""
    rows, header = [], None
    for line in section.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = cells
        elif not set("".join(cells)) <= set("-: "):
            rows.append(dict(zip(header, cells, strict=False)))
    return rows


def _value(section: str, h: Headline) -> str | None:
    if h.pattern:
        found = re.search(h.pattern, section, re.S)
        return " ".join(found.group(1).split()) if found else None  # prose may wrap inside
    return _cell(table_rows(section), h.row, h.column)


def _cell(rows: list[dict[str, str]], match: dict[str, str], column: str) -> str | None:
    for row in rows:
        if all(row.get(k) == v for k, v in match.items()) and row.get(column):
            return row[column]
    return None


def measured_stamp(section: str) -> str | None:
    """The section's `Measured` time ("2026-11-29 21:25 UTC"), None without one."""
    found = re.search(r"Measured (\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC)", section)
    return found.group(1) if found else None


def _measured(section: str) -> tuple[str, str]:
    stamp = measured_stamp(section)
    command = re.search(r"Command: `([^`]+)`", section)
    return (stamp.split(" ")[0] if stamp else "?"), (command.group(1) if command else "?")


def missing(text: str) -> list[str]:
    """The headlines whose section, row or column is not in `text`."""
    found = sections(text)
    gone = []
    for h in HEADLINES:
        rows = table_rows(found.get(h.section, ""))
        if _value(found.get(h.section, ""), h) is None or (
            h.against and _cell(rows, h.against, h.column) is None
        ):
            gone.append(f"{h.what} (section {h.section})")
    return gone


def anchor(section: str) -> str:
    """The link GitHub makes of the section's heading (`## Serving latency` -> #serving-latency)."""
    heading = re.search(r"^## (.+)$", section, re.M)
    title = heading.group(1) if heading else ""
    return "#" + re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def render(text: str) -> str:
    """The summary section for the document `text`."""
    found = sections(text)
    lines = [
        "## Summary", "",
        "Each headline figure, read from the section that measured it (linked), with the date "
        "and command of that measurement; the napkin answer was measured in the same run on the "
        "same rows. `python -m benchmarks.summary` rewrites this table from the sections.", "",
        "| what | ours | napkin (ours ÷ napkin) | target | measured | command |",
        "|---|---|---|---|---|---|",
    ]  # fmt: skip
    links = []
    for i, h in enumerate(HEADLINES, 1):
        section = found.get(h.section, "")
        rows = table_rows(section)
        ours = _value(section, h) or "missing"
        napkin = ""
        if h.against:
            base = _cell(rows, h.against, h.column)
            napkin = f"{base} {h.against_label}" if base else "missing"
            with contextlib.suppress(TypeError, ValueError, ZeroDivisionError):
                napkin += f" ({float(ours) / float(base):.2f}×)"
        date, command = _measured(section)
        measured = _cell(rows, h.row, "measured") if h.row else None  # a row's own date
        date = measured.split(" ")[0] if measured else date
        lines.append(f"| [{h.what}][{i}] | {ours} | {napkin} | {h.target} | {date} | `{command}` |")
        links.append(f"[{i}]: {anchor(section)}")
    return "\n".join([*lines, "", *links])


def wrap_prose(text: str) -> str:
    """Prose lines over WIDTH wrapped at it; tables, headings, code and comments as they are
    (a list item's continuation indented under its text)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        keep = fenced or len(line) <= WIDTH or line.lstrip().startswith(("|", "#", "<!--"))
        if keep:
            out.append(line)
            continue
        bullet = re.match(r"(\s*(?:[-*]|\d+\.)\s+)", line)
        indent = " " * len(bullet.group(1)) if bullet else re.match(r"\s*", line).group(0)
        trailing = "  " if line.endswith("  ") else ""  # a markdown line break stays one
        text = line[bullet.end() :] if bullet else line  # the bullet is the first indent
        wrapped = textwrap.wrap(
            text.strip(), WIDTH, initial_indent=bullet.group(1) if bullet else indent,
            subsequent_indent=indent, break_long_words=False, break_on_hyphens=False,
        )  # fmt: skip
        out.extend([*wrapped[:-1], wrapped[-1] + trailing])
    return "\n".join(out)


def with_summary(text: str) -> str:
    """`text` with its prose wrapped and its summary section (placed after the title and its
    paragraph) made anew."""
    section = f"<!-- BEGIN {SUMMARY} -->\n{render(text)}\n<!-- END {SUMMARY} -->"
    pattern = re.compile(rf"<!-- BEGIN {SUMMARY} -->.*?<!-- END {SUMMARY} -->", re.S)
    if pattern.search(text):
        return wrap_prose(pattern.sub(lambda _: section, text))
    first = text.find("<!-- BEGIN ")
    first = len(text) if first < 0 else first
    return wrap_prose(f"{text[:first]}{section}\n\n{text[first:]}")


def main() -> None:
    from benchmarks.report import BENCHMARKS_MD
    from perfcast.atomic import atomic_write_text

    text = with_summary(BENCHMARKS_MD.read_text())
    atomic_write_text(BENCHMARKS_MD, text)
    gone = missing(text)
    print(f"wrote the summary of {BENCHMARKS_MD.name}" + (f"; missing: {gone}" if gone else ""))


if __name__ == "__main__":
    main()

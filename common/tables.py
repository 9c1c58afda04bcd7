"""Tables that read at the terminal's width, 80 columns and piped included: columns are kept
in priority order while they fit at their natural width (wrapping ones at a floor), the rest
are left out and named, so that nothing is squeezed to "Ap…"."""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table


@dataclass(frozen=True)
class Column:
    name: str
    priority: int  # 0 is always shown; higher numbers are dropped first
    justify: str = "left"
    wrap: bool = False  # may fold onto several lines, down to `floor` characters wide
    floor: int = 20


def fit(
    columns: list[Column], rows: list[list[str]], width: int, title: str | None = None
) -> tuple[Table, list[str]]:
    """A rich Table of the columns that fit `width` characters (a column drops, highest
    priority number first, until the rest fit), and the names of the columns left out."""
    natural = {
        c.name: max([len(c.name), *(len(row[i]) for row in rows)]) for i, c in enumerate(columns)
    }
    needed = {c.name: min(natural[c.name], c.floor) if c.wrap else natural[c.name] for c in columns}
    kept = list(columns)
    # a rounded box: one border per column plus one, and a space of padding either side
    while len(kept) > 1 and sum(needed[c.name] + 3 for c in kept) + 1 > width:
        drop = max((c for c in kept if c.priority > 0), key=lambda c: c.priority, default=None)
        if drop is None:
            break
        kept.remove(drop)
    table = Table(title=title)
    for column in kept:
        table.add_column(
            column.name, justify=column.justify, no_wrap=not column.wrap,  # type: ignore[arg-type]
            overflow="fold",
        )  # fmt: skip
    index = [columns.index(c) for c in kept]
    for row in rows:
        table.add_row(*(row[i] for i in index))
    return table, [c.name for c in columns if c not in kept]

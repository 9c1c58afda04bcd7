"""The ask page's time-vs-cost plot as inline SVG, and the Pareto set it marks.

Inline SVG rendered here rather than a JavaScript chart library: the page works without
scripts, a test reads its numbers from the DOM, and nothing has to be vendored or built.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from perfcast.units import duration, number, ticks

Format = Callable[[float], str]  # a tick's text: perfcast.units.duration, number, ...


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates (both coordinates lower is better; a
    point dominates another when it is no worse in both and better in one). Ties: equal
    points are all kept."""
    front = []
    for i, (x, y) in enumerate(points):
        dominated = any(
            (ox <= x and oy <= y) and (ox < x or oy < y) for j, (ox, oy) in enumerate(points)
            if j != i
        )  # fmt: skip
        if not dominated:
            front.append(i)
    return front


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    label: str  # shown on hover and beside the point
    rank: int


def pareto_ranks(points: Sequence[Point]) -> set[int]:
    """Ranks of the points on the Pareto front, among those with both figures finite."""
    finite = [p for p in points if math.isfinite(p.x) and math.isfinite(p.y)]
    return {finite[i].rank for i in pareto_front([(p.x, p.y) for p in finite])}


WIDTH, HEIGHT, PAD = 640, 360, 56


CHAR_W = 6.6  # px per character of a tick label, generous


def _axis_ticks(lo: float, hi: float, fmt: Format) -> list[float]:
    """Round values in [lo, hi]: steps a person counts time in for a duration axis (15 min,
    6 h), else 1-2-5 steps; the labels never read the same twice."""
    values = ticks(lo, hi, seconds=fmt is duration)
    out: list[float] = []
    for v in values:
        if not out or fmt(v) != fmt(out[-1]):
            out.append(v)
    return out


def _spaced(marks: Sequence[tuple[float, str]], gap: float = 10.0) -> list[tuple[float, str]]:
    """(centre px, text) left to right, each kept only when it clears the last kept one."""
    kept: list[tuple[float, str]] = []
    for at, text in sorted(marks):
        if kept and at - CHAR_W * len(text) / 2 < kept[-1][0] + CHAR_W * len(kept[-1][1]) / 2 + gap:
            continue
        kept.append((at, text))
    return kept


def scatter_svg(
    points: Sequence[Point],
    x_label: str,
    y_label: str,
    x_format: Format = number,
    y_format: Format = number,
) -> str:
    """Points at (x, y) on linear axes, Pareto points filled and joined by a step line; tick
    and hover texts in the axes' units (never e-notation)."""
    finite = [p for p in points if math.isfinite(p.x) and math.isfinite(p.y)]
    if not finite:
        return '<p class="empty">nothing to plot: no configuration has both figures</p>'
    xs, ys = [p.x for p in finite], [p.y for p in finite]
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = min(ys), max(ys)
    # a single value on an axis gets a little room either side instead of a zero-width range
    x_lo, x_hi = (x_lo * 0.9, x_hi * 1.1) if x_hi == x_lo else (x_lo, x_hi)
    y_lo, y_hi = (y_lo * 0.9, y_hi * 1.1) if y_hi == y_lo else (y_lo, y_hi)
    # a margin of 6% either side: no point sits on an axis, and the ticks are inside the plot
    x_lo, x_hi = x_lo - 0.06 * (x_hi - x_lo), x_hi + 0.06 * (x_hi - x_lo)
    y_lo, y_hi = y_lo - 0.06 * (y_hi - y_lo), y_hi + 0.06 * (y_hi - y_lo)

    y_ticks = _axis_ticks(y_lo, y_hi, y_format)
    # room left of the axis for the longest y label and, beyond it, the rotated axis title
    left = max(PAD, round(6 + CHAR_W * max(len(y_format(t)) for t in y_ticks) + 24))

    def sx(v: float) -> float:
        return left + (v - x_lo) / ((x_hi - x_lo) or 1) * (WIDTH - left - PAD)

    def sy(v: float) -> float:
        return HEIGHT - PAD - (v - y_lo) / ((y_hi - y_lo) or 1) * (HEIGHT - 2 * PAD)

    front = set(pareto_front([(p.x, p.y) for p in finite]))  # indices into `finite`
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{escape(y_label)} against {escape(x_label)}">',
        f'<line x1="{left}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" '
        'class="axis"/>',
        f'<line x1="{left}" y1="{PAD}" x2="{left}" y2="{HEIGHT - PAD}" class="axis"/>',
    ]
    # an x label is kept only clear of the y labels' column (left of the axis) and of its
    # neighbours: no two tick labels ever overlap
    x_marks = [(sx(t), x_format(t)) for t in _axis_ticks(x_lo, x_hi, x_format)]
    x_marks = [(at, text) for at, text in x_marks if at - CHAR_W * len(text) / 2 >= left - 2]
    for at, text in _spaced(x_marks):
        parts.append(
            f'<text x="{at:.1f}" y="{HEIGHT - PAD + 16}" class="tick" '
            f'text-anchor="middle">{escape(text)}</text>'
        )
    for t in y_ticks:
        parts.append(
            f'<text x="{left - 6}" y="{sy(t) + 4:.1f}" class="tick" '
            f'text-anchor="end">{y_format(t)}</text>'
        )
    parts.append(
        f'<text x="{WIDTH / 2}" y="{HEIGHT - 12}" class="label" '
        f'text-anchor="middle">{escape(x_label)}</text>'
    )
    parts.append(
        f'<text x="14" y="{HEIGHT / 2}" class="label" text-anchor="middle" '
        f'transform="rotate(-90 14 {HEIGHT / 2})">{escape(y_label)}</text>'
    )
    ordered = sorted((finite[i] for i in front), key=lambda p: (p.x, p.y))
    if len(ordered) > 1:
        path = " ".join(f"{sx(p.x):.1f},{sy(p.y):.1f}" for p in ordered)
        parts.append(f'<polyline points="{path}" class="pareto-line"/>')
    for i, p in enumerate(finite):
        kind = "pareto" if i in front else "dominated"
        parts.append(
            f'<circle cx="{sx(p.x):.1f}" cy="{sy(p.y):.1f}" r="6" class="point {kind}" '
            f'data-rank="{p.rank}" data-x="{p.x!r}" data-y="{p.y!r}">'
            f"<title>#{p.rank} {escape(p.label)}: {x_format(p.x)}, {y_format(p.y)}</title></circle>"
            f'<text x="{sx(p.x) + 8:.1f}" y="{sy(p.y) - 8:.1f}" class="point-label">'
            f"#{p.rank}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)

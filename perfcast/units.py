"""Numbers as a person reads them: durations in the unit that suits them (`0.86 s`, `45 min`,
`3.1 h`, `9.2 d`), never e-notation; fractions as one percent; counts with thousands commas.
Every figure a person reads in the command line, the dashboard or a report goes through here."""

from __future__ import annotations

import math

_UNITS = ((86400.0, "d"), (3600.0, "h"), (60.0, "min"))


def _digits(value: float) -> str:
    """Three significant figures at most, never e-notation: 0.862, 8.62, 86.2, 862, 8,620."""
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}".removesuffix(".0")
    if value >= 1:
        return f"{value:.2f}".rstrip("0").removesuffix(".")
    return f"{value:.2g}" if value >= 1e-4 else "0"


def duration(seconds: float | None) -> str:
    """A duration in seconds as `0.86 s`, `45 s`, `12 min`, `3.1 h` or `9.2 d` (`–` if unknown)."""
    if seconds is None or not math.isfinite(seconds):
        return "–"
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    if 0 < seconds < 0.001:
        return f"{sign}{_digits(seconds * 1e6)} µs"
    if 0 < seconds < 0.1:
        return f"{sign}{_digits(seconds * 1e3)} ms"
    for size, unit in _UNITS:
        # a unit is used from twice its size: 90 s reads `90 s`, 100 min reads `100 min`
        if seconds >= 2 * size:
            return f"{sign}{_digits(seconds / size)} {unit}"
    return f"{sign}{_digits(seconds)} s"


def percent(fraction: float | None) -> str:
    """A fraction (1.33) as a percent (`133%`); three significant figures at most."""
    if fraction is None or not math.isfinite(fraction):
        return "–"
    return pct(fraction * 100)


def pct(value: float | None) -> str:
    """A value already in percent (a MAPE) as `0.52%`, `5.1%`, `45.3%`, `206%`."""
    if value is None or not math.isfinite(value):
        return "–"
    sign, value = ("-" if value < 0 else ""), abs(value)
    if value >= 100:
        return f"{sign}{value:,.0f}%"
    if value >= 1:
        return f"{sign}{value:.1f}%"
    return f"{sign}{_digits(value)}%"


def number(value: float | None) -> str:
    """A plain figure with at most three significant digits before the point and commas
    (`1,204`, `0.043`, `65,000,000`), never e-notation."""
    if value is None or not math.isfinite(value):
        return "–"
    if float(value).is_integer():
        return f"{value:,.0f}"
    sign = "-" if value < 0 else ""
    return sign + _digits(abs(value))

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


# ---- chart ticks ------------------------------------------------------------------------------

_MINUTE, _HOUR, _DAY = 60.0, 3600.0, 86400.0
# steps a person counts time in: 15 s, 30 min, 6 h, 2 d, ... (beyond these: 1-2-5 days)
_DURATION_STEPS = (
    1.0, 2.0, 5.0, 10.0, 15.0, 30.0,
    _MINUTE, 2 * _MINUTE, 5 * _MINUTE, 10 * _MINUTE, 15 * _MINUTE, 30 * _MINUTE,
    _HOUR, 2 * _HOUR, 3 * _HOUR, 6 * _HOUR, 12 * _HOUR,
    _DAY, 2 * _DAY, 5 * _DAY, 10 * _DAY, 20 * _DAY, 50 * _DAY, 100 * _DAY,
)  # fmt: skip
# log-scale marks for durations, about a decade apart: 1 s, 10 s, 1 min, 10 min, 1 h, 1 d, ...
# (no 10 h: 0.4 decade from 1 d, their labels would touch)
_DURATION_MARKS = (1.0, 10.0, _MINUTE, 10 * _MINUTE, _HOUR, _DAY, 10 * _DAY, 100 * _DAY,
                   1000 * _DAY)  # fmt: skip


def _one_two_five(raw: float) -> float:
    """The smallest of 1, 2, 5 x 10^k at least `raw` (> 0)."""
    base = 10.0 ** math.floor(math.log10(raw))
    return next(m * base for m in (1.0, 2.0, 5.0, 10.0) if m * base >= raw * (1 - 1e-9))


def ticks(lo: float, hi: float, n: int = 5, *, seconds: bool = False) -> list[float]:
    """About `n` (at most n + 1) round values in [lo, hi] for a linear axis: steps of 1, 2 or
    5 x 10^k, or, for `seconds`, steps a person counts time in (15 s, 30 min, 6 h, 2 d).
    Labelled with `duration` or `number`, no two read the same."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(n, 1)
    if seconds and 1.0 <= raw <= _DURATION_STEPS[-1]:
        step = next(s for s in _DURATION_STEPS if s >= raw * (1 - 1e-9))
    elif seconds and raw > _DURATION_STEPS[-1]:
        step = _one_two_five(raw / _DAY) * _DAY
    else:
        step = _one_two_five(raw)
    first = math.ceil(lo / step - 1e-9)
    out = []
    k = first
    while k * step <= hi * (1 + 1e-12) + 1e-12:
        out.append(0.0 if k == 0 else k * step)
        k += 1
    return out


def log_ticks(lo: float, hi: float, *, seconds: bool = False) -> list[float]:
    """Marks for a log axis over [lo, hi] (lo > 0): decades, or for `seconds` the durations a
    person knows (1 s, 10 s, 1 min, 10 min, 1 h, 1 d, 10 d, ...). A range too narrow for two
    such marks gets round linear steps inside it instead (`ticks`)."""
    if not (lo > 0 and math.isfinite(hi)) or hi < lo:
        return []
    if seconds:
        below = [10.0**k for k in range(math.floor(math.log10(lo)), 0)]
        above = [_DURATION_MARKS[-1] * 10.0**k for k in range(1, 4)]
        marks = [*below, *_DURATION_MARKS, *above]
    else:
        marks = [10.0**k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
    inside = [m for m in marks if lo * (1 - 1e-9) <= m <= hi * (1 + 1e-9)]
    if len(inside) >= 2:
        return inside
    return [t for t in ticks(lo, hi, 4, seconds=seconds) if t > 0] or [lo, hi]

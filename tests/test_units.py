"""Figures as a person reads them (issue 35): durations in the unit that suits them, percents
one way, and never e-notation at any magnitude."""

from __future__ import annotations

import re

import pytest

from perfcast.units import duration, log_ticks, number, pct, percent, ticks


@pytest.mark.parametrize(
    "seconds,shown",
    [
        (0.86, "0.86 s"), (0.05, "50 ms"), (4.2e-5, "42 µs"), (45.0, "45 s"), (90.0, "90 s"),
        (45 * 60, "45 min"), (3.1 * 3600, "3.1 h"), (2.234e5, "2.59 d"), (65e6, "752 d"),
        (0.0, "0 s"), (-7200.0, "-2 h"), (float("nan"), "–"), (None, "–"),
    ],
)  # fmt: skip
def test_durations_read_in_human_units(seconds: float, shown: str) -> None:
    assert duration(seconds) == shown


def test_percent_is_one_way() -> None:
    assert percent(1.33) == pct(133.0) == "133%"
    assert pct(206.4) == "206%" and pct(5.12) == "5.1%" and pct(0.523) == "0.52%"
    assert percent(0.844) == "84.4%"


@pytest.mark.parametrize("exponent", range(-7, 13))
def test_no_e_notation_at_any_magnitude(exponent: int) -> None:
    value = 1.2345 * 10.0**exponent
    for shown in (duration(value), pct(value), percent(value), number(value)):
        assert not re.search(r"\de[+-]?\d", shown), shown
    assert number(1204) == "1,204" and number(0.04332) == "0.043"


@pytest.mark.parametrize(
    "lo,hi,seconds,shown",
    [
        (0.0, 3.1e6, True, ["0 s", "10 d", "20 d", "30 d"]),
        (120.0, 95000.0, True, ["6 h", "12 h", "18 h", "24 h"]),
        (0.0, 16.0, False, ["0", "5", "10", "15"]),
        (0.0, 1.0, False, ["0", "0.2", "0.4", "0.6", "0.8", "1"]),
    ],
)  # fmt: skip
def test_chart_ticks_are_round_values_a_person_counts_in(lo, hi, seconds, shown) -> None:
    values = ticks(lo, hi, seconds=seconds)
    assert [duration(v) if seconds else number(v) for v in values] == shown


def test_log_ticks_for_durations_are_marks_a_person_knows() -> None:
    # the JCT axis, 35 s to 3.09e6 s, read "1e+063.09e+06"
    assert [duration(v) for v in log_ticks(35.0, 3.09e6, seconds=True)] == [
        "60 s", "10 min", "60 min", "24 h", "10 d",
    ]  # fmt: skip
    # too narrow for two marks: round steps inside the range instead of its raw ends
    assert [duration(v) for v in log_ticks(25.9 * 86400, 61 * 86400, seconds=True)] == [
        "30 d", "40 d", "50 d", "60 d",
    ]  # fmt: skip
    assert log_ticks(0.5, 200.0) == [1.0, 10.0, 100.0]

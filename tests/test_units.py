"""Figures as a person reads them (issue 35): durations in the unit that suits them, percents
one way, and never e-notation at any magnitude."""

from __future__ import annotations

import re

import pytest

from perfcast.units import duration, number, pct, percent


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

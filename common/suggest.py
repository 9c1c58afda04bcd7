"""`did you mean ...?` for a misspelt name: a GPU type, a dataset, a policy."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The choice nearest to `name` (case-insensitive), if one is near enough to be a typo."""
    by_lower = {choice.lower(): choice for choice in choices}
    found = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.5)
    return by_lower[found[0]] if found else None


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """` (did you mean 'v100'?)` for the nearest choice, or an empty string."""
    near = closest(name, choices)
    return f" (did you mean {near!r}?)" if near is not None else ""

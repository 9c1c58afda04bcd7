"""Request bodies JSON cannot answer for: non-finite numbers and lone surrogates.

Python's json module reads `NaN`, `Infinity` and `1e999` as floats that no JSON answer can
carry, and `"\\ud800"` as a string no UTF-8 answer can encode. Such a body is refused with a
422 naming the field before the app sees it. Only a body that might hold one (a byte scan) is
parsed a second time, to find where.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np

# a number with an exponent of three or more digits (1e999 overflows to inf); an escaped
# surrogate (lone or paired: the careful parse tells which)
_BIG_EXPONENT = re.compile(rb"[0-9][eE]\+?0*[0-9]{3}")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _suspect(body: bytes) -> bool:
    """Whether the body might hold a value JSON cannot answer for (byte scans: a fraction of
    what parsing the body costs)."""
    return (
        b"NaN" in body
        or b"Infinity" in body
        or (b"\\u" in body and _SURROGATE_ESCAPE.search(body) is not None)
        or _big_exponent(body)
    )


def _big_exponent(body: bytes) -> bool:
    """`_BIG_EXPONENT.search(body)`, for a large body tried only where a digit precedes an
    `e` (re's byte-by-byte scan of a large body costs as much as parsing it)."""
    if len(body) < 4096:
        return _BIG_EXPONENT.search(body) is not None
    data = np.frombuffer(body, dtype=np.uint8)
    e = np.flatnonzero((data[1:] | 0x20) == ord("e"))  # e or E, after the first byte
    after_digit = e[data[e] - ord("0") < 10]  # data[e] is the byte before (uint8 wraps)
    return any(_BIG_EXPONENT.match(body, int(i)) for i in after_digit)


class _NonFinite(float):
    """A parsed NaN/Infinity/overflowing number, remembered as the text the client sent."""

    text: str


def _non_finite(text: str) -> float:
    value = _NonFinite(float(text))
    value.text = text
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    return value if math.isfinite(value) else _non_finite(text)


def find_unsafe(body: bytes) -> tuple[list[str | int], str] | None:
    """(path in the document, message) of the first value JSON cannot answer for, or None
    (also None for a body that is not JSON at all: the app words that error)."""
    if not _suspect(body):
        return None
    try:
        document = json.loads(body, parse_constant=_non_finite, parse_float=_parse_float)
    except (ValueError, RecursionError):
        return None
    return _walk(document, [])


def _walk(value: object, path: list[str | int]) -> tuple[list[str | int], str] | None:
    if isinstance(value, _NonFinite):
        return path, (
            f"{value.text} is not a finite number (JSON has no NaN or infinity); "
            "send a finite number, or null where the field may be missing"
        )
    if isinstance(value, str):
        return (path, _SURROGATE) if _has_lone_surrogate(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if _has_lone_surrogate(key):
                return [*path, key.encode("utf-8", "backslashreplace").decode()], _SURROGATE
            found = _walk(item, [*path, key])
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _walk(item, [*path, i])
            if found:
                return found
    return None


_SURROGATE = "a lone UTF-16 surrogate (\\ud800-\\udfff) is not text; send valid Unicode"


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False

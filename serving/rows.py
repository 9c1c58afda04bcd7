"""JSON types of contract rows, checked before any row reaches pandas or a micro-batch.

The contract coerces (a CSV is all text), so on its own it reads `4.5` GPUs as 4, `true` as 1
and `"4"` as 4. A JSON client says what it means: an integer column takes integers (a whole
`4.0` too, which is what pandas writes for a float column of whole numbers), a float column
numbers, a boolean column booleans, a text column strings; null anywhere (the contract then
decides whether the column may be missing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from perfcast.datasets.contract import SCHEMAS
from perfcast.errors import ContractError


def _column_types(kind: str) -> dict[str, str]:
    types = {}
    for name, column in SCHEMAS[kind].columns.items():
        dtype = str(column.dtype).lower()
        types[name] = (
            "integer" if "int" in dtype else
            "boolean" if "bool" in dtype else
            "number" if "float" in dtype else "string"
        )  # fmt: skip
    return types


_TYPES = {kind: _column_types(kind) for kind in SCHEMAS}


def _fits(value: object, wanted: str) -> bool:
    if value is None:
        return True
    if wanted == "string":
        return isinstance(value, str)
    if wanted == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):  # a bool is an int to Python, not a number to JSON
        return False
    if wanted == "number":
        return isinstance(value, int | float)
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def check_types(kind: str, rows: Sequence[Mapping[str, object]]) -> None:
    """Raise ContractError naming the first row (from 1) and column whose JSON type does not
    fit the contract table `kind`."""
    types = _TYPES[kind]
    for number, row in enumerate(rows, start=1):
        for column, value in row.items():
            wanted = types.get(column)
            if wanted is not None and not _fits(value, wanted):
                raise ContractError(
                    f"{_shown(value)} is not {'an' if wanted == 'integer' else 'a'} {wanted} "
                    f"({kind} table)",
                    row=number,
                    column=column,
                )


def distinct_columns(rows: Iterable[Mapping[str, object]]) -> int:
    """Column names across all rows (pandas makes one column per distinct name)."""
    names: set[str] = set()
    for row in rows:
        names.update(row)
    return len(names)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."

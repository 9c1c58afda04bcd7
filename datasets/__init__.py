"""Public measurements and traces as validated contract tables.

`load(name)` gives a dataset's table, `registry.registry()` lists them, `validate(df, kind)`
checks any table against the contract, `read_table` / `write_table` move tables to and from files.
The names resolve on first use, so importing a submodule (e.g. the command line's) does not
load pandas and pandera.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfcast.datasets.contract import KINDS, SCHEMAS, validate
    from perfcast.datasets.io import read_table, write_table
    from perfcast.datasets.registry import Dataset, dataset, get, load

_HOMES = {
    "KINDS": "contract", "SCHEMAS": "contract", "validate": "contract",
    "read_table": "io", "write_table": "io",
    "Dataset": "registry", "dataset": "registry", "get": "registry", "load": "registry",
}  # fmt: skip
# `registry()` itself is reached as perfcast.datasets.registry.registry: the submodule's name
# would shadow a lazily bound function of the same name.


def __getattr__(name: str) -> object:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"perfcast.datasets.{_HOMES[name]}"), name)


__all__ = [
    "KINDS", "SCHEMAS", "Dataset", "dataset", "get", "load", "read_table",
    "validate", "write_table",
]  # fmt: skip

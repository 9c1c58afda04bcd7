"""Public measurements and traces as validated contract tables.

`load(name)` gives a dataset's table, `registry()` lists them, `validate(df, kind)` checks any
table against the contract, `read_table` / `write_table` move tables to and from files.
"""

from perfcast.datasets.contract import KINDS, SCHEMAS, TARGETS, validate
from perfcast.datasets.io import read_table, write_table
from perfcast.datasets.registry import Dataset, dataset, get, load, registry

__all__ = [
    "KINDS", "SCHEMAS", "TARGETS", "Dataset", "dataset", "get", "load", "read_table",
    "registry", "validate", "write_table",
]  # fmt: skip

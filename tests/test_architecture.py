"""The layers, checked: a module imports only from its own layer or the layers below it.

    perfcast (errors, paths) < datasets < features < predictor < training < optimizer
        < scheduler < serving < command line

The command line (perfcast/cli.py and every package's `cli` module) is the top layer and may
import anything. Imports inside functions count: they are dependencies all the same.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = [
    "perfcast", "datasets", "features", "predictor", "training", "optimizer", "scheduler",
    "serving",
]  # fmt: skip
TOP = len(LAYERS)


def _source_files() -> list[tuple[str, Path]]:
    files = []
    for layer in LAYERS:
        files += [(layer, path) for path in sorted((ROOT / layer).rglob("*.py"))]
    return files


def _rank(layer: str, path: Path) -> int:
    return TOP if path.stem == "cli" else LAYERS.index(layer)


def _imported_layers(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "perfcast" and len(parts) > 1 and parts[1] in LAYERS:
                found.add(parts[1])
    return found


def test_every_layer_folder_is_checked() -> None:
    assert len(_source_files()) > 100  # the walk found the packages


@pytest.mark.parametrize("layer,path", _source_files(), ids=lambda v: str(v))
def test_no_import_runs_up_a_layer(layer: str, path: Path) -> None:
    rank = _rank(layer, path)
    upward = sorted(t for t in _imported_layers(path) if LAYERS.index(t) > rank)
    assert not upward, f"{path.relative_to(ROOT)} ({layer}) imports upward: {upward}"

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


def _imported_names(path: Path) -> list[list[str]]:
    """Every dotted name `path` imports (a `from m import x` gives m and m.x), split at dots."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return [name.split(".") for name in names]


def _imported_layers(path: Path) -> set[str]:
    return {
        p[1] for p in _imported_names(path) if p[0] == "perfcast" and len(p) > 1 and p[1] in LAYERS
    }


def test_every_layer_folder_is_checked() -> None:
    assert len(_source_files()) > 100  # the walk found the packages


@pytest.mark.parametrize("layer,path", _source_files(), ids=lambda v: str(v))
def test_no_import_runs_up_a_layer(layer: str, path: Path) -> None:
    rank = _rank(layer, path)
    upward = sorted(t for t in _imported_layers(path) if LAYERS.index(t) > rank)
    assert not upward, f"{path.relative_to(ROOT)} ({layer}) imports upward: {upward}"


# Inside the scheduler: core < facts (catalogs, memory, oracle, throughput model) < policies
#   < sim | live | tune (three drivers, none importing another); `cli` modules sit on top.
SCHEDULER = ROOT / "scheduler"
SUB_LAYERS = {"core": 0, "facts": 1, "policies": 2, "sim": 3, "live": 3, "tune": 3}


def _scheduler_files() -> list[Path]:
    return sorted(p for p in SCHEDULER.rglob("*.py") if p.parent != SCHEDULER)


def _imported_sub_layers(path: Path) -> set[str]:
    return {
        p[2] for p in _imported_names(path) if p[:2] == ["perfcast", "scheduler"] and len(p) > 2
    }


def test_every_scheduler_module_sits_in_a_sub_layer() -> None:
    loose = sorted(p.name for p in SCHEDULER.glob("*.py") if p.stem not in ("__init__", "cli"))
    assert not loose, f"scheduler modules outside core/facts/policies/sim/live/tune: {loose}"
    subpackages = {p.parent.name for p in _scheduler_files()}
    assert subpackages == set(SUB_LAYERS), f"unranked scheduler sub-packages: {subpackages}"


@pytest.mark.parametrize("path", _scheduler_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_scheduler_sub_layers_import_down_only(path: Path) -> None:
    own = path.relative_to(SCHEDULER).parts[0]
    if path.stem == "cli":
        return
    wrong = sorted(
        sub
        for sub in _imported_sub_layers(path) - {own, "cli"}
        if sub not in SUB_LAYERS or SUB_LAYERS[sub] >= SUB_LAYERS[own]
    )
    assert not wrong, f"{path.relative_to(ROOT)} ({own}) imports across or up: {wrong}"

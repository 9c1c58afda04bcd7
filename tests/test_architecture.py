"""The layers, checked: a module imports only from its own layer or the layers below it.

    perfcast (errors, paths) < datasets < features < predictor < training < optimizer
        < scheduler < serving < command line

The command line (common/cli.py and every package's `cli` module) is the top layer and may
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
# each layer's folder: the layer's own name, but for perfcast's root modules (setup.py)
FOLDERS = {layer: ROOT / ("common" if layer == "perfcast" else layer) for layer in LAYERS}


def _source_files() -> list[tuple[str, Path]]:
    files = []
    for layer in LAYERS:
        files += [(layer, path) for path in sorted(FOLDERS[layer].rglob("*.py"))]
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


# The task registry (predictor/tasks.py) is the one definition of the tasks' names and targets:
# no other module of the package spells out three or more task names in one literal (a dict's
# keys, a tuple, a list, a set) or assigns a literal tuple of target columns to a `targets` name.
def _task_registry_duplicates(path: Path) -> list[str]:
    from perfcast.predictor.tasks import TASK_SPECS

    names = set(TASK_SPECS)
    targets = {t for spec in TASK_SPECS.values() for t in spec.targets}
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
        if isinstance(node, ast.Dict | ast.Tuple | ast.List | ast.Set) and items:
            spelled = {i.value for i in items if isinstance(i, ast.Constant)} & names
            if len(spelled) >= 3:
                found.append(f"line {node.lineno}: task names {sorted(spelled)}")
        if isinstance(node, ast.Assign | ast.AnnAssign):
            bound = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            if (
                any(isinstance(b, ast.Name) and "target" in b.id.lower() for b in bound)
                and isinstance(value, ast.Tuple | ast.List)
                and value.elts
                and all(isinstance(e, ast.Constant) and e.value in targets for e in value.elts)
            ):
                found.append(f"line {node.lineno}: targets {ast.unparse(value)}")
    return found


REGISTRY = ROOT / "predictor" / "tasks.py"


@pytest.mark.parametrize(
    "layer,path",
    [(layer, path) for layer, path in _source_files() if path != REGISTRY],
    ids=lambda v: str(v),
)
def test_tasks_are_named_and_given_targets_only_in_the_registry(layer: str, path: Path) -> None:
    found = _task_registry_duplicates(path)
    assert not found, f"{path.relative_to(ROOT)} defines tasks again (use TASK_SPECS): {found}"


def test_the_registry_is_what_the_package_serves_and_fits() -> None:
    """Each task's predictor class, contract table and families come from its one entry."""
    from typing import get_args

    from perfcast.datasets.contract import SCHEMAS
    from perfcast.predictor import make_predictor
    from perfcast.predictor.tasks import TASK_SPECS, Task

    assert set(get_args(Task)) == set(TASK_SPECS)
    for name, spec in TASK_SPECS.items():
        predictor = make_predictor(name)
        assert (predictor.task, predictor.kind, predictor.targets) == (
            name, spec.table, spec.targets,
        )  # fmt: skip
        assert predictor.family == spec.default_family in spec.families
        assert set(spec.targets) <= set(SCHEMAS[spec.table].columns)


def test_tools_resolve_every_module_by_its_import_path() -> None:
    """The editable install (`make install`) is strict: a folder named on a plain path in a .pth
    file mirrors the import paths (perfcast/datasets/registry.py, ...), each file a link to the
    one here, so a tool that resolves imports by path draws one package, not nine folders."""
    import sysconfig

    import perfcast.datasets

    mirror = Path(perfcast.datasets.__file__).parent.parent  # .../perfcast, the import root
    site = Path(sysconfig.get_paths()["purelib"])
    on_pth = {
        Path(line.strip())
        for pth in site.glob("*.pth")
        for line in pth.read_text().splitlines()
        if line.strip() and not line.startswith(("import ", "#"))
    }
    assert mirror.parent in on_pth, (
        f"perfcast imports from {mirror}, not from a folder a .pth file names: an editable "
        "install by import hook, which tools cannot follow; run `make install` (strict)"
    )
    for layer, path in _source_files():
        rel = path.relative_to(FOLDERS[layer])
        linked = mirror / rel if layer == "perfcast" else mirror / layer / rel
        assert linked.resolve() == path, f"{linked} does not lead to {path}: run `make install`"

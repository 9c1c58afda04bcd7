"""Datasets measured by perfcast's own profilers on the project's machines.

Each folder under datasets/measured/ is one measurement session on one device (`cpu/` is the
2-core development VM); its meta.json names the host, the device, the command that regenerates
it (`perfcast profile dataset ...`) and each file's contract kind. Every file it lists becomes a
dataset `measured-<folder>-<file stem>`, e.g. `measured-cpu-zoo-scaling`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from perfcast.datasets.io import read_table
from perfcast.datasets.registry import Loader, dataset
from perfcast.errors import ContractError

MEASURED_DIR = Path(__file__).resolve().parent.parent / "measured"
LICENSE = "Apache-2.0"


def _loader(path: Path) -> Loader:
    def load() -> pd.DataFrame:
        return read_table(path)

    return load


def _register(folder: Path) -> None:
    meta_path = folder / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
        files = meta["files"]
        host, device, command = meta["host"], meta["device"], meta["command"]
    except (ValueError, KeyError, TypeError) as err:
        raise ContractError(
            f"unreadable measured-dataset metadata: {err}", file=str(meta_path)
        ) from None
    for name, info in files.items():
        path = folder / name
        stem = Path(name).stem.replace("_", "-")
        dataset(
            f"measured-{folder.name}-{stem}",
            info["kind"],
            description=f"{info['description']}; measured on {device} ({command})",
            source=f"measured:{host}",
            files=(str(path),),
            license=LICENSE,
            measured=True,
        )(_loader(path))


for _folder in sorted(MEASURED_DIR.glob("*/meta.json")):
    _register(_folder.parent)

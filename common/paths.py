"""Where perfcast keeps its own state (MLflow store, caches) and finds the shared datasets."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

# The source checkout this module sits in (for an installed wheel: site-packages' parent, where
# no shared/ datasets are found and the loaders download instead).
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def state_dir() -> Path:
    """perfcast's writable data directory: `$PERFCAST_HOME`, else the platform's per-user data
    directory (never inside the installed package: site-packages may be read-only or shared)."""
    home = os.environ.get("PERFCAST_HOME")
    path = Path(home) if home else Path(platformdirs.user_data_dir("perfcast", appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path


def download_cache_dir() -> Path:
    """Where files downloaded from their source repositories are kept."""
    path = state_dir() / "downloads"
    path.mkdir(parents=True, exist_ok=True)
    return path


def shown(path: Path | str) -> str:
    """`path` as an answer may show it: under the state directory, relative to
    `$PERFCAST_HOME`; elsewhere its name only (an answer must not tell a client where the
    server's files are)."""
    try:
        inside = Path(path).resolve().relative_to(state_dir().resolve())
    except ValueError:
        return Path(path).name
    return f"$PERFCAST_HOME/{inside.as_posix()}"

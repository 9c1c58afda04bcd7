"""Where perfcast keeps its own state (MLflow store, caches) and finds the shared datasets."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def state_dir() -> Path:
    """perfcast's writable data directory: `$PERFCAST_HOME`, else `var/` in the project."""
    path = Path(os.environ.get("PERFCAST_HOME", PROJECT_ROOT / "var"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def download_cache_dir() -> Path:
    """Where files downloaded from their source repositories are kept."""
    path = state_dir() / "downloads"
    path.mkdir(parents=True, exist_ok=True)
    return path

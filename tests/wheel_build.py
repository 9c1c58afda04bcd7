"""The perfcast wheel and clean virtual environments for the packaging tests.

`built_wheel()` builds the wheel once per test session (each of three test files used to build
the same wheel again, ~9 s each) into a folder of its own. `clean_venv()` makes a virtual
environment without pip (`python -m venv` spends ~15 s installing pip into each one) and
`pip_install()` installs into it with this environment's pip (`pip --python`): the same
installer, the same installed files."""

from __future__ import annotations

import atexit
import fcntl
import functools
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], check=True, capture_output=True, text=True, **kwargs
    )


@functools.cache
def built_wheel() -> Path:
    """perfcast's wheel, built from this checkout once per session (a process: a pytest-xdist
    worker builds its own); read it, do not change it."""
    folder = Path(tempfile.mkdtemp(prefix="perfcast-wheel-"))
    atexit.register(shutil.rmtree, folder, True)
    # the build writes build/ and perfcast.egg-info/ in the checkout: one build at a time
    key = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    with open(Path(tempfile.gettempdir(), f"perfcast-wheel-{key}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
             "-q", "-w", folder, ROOT)  # fmt: skip
    (wheel,) = folder.glob("perfcast-*.whl")
    return wheel


def clean_venv(path: Path) -> Path:
    """A new virtual environment at `path` with nothing installed (not even pip); its python."""
    _run(sys.executable, "-m", "venv", "--without-pip", path)
    return path / "bin" / "python"


def pip_install(python: Path, *args: object) -> None:
    """`pip install ARGS` into the environment of `python`, by this environment's pip."""
    _run(sys.executable, "-m", "pip", "--python", python, "install", "-q", *args)

"""Atomic file writes, the one way perfcast writes a file a reader may see half-written: the
content goes to a temporary file in the target's directory, is flushed to disk, and replaces the
target in one rename. A crash leaves the old file or the new one, never a mix. The new file gets
the mode a plain `open` would give it (the old file's, or 0666 less the umask), not the private
0600 of a temporary file; a secret asks for its mode."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Literal


def _umask() -> int:
    """The process's umask (Linux reads it without changing it; elsewhere set and restored)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _file_mode(path: Path) -> int:
    """The mode `path` has, or a new file's: 0666 less the umask."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


@contextmanager
def atomic_open(
    path: str | Path, mode: Literal["w", "wb"] = "wb", *, permissions: int | None = None
) -> Iterator[IO]:
    """Open a temporary file that replaces `path` when the block ends without an error (and is
    removed when it raises). The parent directory is created if needed. `permissions`: the
    file's mode (0o600 for a secret); by default the one a plain `open` would give."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _file_mode(path) if permissions is None else permissions)
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def atomic_write_text(path: str | Path, text: str, *, permissions: int | None = None) -> Path:
    """Write `text` to `path` atomically (`permissions` as atomic_open's)."""
    with atomic_open(path, "w", permissions=permissions) as fh:
        fh.write(text)
    return Path(path)

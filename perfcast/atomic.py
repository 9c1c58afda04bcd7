"""Atomic file writes, the one way perfcast writes a file a reader may see half-written: the
content goes to a temporary file in the target's directory, is flushed to disk, and replaces the
target in one rename. A crash leaves the old file or the new one, never a mix."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Literal


@contextmanager
def atomic_open(path: str | Path, mode: Literal["w", "wb"] = "wb") -> Iterator[IO]:
    """Open a temporary file that replaces `path` when the block ends without an error (and is
    removed when it raises). The parent directory is created if needed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
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


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write `text` to `path` atomically."""
    with atomic_open(path, "w") as fh:
        fh.write(text)
    return Path(path)

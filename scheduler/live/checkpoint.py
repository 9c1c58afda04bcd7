"""Atomic, verified checkpoints.

A checkpoint file is one line holding the sha256 of the payload, then the payload (a
`torch.save` of the state). It is written to a temporary file in the same directory, fsynced,
renamed over the final name and the directory fsynced, so a crash leaves either the old
checkpoint or the new one, never a torn file; `load_checkpoint` recomputes the digest and
refuses a file that does not match.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfcast.atomic import atomic_open
from perfcast.errors import PerfcastError

_MAGIC = b"perfcast-ckpt-v1 "


class CheckpointError(PerfcastError):
    """A checkpoint is missing, truncated or does not match its digest."""


@dataclass(frozen=True)
class CheckpointRef:
    path: str
    sha256: str
    iteration: int
    bytes: int


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> CheckpointRef:
    """Write `state` (must hold an int `iteration`) to `path` atomically."""
    import torch  # here: the job store and commands that only read it never load torch

    path = Path(path)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getbuffer()  # a view, not a copy of what may be gigabytes
    digest = hashlib.sha256(payload).hexdigest()
    with atomic_open(path) as fh:
        fh.write(_MAGIC + digest.encode() + b"\n")
        fh.write(payload)
    return CheckpointRef(str(path), digest, int(state["iteration"]), len(payload))


def checkpoint_path(checkpoint_dir: str | Path, job_id: str, iteration: int) -> Path:
    """Where job `job_id`'s checkpoint at `iteration` lives; names sort by iteration."""
    return Path(checkpoint_dir) / job_id / f"it{iteration:09d}.ckpt"


def latest_checkpoint(
    checkpoint_dir: str | Path,
    job_id: str,
    on_corrupt: Callable[[CheckpointError], None] | None = None,
) -> CheckpointRef | None:
    """The newest checkpoint of `job_id` that verifies, or None. A corrupt newer file is
    skipped (and given to `on_corrupt`), so recovery falls back to the one before it."""
    for path in sorted((Path(checkpoint_dir) / job_id).glob("it*.ckpt"), reverse=True):
        try:
            digest, payload = _read_verified(path)
        except CheckpointError as err:
            if on_corrupt:
                on_corrupt(err)
            continue
        return CheckpointRef(str(path), digest, int(path.stem[2:]), len(payload))
    return None


def _read_verified(path: Path) -> tuple[str, bytes]:
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise CheckpointError(f"checkpoint {path}: cannot read: {err}") from None
    header, _, payload = raw.partition(b"\n")
    if not header.startswith(_MAGIC):
        raise CheckpointError(f"checkpoint {path}: not a perfcast checkpoint")
    recorded = header[len(_MAGIC) :].decode(errors="replace")
    actual = hashlib.sha256(payload).hexdigest()
    if actual != recorded:
        raise CheckpointError(f"checkpoint {path}: sha256 {actual} != recorded {recorded}")
    return actual, payload


def load_checkpoint(
    path: str | Path, expected_sha256: str | None = None, map_location: str = "cpu"
) -> dict[str, Any]:
    """Read and verify a checkpoint; with `expected_sha256`, also check it is that one."""
    path = Path(path)
    actual, payload = _read_verified(path)
    if expected_sha256 and actual != expected_sha256:
        raise CheckpointError(
            f"checkpoint {path}: sha256 {actual} is not the expected {expected_sha256}"
        )
    import torch

    return torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)

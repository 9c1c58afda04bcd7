"""Find a public dataset file by its manifest path, verifying its sha256.

Order: `$PERFCAST_DATA_DIR/<path>`, then `../shared/datasets/<path>` beside the repository,
then the download cache, then a download of `source_path` at `source_commit` from the source
repository. A file whose sha256 differs from the manifest is an error, never used.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from perfcast.atomic import atomic_open
from perfcast.errors import ChecksumError, DataNotFoundError
from perfcast.paths import PROJECT_ROOT, download_cache_dir

MANIFEST = Path(__file__).with_name("manifest.csv")


@dataclass(frozen=True)
class ManifestEntry:
    path: str
    source_repo: str
    source_commit: str
    source_path: str
    bytes: int
    sha256: str
    license: str

    @property
    def url(self) -> str:
        return f"https://github.com/{self.source_repo}/raw/{self.source_commit}/{self.source_path}"


@functools.cache
def manifest() -> dict[str, ManifestEntry]:
    with MANIFEST.open(newline="") as fh:
        return {
            row["path"]: ManifestEntry(**{**row, "bytes": int(row["bytes"])})
            for row in csv.DictReader(fh)
        }


def entries(prefix: str) -> list[ManifestEntry]:
    """Manifest entries whose path starts with `prefix`, sorted by path."""
    return sorted((e for p, e in manifest().items() if p.startswith(prefix)), key=lambda e: e.path)


def search_roots() -> list[Path]:
    roots = []
    if env := os.environ.get("PERFCAST_DATA_DIR"):
        roots.append(Path(env))
    roots.append(PROJECT_ROOT.parent / "shared" / "datasets")
    roots.append(download_cache_dir())
    return roots


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@functools.cache
def _verified(path: Path, expected: str) -> Path:
    actual = sha256_of(path)
    if actual != expected:
        raise ChecksumError(
            f"{path}: sha256 {actual} does not match the manifest's {expected}; "
            "the file was changed or corrupted, refusing to use it"
        )
    return path


def fetch(path: str, *, download: bool = True) -> Path:
    """Return a verified local copy of the manifest file `path`."""
    entry = manifest().get(path)
    if entry is None:
        raise DataNotFoundError(f"{path!r} is not in the dataset manifest ({MANIFEST})")
    for root in search_roots():
        candidate = root / path
        if candidate.is_file():
            return _verified(candidate, entry.sha256)
    if not download:
        raise DataNotFoundError(f"{path} not found under {', '.join(map(str, search_roots()))}")
    return _download(entry)


def _download(entry: ManifestEntry) -> Path:
    target = download_cache_dir() / entry.path
    digest = hashlib.sha256()
    try:
        # the checksum is checked before the file takes its name: a bad download leaves nothing
        with atomic_open(target) as out:
            with urllib.request.urlopen(entry.url, timeout=60) as response:
                while chunk := response.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
            if digest.hexdigest() != entry.sha256:
                raise ChecksumError(
                    f"downloaded {entry.url}: sha256 {digest.hexdigest()} does not match the "
                    f"manifest's {entry.sha256}"
                )
    except OSError as err:
        raise DataNotFoundError(
            f"{entry.path} is not available locally (set PERFCAST_DATA_DIR) and downloading "
            f"{entry.url} failed: {err}"
        ) from None
    return target


def shared_data_available() -> bool:
    """True when the public files can be read without a download (used by tests to skip)."""
    return any((root / "gavel").is_dir() for root in search_roots()[:2])

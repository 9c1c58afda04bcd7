"""A download is kept only when its sha256 matches the manifest, and never half-written."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from perfcast.datasets import fetch as fetch_module
from perfcast.errors import ChecksumError


class _LocalEntry(fetch_module.ManifestEntry):
    """A manifest entry whose source is a local file (urllib reads file:// URLs)."""

    @property
    def url(self) -> str:
        return Path(self.source_path).as_uri()


def _entry(source: Path, sha256: str, path: str) -> _LocalEntry:
    data = source.read_bytes()
    return _LocalEntry(path, "owner/repo", "0" * 12, str(source), len(data), sha256,
                       "MIT")  # fmt: skip


def test_download_with_the_manifest_checksum_lands(tmp_path: Path) -> None:
    source = tmp_path / "source.csv"
    source.write_bytes(b"a,b\n1,2\n" * 1000)
    target = fetch_module._download(
        _entry(source, hashlib.sha256(source.read_bytes()).hexdigest(), "good/table.csv")
    )
    assert target.read_bytes() == source.read_bytes()


def test_download_with_another_checksum_leaves_nothing(tmp_path: Path) -> None:
    source = tmp_path / "source.csv"
    source.write_bytes(b"a,b\n1,2\n")
    with pytest.raises(ChecksumError, match="does not match the manifest"):
        fetch_module._download(_entry(source, "f" * 64, "bad/table.csv"))
    folder = fetch_module.download_cache_dir() / "bad"
    assert not folder.exists() or not any(folder.iterdir())  # no file, no temporary left

"""Find a public dataset file by its manifest path, verifying its sha256.

One code path for every file: look for it under `$PERFCAST_DATA_DIR` (else `../shared/datasets`
beside the repository) and in the download cache; else download it from its source repository
at the pinned commit. A DERIVED manifest row (a member of an archive, `.npy` arrays turned into a
CSV table or a JSON record) has a recipe in `derived.csv` naming its original files with their
sha256: those are found or downloaded the same way, checked, converted, and the result is checked
against the manifest's sha256 before it takes its name in the cache. A file whose sha256 differs
from the manifest (or the recipe) is an error, never used.

Downloads resume: an interrupted one leaves `<file>.part`, and the next try asks the server for
the rest (an HTTP range). `PERFCAST_OFFLINE=1` turns downloads off; `PERFCAST_SOURCE_URL`
replaces `https://github.com` (a mirror: `<url>/<owner>/<repo>/raw/<commit>/<path>`).
"""

from __future__ import annotations

import csv
import functools
import hashlib
import http.client
import io
import json
import os
import re
import tarfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from perfcast.errors import ChecksumError, DataNotFoundError
from perfcast.paths import PROJECT_ROOT, download_cache_dir

MANIFEST = Path(__file__).with_name("manifest.csv")
DERIVED = Path(__file__).with_name("derived.csv")
DERIVED_MARK = " (DERIVED/converted)"
OFFLINE_ENV = "PERFCAST_OFFLINE"
SOURCE_URL_ENV = "PERFCAST_SOURCE_URL"
CHUNK = 1 << 16

Progress = Callable[[int], None]  # called with each chunk's size in bytes


def _no_progress(n: int) -> None:
    pass


def source_url(repo: str, commit: str, path: str) -> str:
    base = os.environ.get(SOURCE_URL_ENV, "https://github.com").rstrip("/")
    return f"{base}/{repo}/raw/{commit}/{path}"


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
    def derived(self) -> bool:
        return self.source_path.endswith(DERIVED_MARK)

    @property
    def url(self) -> str:
        if self.derived:
            raise ValueError(f"{self.path} is derived: it has no URL of its own, see derived.csv")
        return source_url(self.source_repo, self.source_commit, self.source_path)


@dataclass(frozen=True)
class Original:
    """One original file a derived row is made from (a row of derived.csv)."""

    recipe: str
    path: str  # in the source repository, at the derived row's commit
    bytes: int
    sha256: str


@functools.cache
def manifest() -> dict[str, ManifestEntry]:
    with MANIFEST.open(newline="") as fh:
        return {
            row["path"]: ManifestEntry(**{**row, "bytes": int(row["bytes"])})
            for row in csv.DictReader(fh)
        }


@functools.cache
def recipes() -> dict[str, list[Original]]:
    """Derived manifest path -> its original files, in the order the conversion reads them."""
    table: dict[str, list[Original]] = {}
    with DERIVED.open(newline="") as fh:
        for row in csv.DictReader(fh):
            table.setdefault(row["path"], []).append(
                Original(row["recipe"], row["original"], int(row["bytes"]), row["sha256"])
            )
    return table


def entries(prefix: str) -> list[ManifestEntry]:
    """Manifest entries whose path starts with `prefix`, sorted by path."""
    return sorted((e for p, e in manifest().items() if p.startswith(prefix)), key=lambda e: e.path)


def data_dir() -> Path:
    """Where the full public datasets are read from: `$PERFCAST_DATA_DIR`, else
    `../shared/datasets` beside the repository."""
    if env := os.environ.get("PERFCAST_DATA_DIR"):
        return Path(env)
    return PROJECT_ROOT.parent / "shared" / "datasets"


def search_roots() -> list[Path]:
    return [data_dir(), download_cache_dir()]


def offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "").strip().lower() not in ("", "0", "false", "no")


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


def find_local(path: str) -> Path | None:
    """The file's local copy (unverified), or None."""
    for root in search_roots():
        if (root / path).is_file():
            return root / path
    return None


def fetch(path: str, *, progress: Progress = _no_progress) -> Path:
    """Return a verified local copy of the manifest file `path`, downloading (and, for a derived
    row, converting) it into the cache when it is not found locally."""
    entry = manifest().get(path)
    if entry is None:
        raise DataNotFoundError(f"{path!r} is not in the dataset manifest ({MANIFEST})")
    if (local := find_local(path)) is not None:
        return _verified(local, entry.sha256)
    looked = ", ".join(map(str, search_roots()))
    if offline() and not _originals_cached(entry):
        raise DataNotFoundError(f"{path} was not found under {looked} (downloads are off)")
    target = download_cache_dir() / path
    try:
        if entry.derived:
            _rebuild(entry, target, progress)
        else:
            _download(entry.url, target, entry.sha256, progress)
    except (OSError, ValueError, http.client.HTTPException) as err:
        raise DataNotFoundError(
            f"{path} was not found under {looked}, and getting it from "
            f"{entry.source_repo}@{entry.source_commit} failed: {err}"
        ) from None
    return _verified(target, entry.sha256)


def _download(url: str, target: Path, sha256: str, progress: Progress = _no_progress) -> Path:
    """Download `url` to `target`, resuming `<target>.part` when an earlier try left one; the
    file takes its name only when its sha256 is `sha256` (a bad download leaves nothing)."""
    part = target.with_name(target.name + ".part")
    part.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.is_file() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = urllib.request.urlopen(request, timeout=60)
    except urllib.error.HTTPError as err:
        if err.code != 416 or not have:  # 416: the part already holds the whole file
            raise
        response = None
    if response is not None:
        with response, part.open("ab" if have and response.status == 206 else "wb") as out:
            if have and response.status == 206:
                progress(have)
            while chunk := response.read(CHUNK):
                out.write(chunk)
                progress(len(chunk))
            out.flush()
            os.fsync(out.fileno())
    actual = sha256_of(part)
    if actual != sha256:
        part.unlink()
        raise ChecksumError(
            f"downloaded {url}: sha256 {actual} does not match the manifest's {sha256}"
        )
    os.replace(part, target)
    return target


def _original_path(entry: ManifestEntry, original: Original) -> Path:
    return (
        download_cache_dir() / "originals" / entry.source_repo / entry.source_commit / original.path
    )


def _originals_cached(entry: ManifestEntry) -> bool:
    """A derived row whose originals are all in the cache is rebuilt without the network."""
    originals = recipes().get(entry.path, []) if entry.derived else []
    return bool(originals) and all(_original_path(entry, o).is_file() for o in originals)


def _original(entry: ManifestEntry, original: Original, progress: Progress) -> Path:
    """A verified copy of one original file of a derived row, from the cache or downloaded."""
    target = _original_path(entry, original)
    if not target.is_file():
        url = source_url(entry.source_repo, entry.source_commit, original.path)
        _download(url, target, original.sha256, progress)
    return _verified(target, original.sha256)


def _rebuild(entry: ManifestEntry, target: Path, progress: Progress) -> None:
    originals = recipes().get(entry.path)
    if not originals:
        raise DataNotFoundError(f"{entry.path} is derived but derived.csv has no recipe for it")
    kind = originals[0].recipe
    local = [(o, _original(entry, o, progress)) for o in originals]
    data = CONVERSIONS[kind](entry, local)
    actual = hashlib.sha256(data).hexdigest()
    if actual != entry.sha256:
        raise ChecksumError(
            f"{entry.path} rebuilt by {kind} from {len(local)} original file(s): sha256 {actual} "
            f"does not match the manifest's {entry.sha256}; nothing was written"
        )
    from perfcast.atomic import atomic_open

    with atomic_open(target) as out:
        out.write(data)


# --- conversions: (derived row, [(original, its verified local copy)]) -> the file's bytes ----


def _tar_member(entry: ManifestEntry, local: list[tuple[Original, Path]]) -> bytes:
    """`archive.tar.gz:member`: the member's bytes, unchanged."""
    member = entry.source_path.removesuffix(DERIVED_MARK).split(":", 1)[1]
    ((_, archive),) = local
    with tarfile.open(archive) as tar:
        handle = tar.extractfile(member)
        if handle is None:
            raise DataNotFoundError(f"{archive} has no regular file {member!r}")
        return handle.read()


_ITERATION_FILE = re.compile(r"(?P<task>.+)_arch_(?P<arch>.+)_gpu_(?P<gpus>\d+)")


def _npy_iteration_csv(entry: ManifestEntry, local: list[tuple[Original, Path]]) -> bytes:
    """Chronus's per-iteration time arrays (`<task>_arch_<arch>_gpu_<n>.npy`, one float64 per
    iteration, seconds) as one CSV table, a row per iteration, files in the recipe's order."""
    import numpy as np

    folder = PurePosixPath(entry.path).name.removesuffix("_iteration_times.csv")
    out = io.StringIO()
    out.write("dir,file,task,arch,num_gpu,iter_index,iter_time_s\n")
    for original, path in local:
        stem = PurePosixPath(original.path).stem
        match = _ITERATION_FILE.fullmatch(stem)
        if match is None:
            raise DataNotFoundError(f"{original.path}: not a <task>_arch_<arch>_gpu_<n>.npy name")
        prefix = f"{folder},{stem},{match['task']},{match['arch']},{match['gpus']}"
        for i, value in enumerate(np.load(path, allow_pickle=False).ravel().tolist()):
            out.write(f"{prefix},{i},{value!r}\n")
    return out.getvalue().encode()


def _plain(value: object) -> object:
    """numpy values, arrays and dicts with integer keys as JSON's types."""
    import numpy as np

    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value


def _decima_query_json(entry: ManifestEntry, local: list[tuple[Original, Path]]) -> bytes:
    """Decima's three arrays of one query at one scale (`adj_mat_<q>.npy`, `task_duration_<q>.npy`
    and `stage_id_to_node_idx_map_<q>.npy`, the last two pickled dicts) as one compact JSON
    record. The pickles are loaded only after their sha256 matched the recipe."""
    import numpy as np

    path = PurePosixPath(entry.path)
    arrays = {}
    for original, file in local:
        name = PurePosixPath(original.path).stem.rsplit("_", 1)[0]
        loaded = np.load(file, allow_pickle=True)
        arrays[name] = loaded.item() if loaded.dtype == object and loaded.shape == () else loaded
    record = {
        "source": f"{entry.source_repo} {PurePosixPath(local[0][0].path).parent.parent}",
        "scale": path.parent.name,
        "query": int(path.stem.removeprefix("query_")),
        **{key: _plain(arrays[key]) for key in DECIMA_ARRAYS},
    }
    return json.dumps(record, separators=(",", ":")).encode()


DECIMA_ARRAYS = ("adj_mat", "task_duration", "stage_id_to_node_idx_map")

CONVERSIONS: dict[str, Callable[[ManifestEntry, list[tuple[Original, Path]]], bytes]] = {
    "tar-member": _tar_member,
    "npy-iteration-csv": _npy_iteration_csv,
    "decima-query-json": _decima_query_json,
}


def shared_data_available() -> bool:
    """True when the full public files can be read without a download (tests skip without)."""
    return (data_dir() / "gavel").is_dir()

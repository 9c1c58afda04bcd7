"""Getting a public file: a download is kept only when its sha256 matches the manifest, never
half-written, and resumes; each kind of derived row (an archive member, `.npy` arrays as a CSV
table, `.npy` arrays as a per-query JSON record) is rebuilt from its originals through the same
fetch code a user's download takes, from stand-ins made here and served on loopback; a missing
dataset is a clear error (exit 2) naming the command that gets it."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from conftest import requires_data

from perfcast.datasets import fetch as fetch_module
from perfcast.errors import ChecksumError, DataNotFoundError

REPO, COMMIT = "owner/repo", "0123456789ab"
MARK = fetch_module.DERIVED_MARK


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Source:
    """Source repositories on 127.0.0.1, `<url>/<owner>/<repo>/raw/<commit>/<path>`, answering
    ranges; `files` maps a path in `REPO` at `COMMIT` (or a whole URL path) to its bytes."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.requests: list[tuple[str, str | None]] = []
        source = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.removeprefix(f"/{REPO}/raw/{COMMIT}/")
                source.requests.append((path, self.headers.get("Range")))
                data = source.files.get(path)
                if data is None:
                    self.send_error(404)
                    return
                start = 0
                if rng := self.headers.get("Range"):
                    start = int(rng.removeprefix("bytes=").removesuffix("-"))
                    if start >= len(data):
                        self.send_error(416)
                        return
                self.send_response(206 if start else 200)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                self.wfile.write(data[start:])

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Source]:
    """An empty data folder and cache, downloads from a local source, and a manifest and recipe
    table of the test's own (written by `_publish`)."""
    served = _Source()
    monkeypatch.setenv("PERFCAST_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PERFCAST_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv(fetch_module.SOURCE_URL_ENV, served.url)
    monkeypatch.delenv(fetch_module.OFFLINE_ENV, raising=False)
    monkeypatch.setattr(fetch_module, "MANIFEST", tmp_path / "manifest.csv")
    monkeypatch.setattr(fetch_module, "DERIVED", tmp_path / "derived.csv")
    _clear()
    _publish(tmp_path, [], [])
    yield served
    served.server.shutdown()
    _clear()


def _clear() -> None:
    fetch_module.manifest.cache_clear()
    fetch_module.recipes.cache_clear()
    fetch_module._verified.cache_clear()


def _publish(tmp_path: Path, rows: list[dict], originals: list[dict]) -> None:
    with (tmp_path / "manifest.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, ["path", "source_repo", "source_commit", "source_path",
                                     "bytes", "sha256", "license"])  # fmt: skip
        writer.writeheader()
        for row in rows:
            writer.writerow({"source_repo": REPO, "source_commit": COMMIT, "license": "MIT", **row})
    with (tmp_path / "derived.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, ["path", "recipe", "original", "bytes", "sha256"])
        writer.writeheader()
        writer.writerows(originals)
    _clear()


def _row(path: str, source_path: str, data: bytes) -> dict:
    return {"path": path, "source_path": source_path, "bytes": len(data), "sha256": _sha(data)}


def _original(path: str, recipe: str, original: str, data: bytes) -> dict:
    return {"path": path, "recipe": recipe, "original": original, "bytes": len(data),
            "sha256": _sha(data)}  # fmt: skip


def _npy(value: object) -> bytes:
    out = io.BytesIO()
    np.save(out, value, allow_pickle=True)
    return out.getvalue()


def test_download_with_the_manifest_checksum_lands(source: _Source, tmp_path: Path) -> None:
    data = b"a,b\n1,2\n" * 1000
    source.files["src/table.csv"] = data
    _publish(tmp_path, [_row("good/table.csv", "src/table.csv", data)], [])
    assert fetch_module.fetch("good/table.csv").read_bytes() == data


def test_download_with_another_checksum_leaves_nothing(source: _Source, tmp_path: Path) -> None:
    source.files["src/table.csv"] = b"a,b\n1,2\n"
    _publish(tmp_path, [_row("bad/table.csv", "src/table.csv", b"a,b\n1,3\n")], [])
    with pytest.raises(ChecksumError, match="does not match the manifest"):
        fetch_module.fetch("bad/table.csv")
    folder = fetch_module.download_cache_dir() / "bad"
    assert not any(folder.iterdir())  # no file, no part, no temporary left


def test_an_interrupted_download_resumes_from_its_part(source: _Source, tmp_path: Path) -> None:
    data = bytes(range(256)) * 400
    source.files["src/big.bin"] = data
    _publish(tmp_path, [_row("big.bin", "src/big.bin", data)], [])
    part = fetch_module.download_cache_dir() / "big.bin.part"
    part.write_bytes(data[:30000])  # what a dropped connection left
    seen = []
    assert fetch_module.fetch("big.bin", progress=seen.append).read_bytes() == data
    assert source.requests == [("src/big.bin", "bytes=30000-")]
    assert sum(seen) == len(data) and not part.exists()


def test_an_archive_member_is_rebuilt_from_its_archive(
    source: _Source, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    members = {"cluster01.csv": b"job_id,duration\nj1,2429\n", "cluster02.csv": b"job_id\nj2\n"}
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    source.files["data/raw.tar.gz"] = archive.getvalue()
    rows = [_row(f"ef/{n}", f"data/raw.tar.gz:{n}{MARK}", d) for n, d in members.items()]
    recipe = [
        _original(f"ef/{n}", "tar-member", "data/raw.tar.gz", archive.getvalue()) for n in members
    ]
    _publish(tmp_path, rows, recipe)
    assert fetch_module.fetch("ef/cluster01.csv").read_bytes() == members["cluster01.csv"]
    # the archive was downloaded once and kept with the originals: the next member is rebuilt
    # from it with downloads off
    monkeypatch.setenv(fetch_module.OFFLINE_ENV, "1")
    assert fetch_module.fetch("ef/cluster02.csv").read_bytes() == members["cluster02.csv"]
    assert [p for p, _ in source.requests] == ["data/raw.tar.gz"]


def test_npy_arrays_are_rebuilt_as_one_csv_table(source: _Source, tmp_path: Path) -> None:
    arrays = {"a3c_arch_a3c_gpu_1.npy": [0.5, 0.25], "gan_arch_Transformer_gpu_16.npy": [0.1]}
    originals = {f"code/stats-2/{n}": _npy(np.asarray(v, dtype=np.float64))
                 for n, v in arrays.items()}  # fmt: skip
    source.files.update(originals)
    expected = (
        b"dir,file,task,arch,num_gpu,iter_index,iter_time_s\n"
        b"stats-2,a3c_arch_a3c_gpu_1,a3c,a3c,1,0,0.5\n"
        b"stats-2,a3c_arch_a3c_gpu_1,a3c,a3c,1,1,0.25\n"
        b"stats-2,gan_arch_Transformer_gpu_16,gan,Transformer,16,0,0.1\n"
    )
    path = "chronus/stats-2_iteration_times.csv"
    _publish(
        tmp_path,
        [_row(path, f"code/stats-2/*.npy{MARK}", expected)],
        [_original(path, "npy-iteration-csv", p, d) for p, d in originals.items()],
    )
    local = fetch_module.fetch(path)
    assert local.read_bytes() == expected
    assert local == fetch_module.download_cache_dir() / path


def test_npy_arrays_are_rebuilt_as_a_per_query_json(source: _Source, tmp_path: Path) -> None:
    durations = {0: {"first_wave": {2: [4371, 4368]}, "rest_wave": {2: [25]}},
                 1: {"first_wave": {2: [7]}, "rest_wave": {2: []}}}  # fmt: skip
    stand_ins = {
        "adj_mat": np.asarray([[0.0, 1.0], [0.0, 0.0]]),
        "task_duration": durations,
        "stage_id_to_node_idx_map": {0: 0, 3: 1},
    }
    originals = {f"spark_env/tpch/2g/{k}_7.npy": _npy(v) for k, v in stand_ins.items()}
    source.files.update(originals)
    expected = (
        b'{"source":"owner/repo spark_env/tpch","scale":"2g","query":7,'
        b'"adj_mat":[[0.0,1.0],[0.0,0.0]],"task_duration":{"0":{"first_wave":{"2":[4371,4368]},'
        b'"rest_wave":{"2":[25]}},"1":{"first_wave":{"2":[7]},"rest_wave":{"2":[]}}},'
        b'"stage_id_to_node_idx_map":{"0":0,"3":1}}'
    )
    path = "decima/spark_env/tpch/2g/query_7.json"
    source_path = "spark_env/tpch/2g/{adj_mat,task_duration,stage_id_to_node_idx_map}_7.npy"
    _publish(
        tmp_path,
        [_row(path, source_path + MARK, expected)],
        [_original(path, "decima-query-json", p, d) for p, d in originals.items()],
    )
    assert fetch_module.fetch(path).read_bytes() == expected


def test_a_changed_original_or_result_is_refused(source: _Source, tmp_path: Path) -> None:
    member = b"job_id\nj1\n"
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        info = tarfile.TarInfo("c.csv")
        info.size = len(member)
        tar.addfile(info, io.BytesIO(member))
    source.files["raw.tar.gz"] = archive.getvalue()
    recipe = [_original("c.csv", "tar-member", "raw.tar.gz", archive.getvalue() + b"x")]
    _publish(tmp_path, [_row("c.csv", f"raw.tar.gz:c.csv{MARK}", member)], recipe)
    with pytest.raises(ChecksumError, match="does not match"):
        fetch_module.fetch("c.csv")  # the original is not the one the recipe pins
    recipe = [_original("c.csv", "tar-member", "raw.tar.gz", archive.getvalue())]
    _publish(tmp_path, [_row("c.csv", f"raw.tar.gz:c.csv{MARK}", member + b"x")], recipe)
    with pytest.raises(ChecksumError, match="rebuilt by tar-member"):
        fetch_module.fetch("c.csv")  # the conversion does not give the manifest's file
    assert not (fetch_module.download_cache_dir() / "c.csv").exists()


def test_a_derived_row_never_becomes_a_url(
    source: _Source, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row that crashed with http.client.InvalidURL: an unreachable source is a clear
    DataNotFoundError, and downloads off say so without trying."""
    path = "decima/spark_env/tpch/2g/query_1.json"
    source_path = f"spark_env/tpch/2g/{{adj_mat,task_duration}}_1.npy{MARK}"
    original = _original(path, "decima-query-json", "spark_env/tpch/2g/adj_mat_1.npy", b"")
    _publish(tmp_path, [_row(path, source_path, b"{}")], [original])
    with pytest.raises(DataNotFoundError, match="HTTP Error 404"):
        fetch_module.fetch(path)
    monkeypatch.setenv(fetch_module.OFFLINE_ENV, "1")
    requests = len(source.requests)
    with pytest.raises(DataNotFoundError, match="downloads are off") as err:
        fetch_module.fetch(path)
    assert str(fetch_module.data_dir()) in str(err.value) and len(source.requests) == requests


def test_every_derived_manifest_row_has_a_recipe() -> None:
    derived = {p for p, e in fetch_module.manifest().items() if e.derived}
    recipes = fetch_module.recipes()
    assert derived == set(recipes)
    assert {o.recipe for os_ in recipes.values() for o in os_} == set(fetch_module.CONVERSIONS)
    assert all(len({o.recipe for o in os_}) == 1 for os_ in recipes.values())


def test_a_missing_dataset_names_the_command_that_gets_it(tmp_path: Path) -> None:
    env = {**os.environ, "PERFCAST_HOME": str(tmp_path / "home"),
           "PERFCAST_DATA_DIR": str(tmp_path / "empty"), fetch_module.OFFLINE_ENV: "1"}  # fmt: skip
    shown = subprocess.run(
        [sys.executable, "-m", "perfcast.cli", "datasets", "show", "decima-tpch-stages"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert shown.returncode == 2, shown.stderr
    message = " ".join(shown.stderr.split())  # rich may fold the line
    assert "perfcast datasets fetch decima-tpch-stages" in message
    assert "dataset decima-tpch-stages is not available" in message
    assert str(tmp_path / "empty") in message and "Traceback" not in shown.stderr


@requires_data
def test_fetch_command_downloads_once_and_list_sees_it(tmp_path: Path) -> None:
    """`perfcast datasets fetch` with no data folder, from a mirror on loopback serving the
    shared folder's real files at their source paths: downloaded and checked once, verified
    the second time, and `datasets list` moves the dataset from fetchable to present."""
    served = _Source()
    shared = fetch_module.data_dir()
    for entry in fetch_module.entries("gavel/"):
        url_path = f"/{entry.source_repo}/raw/{entry.source_commit}/{entry.source_path}"
        served.files[url_path] = (shared / entry.path).read_bytes()
    env = {**os.environ, "PERFCAST_HOME": str(tmp_path / "home"),
           "PERFCAST_DATA_DIR": str(tmp_path / "empty"),
           fetch_module.SOURCE_URL_ENV: served.url}  # fmt: skip
    env.pop(fetch_module.OFFLINE_ENV, None)

    def perfcast(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "perfcast.cli", *args], env=env,
                              capture_output=True, text=True, check=True)  # fmt: skip
        return " ".join(done.stdout.split())

    def status() -> str:
        listed = json.loads(perfcast("datasets", "list", "--json"))
        return next(d["status"] for d in listed if d["name"] == "gavel-physical-scaling")

    try:
        assert status() == "fetchable"
        assert "1 files ready (1 fetched, 0 already here" in perfcast(
            "datasets", "fetch", "gavel-physical-scaling"
        )
        assert status() == "present"
        assert "(0 fetched, 1 already here" in perfcast(
            "datasets", "fetch", "gavel-physical-scaling"
        )
        assert len(served.requests) == 1
    finally:
        served.server.shutdown()

"""The starter set: the contract tables every task's default model trains on, embedded in the
package (`datasets/embedded/<name>.parquet`, zstd) so that `perfcast serve` trains every task on
a machine with no data folder and no network.

Only tables whose every source file carries a licence that allows redistribution (MIT,
Apache-2.0) are embedded; a source with no stated licence (Sia, Decima) is never shipped, and a
default that names one trains without it and says so (training.trainer.default_data). The
measured-* tables are ours and ship as they are (datasets/measured/).

`datasets/embedded/SOURCES.json` records, per table, its licence, source repository and commit,
the manifest files it was made from, the loader's cache key (a table whose loader or files
changed is not used, see registry.embedded_table), its rows, size and sha256.

Rebuild (needs the full public datasets: `$PERFCAST_DATA_DIR` or ../shared/datasets):
`python -m perfcast.datasets.starter build`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os

from perfcast.atomic import atomic_open, atomic_write_text
from perfcast.datasets.fetch import manifest
from perfcast.datasets.registry import EMBEDDED_DIR, EMBEDDED_INDEX, Dataset, get, load
from perfcast.errors import PerfcastError

# the public tables of training.trainer.DEFAULT_DATA (tests check the two agree)
STARTER = (
    "pollux-scaling",
    "gavel-scaling",
    "muri-scaling",
    "gavel-interference",
    "neusight-graphs",
    "pollux-philly",
)
REDISTRIBUTABLE = frozenset({"MIT", "Apache-2.0"})
LICENSES_DIR = EMBEDDED_DIR / "licenses"


def licence_file(repo: str) -> str:
    """The source repository's LICENSE, shipped beside its tables (MIT and Apache-2.0 both ask
    for a copy with the data)."""
    name = f"{repo.replace('/', '+')}.LICENSE.txt"
    if not (LICENSES_DIR / name).is_file():
        raise PerfcastError(f"{repo}'s LICENSE is not in {LICENSES_DIR}: copy it there first")
    return f"licenses/{name}"


def licences(spec: Dataset) -> set[str]:
    """The licences of the dataset's manifest files (ours for a measured one)."""
    if spec.measured:
        return {spec.license}
    table = manifest()
    return {table[path].license for path in spec.files}


def shippable(spec: Dataset) -> bool:
    return licences(spec) <= REDISTRIBUTABLE


def build(names: tuple[str, ...] = STARTER) -> dict[str, dict]:
    """Write each table's embedded parquet and the index; returns the index."""
    index = {}
    table = manifest()
    for name in names:
        spec = get(name)
        if not shippable(spec):
            raise PerfcastError(
                f"{name} is not redistributable (licences {sorted(licences(spec))}); only "
                f"{sorted(REDISTRIBUTABLE)} sources are embedded"
            )
        if not spec.present():
            raise PerfcastError(f"{name}: the full public files are needed to build its table")
        df = load(name, use_cache=False)
        path = EMBEDDED_DIR / f"{name}.parquet"
        with atomic_open(path) as fh:
            df.to_parquet(fh, index=False, compression="zstd", compression_level=19)
        os.chmod(path, 0o644)  # package data: readable by every user of an installed wheel
        sources = sorted({(table[f].source_repo, table[f].source_commit) for f in spec.files})
        index[name] = {
            "kind": spec.kind,
            "license": "/".join(sorted(licences(spec))),
            "source": spec.source,
            "repositories": [
                {"repo": repo, "commit": commit, "license_file": licence_file(repo)}
                for repo, commit in sources
            ],
            "files": len(spec.files),
            "cache_key": spec.cache_key(),
            "rows": len(df),
            "bytes": path.stat().st_size,
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        }
    atomic_write_text(EMBEDDED_INDEX, json.dumps(index, indent=1) + "\n")
    os.chmod(EMBEDDED_INDEX, 0o644)
    return index


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m perfcast.datasets.starter")
    parser.add_argument("command", choices=["build"])
    parser.parse_args(argv)
    index = build()
    for name, info in index.items():
        print(f"{name}: {info['rows']:,} rows, {info['bytes']:,} bytes ({info['license']})")
    print(f"total {sum(i['bytes'] for i in index.values()):,} bytes in {EMBEDDED_DIR}")


if __name__ == "__main__":
    main()

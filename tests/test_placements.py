"""Pollux/Sia placement strings: one parser, real files, and a clear refusal of a bad one."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import requires_data

from perfcast.datasets.placements import read_placements
from perfcast.errors import PerfcastError


@requires_data
def test_pollux_placements_count_nodes_and_gpus() -> None:
    table = read_placements("pollux/traces/cifar10/placements.csv")
    assert (table["num_nodes"] == table["placement"].str.len()).all()
    four = table[table["placement"] == "22"]
    assert len(four) and (four["num_replicas"] == 4).all() and (four["num_nodes"] == 2).all()
    assert table["num_replicas"].between(1, 16).all()  # 4 T4s per node, at most 4 nodes


def test_a_placement_that_is_not_digits_is_refused_with_file_and_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "demo"
    folder.mkdir()
    (folder / "placements.csv").write_text("placement,step_time\n21,0.5\n2x,0.7\n")
    monkeypatch.setattr("perfcast.datasets.fetch.fetch", lambda path: tmp_path / path)
    with pytest.raises(PerfcastError, match=r"demo/placements.csv: row 3: .*'2x'"):
        read_placements("demo/placements.csv")

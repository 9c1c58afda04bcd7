"""The scaling datasets the served model and the leave-one-cluster-out benchmark train on:
every row names the cluster it was measured on, and that cluster's links are known."""

from __future__ import annotations

import pytest
from conftest import requires_data

from perfcast import datasets
from perfcast.datasets.registry import registry
from perfcast.features.devices import INTERCONNECTS
from perfcast.training.trainer import DEFAULT_DATA

SCALING_DATA = DEFAULT_DATA["scaling"].split(",")


def test_the_served_scaling_model_trains_on_every_clusters_scaling_data() -> None:
    scaling = {name for name, spec in registry().items() if spec.kind == "scaling"}
    clusters = {"pollux-scaling", "gavel-scaling", "muri-scaling", "sia-scaling"}
    assert clusters <= set(SCALING_DATA) <= scaling


@requires_data
@pytest.mark.parametrize("name", SCALING_DATA)
def test_each_row_names_a_cluster_whose_links_are_known(name: str) -> None:
    rows = datasets.load(name)
    assert rows["cluster"].notna().all(), f"{name}: rows without a cluster"
    pairs = set(zip(rows["gpu_type"], rows["cluster"], strict=True))
    assert all(pair in INTERCONNECTS for pair in pairs), f"{name}: {pairs}"

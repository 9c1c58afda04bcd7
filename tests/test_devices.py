"""The datasheet table's names: what nvidia-smi, NeuSight's folders and the traces write must
land on the right GPU, and a longer name must never be read as its prefix (an L40 as an L4)."""

from __future__ import annotations

import pandas as pd
import pytest

from perfcast.features.devices import DEVICES, INTERCONNECTS, canonical_device, spec_frame


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA_A100-SXM4-40GB", "a100"),
        ("NVIDIA_A100_80GB_PCIe", "a100-80gb"),
        ("NVIDIA_H100_80GB_HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA_L4", "l4"),
        ("NVIDIA L40", "l40"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA A10", "a10"),
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA A30", "a30"),
        ("Tesla_P4", "p4"),
        ("Tesla P40", "p40"),
        ("Tesla_T4", "t4"),
        ("Tesla_V100-PCIE-32GB", "v100"),
        ("TITAN V", "titan-v"),
        ("NVIDIA TITAN RTX", "titan-rtx"),
        ("Quadro RTX 6000", "rtx6000"),
        ("Quadro RTX 8000", "rtx8000"),
        ("NVIDIA RTX A6000", "a6000"),
        ("NVIDIA GeForce RTX 2080 Ti", "rtx2080ti"),
        ("NVIDIA GeForce RTX 3090", "rtx3090"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        ("AMD_Instinct_MI250", "mi250"),
    ],
)
def test_a_device_name_maps_to_its_datasheet(name: str, key: str) -> None:
    assert canonical_device(name) == key


def test_every_datasheet_key_names_itself_and_has_specs() -> None:
    for key in DEVICES:
        assert canonical_device(key) == key
    specs = spec_frame(pd.Series(list(DEVICES)))
    assert specs.notna().all().all()
    assert (specs > 0).all().all()


def test_every_nvidia_datasheet_key_has_default_links() -> None:
    """A multi-GPU row naming no cluster reads its GPU's usual server; only the AMD parts
    (no interconnect facts) fall back to perfect scaling and say so."""
    defaults = {gpu for gpu, cluster in INTERCONNECTS if cluster is None}
    assert set(DEVICES) - defaults == {"mi100", "mi210", "mi250"}


def test_an_unknown_name_stays_itself() -> None:
    assert canonical_device("Some-New-GPU") == "some-new-gpu"

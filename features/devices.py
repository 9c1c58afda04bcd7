"""Accelerator specifications: the physical features that let a model reason about a GPU it
has not been trained on (a faster GPU computes faster; a wider memory bus moves bytes faster).

Figures are the vendors' datasheet numbers for the named board (FP32 non-tensor peak, memory
bandwidth, memory, SM or CU count, L2 cache). Where a dataset ships its own device config
(NeuSight's `device_configs/*.json`), the dataset's numbers win over this table.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class DeviceSpec:
    peak_tflops_fp32: float
    mem_bw_gbps: float
    mem_gb: float
    num_sm: float
    l2_mb: float
    # FP32 peak of the matrix units where GEMMs run faster than on the vector units (AMD CDNA
    # matrix cores); None means GEMMs run at `peak_tflops_fp32` (NVIDIA FP32 without TF32)
    matrix_tflops_fp32: float | None = None


SPEC_COLUMNS = ("peak_tflops_fp32", "mem_bw_gbps", "mem_gb", "num_sm", "l2_mb")

# canonical name -> spec (datasheets; K80 is one of the board's two GK210 dies, as Gavel
# schedules one die as one GPU; MI250 likewise is one of its two dies, as PyTorch sees it)
DEVICES: dict[str, DeviceSpec] = {
    "k80": DeviceSpec(4.37, 240.0, 12.0, 13, 1.5),
    "p4": DeviceSpec(5.5, 192.0, 8.0, 20, 2.0),
    "p100": DeviceSpec(9.3, 732.0, 16.0, 56, 4.0),
    "t4": DeviceSpec(8.1, 320.0, 16.0, 40, 4.0),
    "v100": DeviceSpec(14.0, 900.0, 32.0, 80, 6.0),
    "rtx2080ti": DeviceSpec(13.4, 616.0, 11.0, 68, 5.5),
    "rtx6000": DeviceSpec(16.3, 672.0, 24.0, 72, 6.0),
    "a40": DeviceSpec(37.4, 696.0, 48.0, 84, 6.0),
    "l4": DeviceSpec(30.3, 300.0, 24.0, 58, 48.0),
    "a100": DeviceSpec(19.5, 1555.0, 40.0, 108, 40.0),
    "a100-80gb": DeviceSpec(19.5, 1935.0, 80.0, 108, 40.0),
    "h100": DeviceSpec(67.0, 3350.0, 80.0, 132, 50.0),
    # further datasheet entries, for GPUs the shipped datasets do not name
    "p40": DeviceSpec(11.8, 346.0, 24.0, 30, 3.0),
    "titan-v": DeviceSpec(14.9, 652.8, 12.0, 80, 4.5),
    "titan-rtx": DeviceSpec(16.3, 672.0, 24.0, 72, 6.0),
    "rtx8000": DeviceSpec(16.3, 672.0, 48.0, 72, 6.0),
    "rtx3090": DeviceSpec(35.6, 936.0, 24.0, 82, 6.0),
    "rtx4090": DeviceSpec(82.6, 1008.0, 24.0, 128, 72.0),
    "a6000": DeviceSpec(38.7, 768.0, 48.0, 84, 6.0),
    "a10": DeviceSpec(31.2, 600.0, 24.0, 72, 6.0),
    "a10g": DeviceSpec(35.0, 600.0, 24.0, 80, 6.0),
    "a30": DeviceSpec(10.3, 933.0, 24.0, 56, 24.0),
    "l40": DeviceSpec(90.5, 864.0, 48.0, 142, 96.0),
    "l40s": DeviceSpec(91.6, 864.0, 48.0, 142, 96.0),
    "h100-pcie": DeviceSpec(51.2, 2039.0, 80.0, 114, 50.0),
    "h200": DeviceSpec(67.0, 4800.0, 141.0, 132, 50.0),
    "mi100": DeviceSpec(23.1, 1228.8, 32.0, 120, 8.0, 46.1),
    "mi210": DeviceSpec(22.6, 1638.4, 64.0, 104, 8.0, 45.3),
    "mi250": DeviceSpec(22.6, 1638.4, 64.0, 104, 8.0, 45.3),
}

_PATTERNS: list[tuple[str, str]] = [  # first match wins: longer names before their prefixes
    (r"h200", "h200"),
    (r"h100.*pcie", "h100-pcie"),
    (r"h100", "h100"),
    (r"a100.*80", "a100-80gb"),
    (r"a100", "a100"),
    (r"mi100", "mi100"),
    (r"mi210", "mi210"),
    (r"mi250", "mi250"),
    (r"titan.?v\b", "titan-v"),
    (r"titan.?rtx", "titan-rtx"),
    (r"v100", "v100"),
    (r"p100", "p100"),
    (r"k80", "k80"),
    (r"\bt4\b|_t4$|^t4", "t4"),
    (r"\bp40\b|_p40$|^p40$", "p40"),
    (r"\bp4\b|_p4$|^p4$", "p4"),
    (r"a6000", "a6000"),
    (r"rtx.?6000", "rtx6000"),
    (r"rtx.?8000", "rtx8000"),
    (r"2080.?ti", "rtx2080ti"),
    (r"3090", "rtx3090"),
    (r"4090", "rtx4090"),
    (r"a10g", "a10g"),
    (r"a10(?![0-9])", "a10"),
    (r"a30(?![0-9])", "a30"),
    (r"a40(?![0-9])", "a40"),
    (r"l40s", "l40s"),
    (r"l40(?![0-9])", "l40"),
    (r"\bl4\b|_l4$|^l4$", "l4"),
]


@functools.lru_cache(maxsize=4096)
def canonical_device(name: str) -> str:
    """Map a device name as datasets write it (`Tesla_V100-PCIE-32GB`, `v100`) to a key of
    DEVICES, or return the lower-cased name when unknown."""
    text = str(name).lower()
    for pattern, key in _PATTERNS:
        if re.search(pattern, text):
            return key
    return text


def spec_frame(devices: pd.Series) -> pd.DataFrame:
    """Spec columns for each device name in `devices` (NaN where the device is unknown)."""
    codes, names = pd.factorize(devices.astype(str), use_na_sentinel=False)
    keys = np.array([canonical_device(name) for name in names.tolist()], dtype=object)[codes]
    out = _spec_table().reindex(keys)
    out.index = devices.index
    return out


@functools.cache
def _spec_table() -> pd.DataFrame:
    """The datasheet table, one row per DEVICES key (built once: it is read on every call)."""
    return pd.DataFrame(
        [[getattr(spec, c) for c in SPEC_COLUMNS] for spec in DEVICES.values()],
        index=list(DEVICES),
        columns=list(SPEC_COLUMNS),
    )


def fill_specs(df: pd.DataFrame, device_column: str) -> pd.DataFrame:
    """Return `df` with every spec column present, keeping the dataset's own values and
    filling gaps from the datasheet table."""
    specs = spec_frame(df[device_column])
    present = [c for c in SPEC_COLUMNS if c in df.columns]
    if present:  # the dataset's own values first, the datasheet where they are missing
        own = df[present].apply(pd.to_numeric, errors="coerce")
        specs[present] = own.fillna(specs[present])
    rest = df.drop(columns=present)
    return pd.concat([rest, specs], axis=1)


def at_least_as_fast(peak_tflops_fp32: np.ndarray, mem_bw_gbps: np.ndarray) -> np.ndarray:
    """[i, j]: device i is at least as fast as device j by datasheet (FP32 peak and memory
    bandwidth both no lower). The order the monotonicity guards of runtime and scaling use:
    a device so placed is not predicted slower without a measurement saying so."""
    flops = np.asarray(peak_tflops_fp32, dtype=float)
    bw = np.asarray(mem_bw_gbps, dtype=float)
    return (flops[:, None] >= flops[None, :]) & (bw[:, None] >= bw[None, :])


def matrix_speedup(devices: pd.Series) -> pd.Series:
    """How much faster than `peak_tflops_fp32` each device runs FP32 GEMMs (1.0 where the
    device has no faster matrix units or is unknown)."""
    names = devices.astype(str)
    ratio = {}
    for name in names.unique():
        spec = DEVICES.get(canonical_device(name))
        matrix = spec.matrix_tflops_fp32 if spec is not None else None
        ratio[name] = matrix / spec.peak_tflops_fp32 if matrix else 1.0
    return names.map(ratio).astype(float)


def ridge_point(peak_tflops: float, mem_bw_gbps: float) -> float:
    """FLOPs per byte where a kernel turns from memory-bound to compute-bound."""
    if not (peak_tflops > 0 and mem_bw_gbps > 0) or math.isnan(peak_tflops):
        return float("nan")
    return float(np.float64(peak_tflops) * 1e12 / (mem_bw_gbps * 1e9))


@dataclass(frozen=True)
class Interconnect:
    """How fast gradients move between a job's GPUs, in GB/s (gigabytes, as `mem_bw_gbps`):
    `intra_node_bw_gbps` one GPU's link to its node's other GPUs (one direction), and
    `inter_node_bw_gbps` one node's network (one direction). `basis` says where the figures
    come from; 'assumed' marks a figure the data's source does not state."""

    intra_node_bw_gbps: float
    inter_node_bw_gbps: float
    basis: str


INTERCONNECT_COLUMNS = ("intra_node_bw_gbps", "inter_node_bw_gbps")
_PCIE3 = 15.75  # PCIe gen3 x16, one direction
_PCIE4 = 31.5  # PCIe gen4 x16

# (gpu_type, cluster) -> links. `cluster` None is the GPU type's usual server, used for rows
# naming no cluster (or one not listed here). A row's own `intra_node_bw_gbps` /
# `inter_node_bw_gbps` values win over this table. A GPU type absent here has no facts: its
# multi-GPU predictions fall back to the one-GPU time and carry the flag `no_interconnect_facts`.
INTERCONNECTS: dict[tuple[str, str | None], Interconnect] = {
    ("t4", "pollux"): Interconnect(
        _PCIE3, 6.25, "Pollux testbed, AWS g4dn.12xlarge: 4 T4 on PCIe gen3, 50 Gbit/s network"
    ),
    ("k80", "gavel"): Interconnect(_PCIE3, 1.25, "assumed: PCIe gen3, 10 Gbit/s Ethernet"),
    ("p100", "gavel"): Interconnect(_PCIE3, 1.25, "assumed: PCIe gen3, 10 Gbit/s Ethernet"),
    ("v100", "gavel"): Interconnect(150.0, 3.125, "assumed: NVLink 2, 25 Gbit/s Ethernet"),
    ("v100", "muri"): Interconnect(
        150.0, 12.5, "Muri testbed, 8 V100 per node; assumed NVLink 2, 100 Gbit/s InfiniBand"
    ),
    ("rtx2080ti", "sia-rtx"): Interconnect(
        _PCIE3, 5.0, "Sia testbed, 8 RTX 2080 Ti per node; assumed PCIe gen3, 40 Gbit/s"
    ),
    ("rtx6000", "sia-quad"): Interconnect(
        _PCIE3, 5.0, "Sia testbed, one node of Quadro RTX 6000; assumed PCIe gen3"
    ),
    ("k80", None): Interconnect(_PCIE3, 1.25, "PCIe gen3 server, 10 Gbit/s Ethernet"),
    ("p4", None): Interconnect(_PCIE3, 1.25, "PCIe gen3 server, 10 Gbit/s Ethernet"),
    ("p100", None): Interconnect(_PCIE3, 3.125, "PCIe gen3 server, 25 Gbit/s Ethernet"),
    ("t4", None): Interconnect(_PCIE3, 6.25, "PCIe gen3 server, 50 Gbit/s network"),
    ("v100", None): Interconnect(150.0, 12.5, "DGX-1/SXM2: NVLink 2, 100 Gbit/s InfiniBand"),
    ("rtx2080ti", None): Interconnect(_PCIE3, 3.125, "PCIe gen3 server, 25 Gbit/s Ethernet"),
    ("rtx6000", None): Interconnect(_PCIE3, 3.125, "PCIe gen3 server, 25 Gbit/s Ethernet"),
    ("a40", None): Interconnect(_PCIE4, 12.5, "PCIe gen4 server, 100 Gbit/s network"),
    ("p40", None): Interconnect(_PCIE3, 1.25, "PCIe gen3 server, 10 Gbit/s Ethernet"),
    ("titan-v", None): Interconnect(_PCIE3, 1.25, "PCIe gen3 workstation, 10 Gbit/s Ethernet"),
    ("titan-rtx", None): Interconnect(_PCIE3, 1.25, "PCIe gen3 workstation, 10 Gbit/s Ethernet"),
    ("rtx8000", None): Interconnect(_PCIE3, 3.125, "PCIe gen3 server, 25 Gbit/s Ethernet"),
    ("rtx3090", None): Interconnect(_PCIE4, 3.125, "PCIe gen4 server, 25 Gbit/s Ethernet"),
    ("rtx4090", None): Interconnect(_PCIE4, 3.125, "PCIe gen4 server, 25 Gbit/s Ethernet"),
    ("a6000", None): Interconnect(_PCIE4, 12.5, "PCIe gen4 server, 100 Gbit/s network"),
    ("a10", None): Interconnect(_PCIE4, 6.25, "PCIe gen4 server, 50 Gbit/s network"),
    ("a10g", None): Interconnect(_PCIE4, 5.0, "AWS g5.12xlarge: PCIe gen4, 40 Gbit/s network"),
    ("a30", None): Interconnect(_PCIE4, 12.5, "PCIe gen4 server, 100 Gbit/s network"),
    ("l40", None): Interconnect(_PCIE4, 12.5, "PCIe gen4 server, 100 Gbit/s network"),
    ("l40s", None): Interconnect(_PCIE4, 12.5, "PCIe gen4 server, 100 Gbit/s network"),
    ("h100-pcie", None): Interconnect(63.0, 50.0, "PCIe gen5 server, 400 Gbit/s network"),
    ("h200", None): Interconnect(450.0, 400.0, "HGX H200: NVLink 4, 8 x 400 Gbit/s NDR"),
    ("l4", None): Interconnect(_PCIE4, 6.25, "PCIe gen4 server, 50 Gbit/s network"),
    ("a100", None): Interconnect(300.0, 200.0, "DGX A100: NVLink 3, 8 x 200 Gbit/s HDR"),
    ("a100-80gb", None): Interconnect(300.0, 200.0, "DGX A100: NVLink 3, 8 x 200 Gbit/s HDR"),
    ("h100", None): Interconnect(450.0, 400.0, "DGX H100: NVLink 4, 8 x 400 Gbit/s NDR"),
}


def interconnect_of(gpu_type: str, cluster: str | None) -> tuple[float, float]:
    """(intra_node_bw_gbps, inter_node_bw_gbps) of INTERCONNECTS at (gpu_type, cluster), else
    at (gpu_type, None); NaN where nothing is known."""
    name = canonical_device(gpu_type)
    found = INTERCONNECTS.get((name, cluster or None)) or INTERCONNECTS.get((name, None))
    return (found.intra_node_bw_gbps, found.inter_node_bw_gbps) if found else (np.nan, np.nan)


def interconnect_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """`intra_node_bw_gbps`, `inter_node_bw_gbps` for each row: the row's own values where
    given, else INTERCONNECTS at (gpu_type, cluster), else at (gpu_type, None); NaN where
    nothing is known."""
    clusters = rows["cluster"] if "cluster" in rows.columns else pd.Series("", index=rows.index)
    pairs = rows["gpu_type"].astype(str) + "\x00" + clusters.fillna("").astype(str)
    codes, distinct = pd.factorize(pairs)  # a batch of candidates has few distinct pairs
    facts = np.array([interconnect_of(*pair.split("\x00")) for pair in distinct], dtype=float)
    facts = facts.reshape(-1, len(INTERCONNECT_COLUMNS))
    out = pd.DataFrame(facts[codes], index=rows.index, columns=list(INTERCONNECT_COLUMNS))
    for column in INTERCONNECT_COLUMNS:
        if column in rows.columns:
            own = pd.to_numeric(rows[column], errors="coerce")
            out[column] = own.where(own > 0).fillna(out[column])
    return out

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
    "mi100": DeviceSpec(23.1, 1228.8, 32.0, 120, 8.0, 46.1),
    "mi210": DeviceSpec(22.6, 1638.4, 64.0, 104, 8.0, 45.3),
    "mi250": DeviceSpec(22.6, 1638.4, 64.0, 104, 8.0, 45.3),
}

_PATTERNS: list[tuple[str, str]] = [
    (r"h100", "h100"),
    (r"a100.*80", "a100-80gb"),
    (r"a100", "a100"),
    (r"mi100", "mi100"),
    (r"mi210", "mi210"),
    (r"mi250", "mi250"),
    (r"v100", "v100"),
    (r"p100", "p100"),
    (r"k80", "k80"),
    (r"\bt4\b|_t4$|^t4", "t4"),
    (r"\bp4\b|_p4$|^p4", "p4"),
    (r"rtx.?6000", "rtx6000"),
    (r"2080.?ti", "rtx2080ti"),
    (r"a40", "a40"),
    (r"\bl4\b|_l4$|^l4", "l4"),
]


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
    names = devices.astype(str)
    keys = names.map({name: canonical_device(name) for name in names.unique()})
    out = _spec_table().reindex(keys.to_numpy())
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

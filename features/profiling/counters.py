"""Hardware counters sampled while a job runs.

GPU counters come from NVML (nvidia-ml-py) in a background thread at `hz` samples a second;
without a CUDA device or NVML they are missing (NaN), never zero. CPU utilization of this
process is always recorded, from its CPU time over the wall time of the window.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from dataclasses import asdict, dataclass, field
from types import TracebackType

import psutil
import torch

NAN = math.nan

# the GPU fields of CounterSummary, one list of samples each
GPU_FIELDS = (
    "gpu_util", "mem_util", "gpu_mem_used_mb", "power_w", "sm_clock_mhz", "pcie_tx_mb_s",
    "pcie_rx_mb_s",
)  # fmt: skip


@dataclass
class CounterSummary:
    """Means over the window. GPU fields are NaN when no GPU was sampled."""

    cpu_util: float = NAN  # % of all logical CPUs used by this process
    gpu_util: float = NAN  # % of time a kernel ran (NVML utilization.gpu)
    mem_util: float = NAN  # % of time device memory was read or written (utilization.memory)
    gpu_mem_used_mb: float = NAN
    power_w: float = NAN
    sm_clock_mhz: float = NAN
    pcie_tx_mb_s: float = NAN
    pcie_rx_mb_s: float = NAN
    gpu_samples: int = 0
    gpu_sample_hz: float = NAN
    samples: dict[str, list[float]] = field(default_factory=dict, repr=False)

    def as_row(self) -> dict[str, float]:
        row = asdict(self)
        row.pop("samples")
        return row


def _nvml_handle(device: torch.device) -> object | None:
    """The NVML handle of a CUDA device (matched by UUID, so CUDA_VISIBLE_DEVICES is honoured),
    or None without CUDA or NVML."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        props = torch.cuda.get_device_properties(device)
        uuid = str(props.uuid)
        uuid = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        return pynvml.nvmlDeviceGetHandleByUUID(uuid)
    except Exception:  # NVML missing, driver too old, or a MIG slice: counters stay missing
        return None


def _nvml_shutdown() -> None:
    import pynvml

    with contextlib.suppress(Exception):
        pynvml.nvmlShutdown()  # balances the nvmlInit of _nvml_handle (NVML counts them)


def _read_gpu(handle: object) -> dict[str, float]:
    import pynvml

    sample: dict[str, float] = {}
    readers = {
        "gpu_util": lambda: pynvml.nvmlDeviceGetUtilizationRates(handle).gpu,
        "mem_util": lambda: pynvml.nvmlDeviceGetUtilizationRates(handle).memory,
        "gpu_mem_used_mb": lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20,
        "power_w": lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000,
        "sm_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "pcie_tx_mb_s": lambda: (
            pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES) / 1024
        ),
        "pcie_rx_mb_s": lambda: (
            pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_RX_BYTES) / 1024
        ),
    }
    for name, read in readers.items():
        try:
            sample[name] = float(read())
        except Exception:  # a counter this GPU does not expose stays missing
            sample[name] = NAN
    return sample


class CounterSampler:
    """Context manager: samples counters while the block runs; `.summary` afterwards."""

    def __init__(self, device: torch.device | str = "cpu", *, hz: float = 20.0) -> None:
        self.device = torch.device(device)
        self.interval = 1.0 / hz
        self.summary = CounterSummary()
        self._handle = _nvml_handle(self.device)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gpu: dict[str, list[float]] = {name: [] for name in GPU_FIELDS}

    @property
    def has_gpu_counters(self) -> bool:
        return self._handle is not None

    def __enter__(self) -> CounterSampler:
        self._cpu0 = self._cpu_seconds()
        self._t0 = time.perf_counter()
        if self._handle is not None:
            self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        wall = time.perf_counter() - self._t0
        cpu = self._cpu_seconds() - self._cpu0
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            _nvml_shutdown()
        s = self.summary
        s.cpu_util = 100.0 * cpu / (wall * (psutil.cpu_count() or 1)) if wall > 0 else NAN
        count = len(self._gpu["gpu_util"])
        if count:
            s.samples = self._gpu
            s.gpu_samples = count
            s.gpu_sample_hz = count / wall
            for name, values in self._gpu.items():
                finite = [v for v in values if not math.isnan(v)]
                setattr(s, name, sum(finite) / len(finite) if finite else NAN)

    def _cpu_seconds(self) -> float:
        # process_time is exact to the nanosecond; psutil's cpu_times ticks at 10 ms
        return time.process_time()

    def _run(self) -> None:
        next_at = time.perf_counter()
        while not self._stop.is_set():
            for name, value in _read_gpu(self._handle).items():
                self._gpu[name].append(value)
            next_at += self.interval
            self._stop.wait(max(0.0, next_at - time.perf_counter()))

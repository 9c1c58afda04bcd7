"""The throughput model of a data-parallel job: Pollux's form (OSDI'21, adaptdl's `goodput.py`),
with a GPU-type term, so that every answer obeys the physics of data parallelism by
construction, one row at a time.

    compute      T_c(b, g)   the job's one-GPU step on g, non-decreasing in b
    sync, 1 node S_1(n)      = alpha_1 + B_1 * r(n) / link_1 * (n / 2) ** k_1     n > 1, else 0
    across nodes S_x(n)      = max(S_1(n), alpha_x + B_x * r(n) / link_x * (n / 2) ** k_x)
    step         T           = (T_c ** gamma + S ** gamma) ** (1 / gamma)          gamma >= 1

b: local batch; g: GPU type; n: GPUs; r(n) = 2 (n - 1) / n, what a ring all-reduce moves per
gradient byte; link_1 the intra-node link, link_x the slower of it and the network (bytes/s);
B the job's effective gradient bytes (overlap with the backward pass and link efficiency folded
in); alpha the job's fixed seconds of a synchronizing step (latency, and what costs time on
several GPUs without moving bytes: a shared input pipeline's contention); k the growth of
synchronization with the GPU count beyond the ring's (latency terms and stragglers grow with
the GPUs a step waits for); gamma the overlap of compute and synchronization (1: none,
large: all). B and alpha are each job's (per cluster and spread), gamma and k every job's.

What follows for every row, with no guard and no other row involved:
- T(n GPUs) >= T(1 GPU) = T_c: never super-linear (S >= 0);
- T is non-decreasing in n, in spreading over nodes (S_x >= S_1) and in slower links;
- T is non-decreasing in the local batch (so is T_c);
- a GPU whose compute parameters are no larger is never slower at the same links
  (`predictor.scaling` orders the parameters by datasheet).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse

PCIE3_GBPS = 15.75  # the slowest links a row is assumed to have when nothing is known
ETHERNET_10G_GBPS = 1.25


@dataclass(frozen=True)
class SyncLaw:
    """The parameters every job shares: overlap `gamma` and, per spread (0: one node, 1:
    across nodes), the growth of synchronization with the GPU count."""

    gamma: float = 1.0
    growth: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self) -> None:
        if not self.gamma >= 1.0 or min(self.growth) < 0:
            raise ValueError(f"a sync law needs gamma >= 1 and non-negative growth: {self}")

    def seconds_per_byte(self, gpus: np.ndarray, link_gbps: np.ndarray, spread: int) -> np.ndarray:
        """Seconds per effective gradient byte of a ring over `link_gbps` (GB/s), grown with
        the GPU count; 0 on one GPU."""
        return _per_gpu_count(gpus, self.growth[spread]) / (np.asarray(link_gbps, float) * 1e9)

    def sync_seconds(
        self,
        gpus: np.ndarray,
        nodes: np.ndarray,
        intra_gbps: np.ndarray,
        inter_gbps: np.ndarray,
        one: tuple[np.ndarray, np.ndarray],
        across: tuple[np.ndarray, np.ndarray] | None,
    ) -> np.ndarray:
        """S of each row: 0 on one GPU, S_1 on one node, max(S_1, S_x) across nodes; `one`
        and `across` are each spread's (bytes, latency seconds) per row (`across` None where
        no row spans nodes)."""
        gpus = np.asarray(gpus, dtype=float)
        s_one = one[1] + one[0] * self.seconds_per_byte(gpus, intra_gbps, 0)
        s_one = np.where(gpus > 1, s_one, 0.0)
        spans = (np.asarray(nodes) > 1) & (gpus > 1)
        if across is None:
            if spans.any():
                raise ValueError("rows across nodes need the across-nodes terms")
            return s_one
        slowest = np.fmin(intra_gbps, inter_gbps)
        s_across = across[1] + across[0] * self.seconds_per_byte(gpus, slowest, 1)
        return np.where(spans, np.fmax(s_one, s_across), s_one)

    def step_seconds(self, compute_s: np.ndarray, sync_s: np.ndarray) -> np.ndarray:
        """(T_c ** gamma + S ** gamma) ** (1 / gamma), scaled by the larger term so that no
        power overflows or underflows; exactly T_c where S is 0."""
        compute_s, sync_s = np.asarray(compute_s, dtype=float), np.asarray(sync_s, dtype=float)
        if self.gamma == 1.0:
            return compute_s + sync_s
        if self.gamma == 2.0:
            return np.hypot(compute_s, sync_s)  # (exactly T_c where S is 0, as below)
        top = np.fmax(compute_s, sync_s)
        with np.errstate(invalid="ignore", divide="ignore"):
            # one of the two terms is the top's: its ratio is top / top (1, or NaN where the
            # top is 0, inf or NaN), and 1 ** gamma is 1, so only the other's power is taken
            # (the same numbers as both powers: the fits' hot loop)
            inner = top / top + (np.minimum(compute_s, sync_s) / top) ** self.gamma
        return np.where(sync_s > 0, top * inner ** (1.0 / self.gamma), compute_s)


def _per_gpu_count(gpus: np.ndarray, growth: float) -> np.ndarray:
    """2 (n - 1) / n * (max(n, 2) / 2) ** growth of each GPU count n (0 on one GPU): from a
    table of every count up to the largest where the counts are whole (10^5 candidates of a
    few hundred counts: one power per count, not per row)."""
    gpus = np.asarray(gpus, dtype=float)

    def factor(n: np.ndarray) -> np.ndarray:
        ring = 2.0 * (n - 1.0) / np.fmax(n, 1.0)
        return np.where(n > 1, ring * (np.fmax(n, 2.0) / 2.0) ** growth, 0.0)

    top = float(gpus.max(initial=1.0))
    if len(gpus) > 256 and top <= 65536 and (gpus >= 1).all() and (gpus == np.floor(gpus)).all():
        return factor(np.arange(int(top) + 1, dtype=float))[gpus.astype(np.int64)]
    return factor(gpus)


# The grid the law is chosen on: every combination is tried with each job's terms fitted to it
GAMMAS = (1.0, 1.25, 1.5, 2.0, 3.0, 5.0)
GROWTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
# each job's terms: its latency and its effective gradient bytes
LATENCIES_S = (0.0, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3)
LOG_BYTES = np.linspace(np.log(1e4), np.log(1e11), 71)
LATENCY_PENALTY = 0.002  # per latency step: between equal fits, bytes (which links move) win


def fit_sync(
    groups: np.ndarray,
    log_step: np.ndarray,
    compute_s: np.ndarray,
    seconds_per_byte: np.ndarray,
    law: SyncLaw,
    floor_s: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Each group's (log effective bytes, latency seconds) under `law`, chosen on LOG_BYTES x
    LATENCIES_S for the least absolute log error of its rows' steps, and the mean of that
    error over the rows. `floor_s`: a synchronization each row has at least (S_1, for rows
    across nodes)."""
    n_groups = int(groups.max()) + 1
    loss = np.zeros((n_groups, len(LATENCIES_S), len(LOG_BYTES)))
    counts = np.bincount(groups, minlength=n_groups).astype(float)
    # a row's step depends on its (compute, seconds per byte, floor) only: each distinct one
    # (equal bytes) is stepped once per grid point and every row reads its own, so the errors
    # and their sums are the same numbers (a cluster's table repeats them: ~1,700 of ~10,000)
    terms = (
        [compute_s, seconds_per_byte] if floor_s is None else [compute_s, seconds_per_byte, floor_s]
    )
    keys = np.ascontiguousarray(np.stack([np.asarray(t, dtype=float) for t in terms], axis=1))
    _, first, row_of = np.unique(
        keys.view(np.dtype((np.void, keys.itemsize * keys.shape[1]))).ravel(),
        return_index=True,
        return_inverse=True,
    )
    compute_s, seconds_per_byte = keys[first, 0, None], keys[first, 1, None]
    floor_s = None if floor_s is None else keys[first, 2, None]
    # a latency's 71 byte counts at once (distinct rows x bytes), summed per group by a sparse
    # one-hot product: 7 numpy passes instead of 497 (the scaling fit's hot loop)
    one_hot = scipy.sparse.csr_array(
        (np.ones(len(groups)), (groups, np.arange(len(groups)))), shape=(n_groups, len(groups))
    )
    bytes_ = np.exp(LOG_BYTES)[None, :]
    for i, latency in enumerate(LATENCIES_S):
        sync = latency + bytes_ * seconds_per_byte
        if floor_s is not None:
            sync = np.fmax(sync, floor_s)
        error = np.abs(np.log(law.step_seconds(compute_s, sync))[row_of] - log_step[:, None])
        loss[:, i, :] = one_hot @ error
    loss = loss / counts[:, None, None]
    penalized = loss + LATENCY_PENALTY * np.arange(len(LATENCIES_S))[None, :, None]
    best = penalized.reshape(n_groups, -1).argmin(axis=1)
    i, j = np.divmod(best, len(LOG_BYTES))
    fitted = loss[np.arange(n_groups), i, j]
    return LOG_BYTES[j], np.asarray(LATENCIES_S)[i], float((fitted * counts).sum() / counts.sum())

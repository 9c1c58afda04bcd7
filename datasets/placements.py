"""Placement strings as Pollux and Sia write them and the data contract keeps them: one digit per
node, the GPUs used there ("2211": four nodes, six GPUs). Their one home: loaders, the contract's
check and the simulator read them here, and the optimizer writes them here."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from perfcast.errors import PerfcastError

MAX_DIGIT = 9  # GPUs per node are written as one digit each


def node_gpus(placement: str) -> tuple[int, ...]:
    """The GPUs on each node of `placement` ("2211" -> (2, 2, 1, 1))."""
    return tuple(int(c) for c in placement)


def even_placement(gpus: int, nodes: int) -> str | None:
    """GPUs per node as digits, the fuller nodes first ("443" for 11 GPUs on 3 nodes), or
    None when a node would hold more than 9 (the contract cannot write it)."""
    q, r = divmod(gpus, nodes)
    if q + (r > 0) > MAX_DIGIT:
        return None
    return str(q + 1) * r + str(q) * (nodes - r)


def fewest_nodes(gpus: int, gpus_per_node: int) -> int:
    """Nodes `gpus` GPUs need on equal nodes of `gpus_per_node` GPUs."""
    return math.ceil(gpus / gpus_per_node)


def digit_totals(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """For each text: the sum of its digits 1-9 (its GPUs) and its characters other than "0"
    (its nodes), over all texts' code points at once (a candidate table has 10^4 distinct
    placements). Texts need not be valid placements: the contract checks them with this."""
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    joined = "".join(texts)
    if joined.isascii():  # one byte per character
        points = np.frombuffer(joined.encode("ascii"), dtype=np.uint8).astype(np.int64)
    else:
        points = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    ends = np.cumsum(lengths)

    def per_text(values: np.ndarray) -> np.ndarray:
        running = np.concatenate([[0], np.cumsum(values)])
        return running[ends] - running[ends - lengths]

    digits = np.where((points >= ord("1")) & (points <= ord("9")), points - ord("0"), 0)
    return per_text(digits), per_text((points != ord("0")).astype(np.int64))


def read_placements(path: str) -> pd.DataFrame:
    """A CSV with a `placement` column of GPU digits per node, plus `num_nodes` and
    `num_replicas` (GPUs) per row; a placement that is not digits 1-9 is refused, naming the
    file and row."""
    from perfcast.datasets.fetch import fetch

    df = pd.read_csv(fetch(path), dtype={"placement": str})
    bad = ~df["placement"].fillna("").str.fullmatch(r"[1-9]+")
    if bad.any():
        row = int(bad.to_numpy().argmax())
        raise PerfcastError(
            f"{path}: row {row + 2}: column placement {df['placement'].iloc[row]!r} is not GPU "
            "digits per node (e.g. 2211)"
        )
    gpus, nodes = digit_totals(df["placement"].tolist())
    return df.assign(num_nodes=nodes, num_replicas=gpus)

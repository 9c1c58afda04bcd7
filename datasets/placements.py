"""Placement strings as Pollux and Sia write them: one digit per node, the GPUs used there
("2211": four nodes, six GPUs). The one parser of them: loaders and the simulator read it here."""

from __future__ import annotations

import pandas as pd

from perfcast.errors import PerfcastError


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
    digits = df["placement"].map(lambda p: [int(c) for c in p])
    return df.assign(num_nodes=digits.map(len), num_replicas=digits.map(sum))

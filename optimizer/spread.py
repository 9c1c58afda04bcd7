"""GPUs spread evenly over nodes, written as the data contract's `placement` string.

The one home of that string: the optimizer's candidates, the placement planner and the
allocation's predicted throughputs all build it here.
"""

from __future__ import annotations

import math

MAX_DIGIT = 9  # the contract writes GPUs per node as one digit each


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

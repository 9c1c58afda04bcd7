"""A model's operator graph: torch.fx trace -> networkx DiGraph -> contract `graph` table.

Nodes are the traced operators whose output is a tensor (shape arithmetic such as `x.size(0)`
is folded away; edges pass through it). Each node gets a normalized op kind (the vocabulary of
`OP_KINDS`, a superset of the NeuSight loader's), input and output shapes, forward FLOPs, bytes
moved and parameters, and optionally a measured forward latency.

FLOP conventions (forward pass, one multiply-add = 2 FLOPs):
  linear  2*M*in*out, M = output elements / out (bias add not counted, as in NeuSight)
  conv2d  2*N*Cout*Hout*Wout*(Cin/groups)*kh*kw (+ N*Cout*Hout*Wout with bias)
  bmm     2 * output elements * k (k = the contracted dimension)
  lstm    per layer and time step: 8h(in+h) + 8h (biases) + 10h (gates, cell update), times N
  softmax 5, layernorm 8, batchnorm 4, dropout 2, elementwise 1 per output element;
  pool and reduction 1 per input element; embedding, view, getitem, copy, concat, fill 0.
Bytes: tensors read (inputs and the module's parameters) plus the output written, at the
traced dtypes; only the output for fills; 0 for views, getitem and graph inputs.
Op kinds and per-element costs follow the NeuSight loader (datasets/sources/neusight.py).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import networkx as nx
import pandas as pd
import torch
from torch import Tensor, nn
from torch.fx import GraphModule, Interpreter, Node, symbolic_trace
from torch.fx.passes.shape_prop import ShapeProp, TensorMetadata

from perfcast.errors import PerfcastError

OP_KINDS = (
    "placeholder", "linear", "bmm", "conv2d", "batchnorm", "layernorm", "softmax", "elementwise",
    "dropout", "embedding", "pool", "reduction", "lstm", "view", "getitem", "copy", "concat",
    "fill", "get_attr", "other",
)  # fmt: skip

_MODULE_KINDS: dict[type[nn.Module], str] = {
    nn.Linear: "linear",
    nn.Conv2d: "conv2d",
    nn.BatchNorm1d: "batchnorm",
    nn.BatchNorm2d: "batchnorm",
    nn.LayerNorm: "layernorm",
    nn.Embedding: "embedding",
    nn.LSTM: "lstm",
    nn.AdaptiveAvgPool2d: "pool",
    nn.AvgPool2d: "pool",
    nn.MaxPool2d: "pool",
    nn.Softmax: "softmax",
    nn.Identity: "view",
    nn.Flatten: "view",
    nn.Dropout: "dropout",
}
_ELEMENTWISE_MODULES = (nn.ReLU, nn.GELU, nn.Sigmoid, nn.Tanh, nn.SiLU)
_FUNCTION_KINDS: dict[str, str] = {
    "matmul": "bmm", "bmm": "bmm", "baddbmm": "bmm", "linear": "linear", "conv2d": "conv2d",
    "softmax": "softmax", "log_softmax": "softmax", "layer_norm": "layernorm",
    "batch_norm": "batchnorm", "embedding": "embedding",
    "add": "elementwise", "sub": "elementwise", "mul": "elementwise", "truediv": "elementwise",
    "div": "elementwise", "relu": "elementwise", "gelu": "elementwise", "sigmoid": "elementwise",
    "tanh": "elementwise", "dropout": "dropout", "masked_fill": "elementwise",
    "silu": "elementwise", "exp": "elementwise", "triu": "elementwise", "neg": "elementwise",
    "mean": "reduction", "sum": "reduction", "amax": "reduction",
    "adaptive_avg_pool2d": "pool", "avg_pool2d": "pool", "max_pool2d": "pool",
    "view": "view", "reshape": "view", "permute": "view", "transpose": "view", "flatten": "view",
    "unbind": "view", "squeeze": "view", "unsqueeze": "view", "expand": "view", "split": "view",
    "chunk": "view", "getitem": "getitem", "contiguous": "copy", "cat": "concat", "stack": "concat",
    "arange": "fill", "new_ones": "fill", "ones": "fill", "zeros": "fill", "new_zeros": "fill",
    "full": "fill",
}  # fmt: skip
_NO_TRAFFIC = {"view", "getitem", "placeholder", "get_attr"}  # metadata only, or not an op
_PER_ELEMENT = {"softmax": 5, "layernorm": 8, "batchnorm": 4, "elementwise": 1, "dropout": 2}


def trace(model: nn.Module, example: Tensor | tuple[Tensor, ...]) -> GraphModule:
    """torch.fx trace of `model` with shapes propagated from `example`."""
    try:
        gm = symbolic_trace(model)
    except Exception as err:  # fx raises many kinds on untraceable control flow
        raise PerfcastError(
            f"torch.fx cannot trace {type(model).__name__}: {err}. Models with data-dependent "
            "control flow need a traceable forward."
        ) from None
    args = example if isinstance(example, tuple) else (example,)
    with torch.no_grad():
        ShapeProp(gm).propagate(*args)
    return gm


def to_digraph(gm: GraphModule) -> nx.DiGraph:
    """The operator DAG of a traced, shape-propagated module."""
    graph = nx.DiGraph()
    kept: dict[Node, int] = {}
    sources: dict[Node, list[int]] = {}  # dropped node -> the kept nodes feeding it
    for node in gm.graph.nodes:
        feeding = sorted({i for arg in node.all_input_nodes for i in _feeding(arg, kept, sources)})
        meta = node.meta.get("tensor_meta")
        if node.op == "output" or meta is None:
            sources[node] = feeding
            continue
        node_id = len(kept)
        kept[node] = node_id
        attrs = _describe(gm, node, meta)
        graph.add_node(node_id, name=node.name, **attrs)
        for src in feeding:
            graph.add_edge(src, node_id)
        graph.nodes[node_id]["inputs"] = feeding
    return graph


def _feeding(node: Node, kept: dict[Node, int], sources: dict[Node, list[int]]) -> list[int]:
    return [kept[node]] if node in kept else sources.get(node, [])


def _shapes(meta: Any) -> list[list[int]]:
    """Shapes of a tensor's metadata, or of each tensor in a (nested) tuple of them."""
    if isinstance(meta, TensorMetadata):
        return [list(meta.shape)]
    if isinstance(meta, (tuple, list)):
        return [shape for item in meta for shape in _shapes(item)]
    return []


def _nbytes(meta: Any) -> int:
    if isinstance(meta, TensorMetadata):
        return math.prod(meta.shape) * torch.empty((), dtype=meta.dtype).element_size()
    if isinstance(meta, (tuple, list)):
        return sum(_nbytes(item) for item in meta)
    return 0


def op_kind(gm: GraphModule, node: Node) -> str:
    """The normalized op kind of an fx node."""
    if node.op in ("placeholder", "get_attr"):
        return str(node.op)
    if node.op == "call_module":
        module = gm.get_submodule(str(node.target))
        if isinstance(module, _ELEMENTWISE_MODULES):
            return "elementwise"
        return next((k for t, k in _MODULE_KINDS.items() if isinstance(module, t)), "other")
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    return _FUNCTION_KINDS.get(name.strip("_"), "other")


def _describe(gm: GraphModule, node: Node, meta: Any) -> dict[str, Any]:
    kind = op_kind(gm, node)
    input_metas = [a.meta.get("tensor_meta") for a in node.all_input_nodes]
    input_shapes = [s for m in input_metas for s in _shapes(m)]
    out_shapes = _shapes(meta)
    module = gm.get_submodule(str(node.target)) if node.op == "call_module" else None
    params = sum(p.numel() for p in module.parameters()) if module is not None else 0
    param_bytes = sum(p.numel() * p.element_size() for p in module.parameters()) if module else 0
    out_elems = math.prod(out_shapes[0]) if out_shapes else 0
    in_elems = math.prod(input_shapes[0]) if input_shapes else 0
    flops = _flops(kind, module, node, input_shapes, out_shapes, out_elems, in_elems)
    moved = 0 if kind in _NO_TRAFFIC else _nbytes(meta) + param_bytes
    if kind not in _NO_TRAFFIC | {"fill"}:
        moved += sum(_nbytes(m) for m in input_metas)
    return {
        "op": kind,
        "input_shapes": input_shapes,
        "output_shape": out_shapes[0] if len(out_shapes) == 1 else out_shapes,
        "flops": float(flops),
        "bytes": float(moved),
        "params": float(params),
    }


def _flops(
    kind: str,
    module: nn.Module | None,
    node: Node,
    input_shapes: list[list[int]],
    out_shapes: list[list[int]],
    out_elems: int,
    in_elems: int,
) -> int:
    if kind == "linear":  # the bias add is not counted, as in NeuSight's opgraph
        out_features = out_shapes[0][-1]
        return 2 * (out_elems // out_features) * input_shapes[0][-1] * out_features
    if kind == "conv2d":  # weight [Cout, Cin/groups, kh, kw]: the module's, or F.conv2d's arg
        weight = list(module.weight.shape) if module is not None else input_shapes[1]
        has_bias = getattr(module, "bias", None) is not None or len(input_shapes) > 2
        return 2 * out_elems * math.prod(weight[1:]) + (out_elems if has_bias else 0)
    if kind == "bmm":
        return 2 * out_elems * input_shapes[0][-1]
    if kind == "lstm" and isinstance(module, nn.LSTM):
        n, t = (input_shapes[0][0], input_shapes[0][1])
        if not module.batch_first:
            n, t = t, n
        h, total = module.hidden_size, 0
        for layer in range(module.num_layers):
            features = module.input_size if layer == 0 else h
            total += 8 * h * (features + h) + 8 * h + 10 * h
        return n * t * total
    if kind in _PER_ELEMENT:
        return _PER_ELEMENT[kind] * out_elems
    if kind in {"pool", "reduction"}:
        return in_elems
    return 0


def graph_table(graph: nx.DiGraph, sample: dict[str, Any]) -> pd.DataFrame:
    """The contract `graph` long table of one sample: `sample`'s columns on every node."""
    rows = []
    for node_id, attrs in sorted(graph.nodes(data=True)):
        rows.append(
            sample
            | {
                "node_id": node_id,
                "name": attrs["name"],
                "op": attrs["op"],
                "input_shapes": json.dumps(attrs["input_shapes"]),
                "output_shape": json.dumps(attrs["output_shape"]),
                "flops": attrs["flops"],
                "bytes": attrs["bytes"],
                "inputs": json.dumps(attrs["inputs"]),
                "params": attrs["params"],
                "latency_ms": attrs.get("latency_ms", math.nan),
            }
        )
    return pd.DataFrame(rows)


class _TimingInterpreter(Interpreter):
    """Runs the traced module, timing every node (synchronizing CUDA around each)."""

    def __init__(self, gm: GraphModule, sync: Callable[[], None]) -> None:
        super().__init__(gm)
        self.sync = sync
        self.times: dict[str, float] = {}

    def run_node(self, n: Node) -> Any:
        self.sync()
        t0 = time.perf_counter()
        result = super().run_node(n)
        self.sync()
        self.times[n.name] = time.perf_counter() - t0
        return result


def measure_node_latency(
    gm: GraphModule,
    graph: nx.DiGraph,
    example: Tensor | tuple[Tensor, ...],
    *,
    repeats: int = 5,
) -> None:
    """Set each node's `latency_ms` (median forward time over `repeats` runs, no grad)."""
    args = example if isinstance(example, tuple) else (example,)
    cuda = any(t.is_cuda for t in args)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    runs: dict[str, list[float]] = {}
    with torch.no_grad():
        for _ in range(repeats + 1):  # the first run warms up
            interp = _TimingInterpreter(gm, sync)
            interp.run(*args)
            for name, seconds in interp.times.items():
                runs.setdefault(name, []).append(seconds)
    for _, attrs in graph.nodes(data=True):
        attrs["latency_ms"] = 1000 * statistics.median(runs[attrs["name"]][1:])


def total_flops(graph: nx.DiGraph) -> float:
    return float(sum(attrs["flops"] for _, attrs in graph.nodes(data=True)))

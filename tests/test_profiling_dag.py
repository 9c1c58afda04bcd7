"""DAG extraction against a model counted by hand, and the graph contract."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from perfcast.datasets.contract import validate
from perfcast.features.profiling import dag, zoo
from perfcast.features.profiling.samples import graph_sample


class TwoLayerMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(10, 20)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(20, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


def test_two_layer_mlp_counted_by_hand() -> None:
    """Batch 4. Nodes: x, fc1, act, fc2 (the fx `output` node is not an operator).
    FLOPs: fc1 2*4*10*20 = 1600; relu 4*20 = 80; fc2 2*4*20*5 = 800; total 2480.
    Bytes (fp32): fc1 reads x 4*10 and weights 10*20+20, writes 4*20: (40+220+80)*4 = 1360;
    relu reads and writes 4*20: 640; fc2 reads 80 + 20*5+5, writes 20: (80+105+20)*4 = 820."""
    x = torch.randn(4, 10)
    graph = dag.to_digraph(dag.trace(TwoLayerMLP(), x))
    nodes = [graph.nodes[i] for i in sorted(graph.nodes)]
    assert [n["op"] for n in nodes] == ["placeholder", "linear", "elementwise", "linear"]
    assert [n["flops"] for n in nodes] == [0, 1600, 80, 800]
    assert [n["bytes"] for n in nodes] == [0, 1360, 640, 820]
    assert [n["params"] for n in nodes] == [0, 220, 0, 105]
    assert dag.total_flops(graph) == 2480
    assert list(graph.edges) == [(0, 1), (1, 2), (2, 3)]
    assert nodes[1]["input_shapes"] == [[4, 10]] and nodes[3]["output_shape"] == [4, 5]


def test_attention_and_conv_flops_by_hand() -> None:
    """One transformer block, width 64 (1 head), batch 2, sequence 8: the two attention matmuls
    are 2*(2*1*8*8)*64 = 16384 FLOPs each; the qkv projection 2*16*64*192 = 393216.
    A 3x3 conv 3->8 on 2x3x16x16 with padding: 2*(2*8*16*16)*3*9 = 221184 (no bias)."""
    block = zoo.TransformerBlock(64, 1, causal=True)
    graph = dag.to_digraph(dag.trace(block, torch.randn(2, 8, 64)))
    by_op = [a for _, a in sorted(graph.nodes(data=True))]
    bmm = [a["flops"] for a in by_op if a["op"] == "bmm"]
    assert bmm == [16384, 16384]
    assert by_op[[a["name"] for a in by_op].index("attn_qkv")]["flops"] == 393216
    assert sum(a["op"] == "softmax" for a in by_op) == 1
    image = torch.randn(2, 3, 16, 16)
    as_module = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False))
    as_function = nn.Conv2d(3, 8, 3, padding=1, bias=False)  # traced as F.conv2d
    assert dag.total_flops(dag.to_digraph(dag.trace(as_module, image))) == 221184
    assert dag.total_flops(dag.to_digraph(dag.trace(as_function, image))) == 221184


def test_shape_arithmetic_is_folded_and_edges_pass_through_it() -> None:
    """The decoder computes positions from tokens.size(1): no `size` node, but an edge."""
    built = zoo.build(zoo.spec("gpt-decoder", width=64, depth=1, input_size=8))
    tokens, _ = built.make_batch(2)
    graph = dag.to_digraph(dag.trace(built.model, tokens))
    names = {a["name"]: i for i, a in graph.nodes(data=True)}
    assert not any(n.startswith("size") or n.startswith("getattr") for n in names)
    assert graph.has_edge(names["tokens"], names["arange"])
    import networkx as nx

    assert nx.is_directed_acyclic_graph(graph)


def test_graph_sample_validates_as_contract_graph() -> None:
    torch.set_num_threads(1)
    table = graph_sample(zoo.spec("mlp", width=16, depth=2, input_size=8), 4, node_latency=True)
    clean = validate(table, "graph")
    assert clean["sample_id"].nunique() == 1 and clean["batch_size"].iloc[0] == 4
    assert clean["e2e_latency_ms"].iloc[0] > 0
    assert (clean["latency_ms"] >= 0).all()
    assert json.loads(clean["inputs"].iloc[1]) == [0]
    # forward FLOPs: 2*4*(8*16 + 16*16 + 16*10) + relu 2*4*16
    assert clean["flops"].sum() == 2 * 4 * (8 * 16 + 16 * 16 + 16 * 10) + 2 * 4 * 16


def test_untraceable_model_gets_a_clear_error() -> None:
    from perfcast.errors import PerfcastError

    class DataDependent(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(PerfcastError, match="cannot trace DataDependent"):
        dag.trace(DataDependent(), torch.randn(2))

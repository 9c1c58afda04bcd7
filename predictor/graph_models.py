"""Neural models over a whole operator graph: a GNN (message passing over the DAG) and an RNN
(a GRU over the nodes in topological order, whose state carries the dependency effects, as in
Chou's Hive-query predictor). Both read `features.graphs.GraphArrays` and predict the p10, p50
and p90 of log(latency / roofline) with quantile heads.
"""

from __future__ import annotations

from typing import Self

import numpy as np
import torch
from sklearn.base import BaseEstimator
from torch import nn
from torch.nn.utils.rnn import pack_sequence
from torch_geometric.data import Batch, Data
from torch_geometric.nn import SAGEConv, global_add_pool, global_mean_pool

from perfcast.features.graphs import NODE_FEATURES, GraphArrays
from perfcast.predictor.regressors import QUANTILES, one_torch_thread, pinball_loss


class _GNN(nn.Module):
    def __init__(self, n_globals: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Linear(NODE_FEATURES, hidden)
        self.convs = nn.ModuleList([SAGEConv(hidden, hidden) for _ in range(3)])
        self.head = _head(2 * hidden + n_globals, hidden)

    def forward(self, batch: Batch, globals_: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.embed(batch.x))
        for conv in self.convs:
            h = h + torch.relu(conv(h, batch.edge_index))
        # weight each node by its share of the roofline time, so big kernels dominate the sum
        weight = batch.x[:, -1:].clamp(min=0)
        pooled = torch.cat(
            [global_add_pool(h * weight, batch.batch), global_mean_pool(h, batch.batch)], dim=1
        )
        return self.head(torch.cat([pooled, globals_], dim=1))


class _RNN(nn.Module):
    def __init__(self, n_globals: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Linear(NODE_FEATURES, hidden)
        self.gru = nn.GRU(hidden, hidden, batch_first=True)
        self.head = _head(hidden + n_globals, hidden)

    def forward(self, sequences: list[torch.Tensor], globals_: torch.Tensor) -> torch.Tensor:
        packed = pack_sequence([torch.relu(self.embed(s)) for s in sequences], enforce_sorted=False)
        _, last = self.gru(packed)
        return self.head(torch.cat([last[-1], globals_], dim=1))


def _head(n_in: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.SiLU(), nn.Linear(hidden, len(QUANTILES)))


def _compact(graph: GraphArrays) -> torch.Tensor:
    """The RNN's sequence: nodes that do work (flops or bytes), in topological order."""
    busy = (graph.x[:, NODE_FEATURES - 5] > 0) | (graph.x[:, NODE_FEATURES - 4] > 0)
    x = graph.x[busy] if busy.any() else graph.x
    return torch.from_numpy(x)


class GraphQuantileNet(BaseEstimator):
    """`architecture` is "gnn" or "rnn"; fit(graphs, y) with y = log(latency) - log_base."""

    def __init__(
        self,
        architecture: str = "gnn",
        hidden: int = 64,
        epochs: int = 80,
        lr: float = 3e-3,
        batch_size: int = 16,
        random_state: int = 0,
    ) -> None:
        self.architecture = architecture
        self.hidden = hidden
        self.epochs = epochs
        self.lr = lr
        self.batch_size = batch_size
        self.random_state = random_state

    def _inputs(self, graphs: list[GraphArrays]) -> tuple[object, torch.Tensor]:
        globals_ = np.stack([g.globals for g in graphs])
        globals_ = torch.from_numpy(((globals_ - self.g_mean_) / self.g_std_).astype(np.float32))
        if self.architecture == "gnn":
            data = [
                Data(x=torch.from_numpy(g.x), edge_index=torch.from_numpy(g.edges)) for g in graphs
            ]
            return Batch.from_data_list(data), globals_
        return [_compact(g) for g in graphs], globals_

    def fit(self, graphs: list[GraphArrays], y: np.ndarray) -> Self:
        torch.manual_seed(self.random_state)
        rng = np.random.default_rng(self.random_state)
        stacked = np.stack([g.globals for g in graphs])
        # a global constant in training (every sample inference) scales by 1, not 1e6: a
        # prediction row where it differs would otherwise reach the network a million strong
        std = stacked.std(0)
        self.g_mean_, self.g_std_ = stacked.mean(0), np.where(std > 1e-6, std, 1.0)
        self.y_mean_, self.y_std_ = float(np.mean(y)), float(np.std(y) + 1e-6)
        target = torch.as_tensor((np.asarray(y) - self.y_mean_) / self.y_std_, dtype=torch.float32)
        model_class = _GNN if self.architecture == "gnn" else _RNN
        self.net_ = model_class(len(self.g_mean_), self.hidden)
        optimizer = torch.optim.AdamW(  # fused: as QuantileMLP's
            self.net_.parameters(), lr=self.lr, weight_decay=1e-4, fused=True
        )
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, self.epochs)
        quantiles = torch.tensor(QUANTILES)
        batches = [
            self._inputs([graphs[i] for i in idx])
            for idx in np.array_split(
                np.arange(len(graphs)), max(1, len(graphs) // self.batch_size)
            )
        ]
        splits = np.array_split(np.arange(len(graphs)), len(batches))
        self.net_.train()
        # one thread: a batch of 16 graphs of ~125 nodes is too small to split, and two threads
        # on a busy two-core machine spin (several times the CPU of one)
        with one_torch_thread():
            for _ in range(self.epochs):
                for b in rng.permutation(len(batches)):
                    inputs, globals_ = batches[b]
                    optimizer.zero_grad()
                    loss = pinball_loss(self.net_(inputs, globals_), target[splits[b]], quantiles)
                    loss.backward()
                    nn.utils.clip_grad_norm_(self.net_.parameters(), 5.0)
                    optimizer.step()
                scheduler.step()
        self.net_.eval()
        return self

    def predict_quantiles(self, graphs: list[GraphArrays]) -> tuple[np.ndarray, ...]:
        outputs = []
        with torch.inference_mode():
            for start in range(0, len(graphs), 64):
                inputs, globals_ = self._inputs(graphs[start : start + 64])
                outputs.append(self.net_(inputs, globals_).numpy())
        out = np.concatenate(outputs) * self.y_std_ + self.y_mean_
        return out[:, 0], out[:, 1], out[:, 2]

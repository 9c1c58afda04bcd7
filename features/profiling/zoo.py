"""A model zoo in plain PyTorch (torchvision is not installable beside the CPU torch here).

Every entry builds a model with configurable width, depth and input size, plus a function
that makes a synthetic in-memory batch, so profiling needs no download. The models are written
with explicit `nn.Linear` / `torch.matmul` / `softmax` calls (not `nn.MultiheadAttention`) so
that torch.fx sees each operator of interest as its own node.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from perfcast.errors import PerfcastError

Batch = tuple[Tensor, Tensor]  # (inputs, targets)


@dataclass(frozen=True)
class ZooSpec:
    """One zoo model at one size. `job` is its name in the data contract."""

    name: str
    width: int
    depth: int
    input_size: int  # features (mlp), image side (resnets), sequence length (text), 2 (ncf)

    @property
    def job(self) -> str:
        return f"{self.name}-w{self.width}-d{self.depth}-i{self.input_size}"

    @property
    def family(self) -> str:
        return ZOO[self.name].family

    @property
    def seq_len(self) -> int | None:
        return self.input_size if ZOO[self.name].family in {"rnn", "transformer"} else None


@dataclass(frozen=True)
class ZooModel:
    spec: ZooSpec
    model: nn.Module
    make_batch: Callable[[int], Batch]  # batch size -> synthetic (inputs, targets)
    loss_fn: Callable[[Tensor, Tensor], Tensor]


# ---------------------------------------------------------------- models


class MLP(nn.Module):
    def __init__(self, in_features: int, width: int, depth: int, classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        features = in_features
        for _ in range(depth):
            layers += [nn.Linear(features, width), nn.ReLU()]
            features = width
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(features, classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.body(x))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = _shortcut(cin, cout, stride)

    def forward(self, x: Tensor) -> Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.shortcut = _shortcut(cin, cout, stride)

    def forward(self, x: Tensor) -> Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.bn3(self.conv3(y)) + self.shortcut(x))


def _shortcut(cin: int, cout: int, stride: int) -> nn.Module:
    if stride == 1 and cin == cout:
        return nn.Identity()
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class ResNet(nn.Module):
    """ResNet-style CNN; `width` is the first stage's channel count (64 in the paper)."""

    def __init__(
        self, block: type[BasicBlock | Bottleneck], stages: list[int], width: int, classes: int = 10
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        blocks: list[nn.Module] = []
        cin = width
        for i, count in enumerate(stages):
            for j in range(count):
                stride = 2 if i > 0 and j == 0 else 1
                blocks.append(block(cin, width * 2**i, stride))
                cin = width * 2**i * block.expansion
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


class LSTMLanguageModel(nn.Module):
    def __init__(self, vocab: int, width: int, depth: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.lstm = nn.LSTM(width, width, num_layers=depth, batch_first=True)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: Tensor) -> Tensor:
        hidden, _ = self.lstm(self.embed(tokens))
        return self.head(hidden)


class SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.width, self.heads, self.causal = width, heads, causal
        self.scale = 1 / math.sqrt(width // heads)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: Tensor) -> Tensor:
        b, t = x.size(0), x.size(1)
        qkv = self.qkv(x).view(b, t, 3, self.heads, self.width // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        if self.causal:
            mask = scores.new_ones(t, t, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        attn = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.proj(attn.transpose(1, 2).reshape(b, t, self.width))


class TransformerBlock(nn.Module):
    def __init__(self, width: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = SelfAttention(width, heads, causal)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Transformer(nn.Module):
    """BERT-style encoder (`causal=False`, pooled classifier) or GPT-style decoder (`causal=True`,
    next-token head)."""

    def __init__(
        self, vocab: int, width: int, depth: int, seq_len: int, causal: bool, classes: int = 2
    ) -> None:
        super().__init__()
        self.causal = causal
        self.embed = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(seq_len, width)
        self.blocks = nn.Sequential(
            *(TransformerBlock(width, max(1, width // 64), causal) for _ in range(depth))
        )
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab if causal else classes)

    def forward(self, tokens: Tensor) -> Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.ln(self.blocks(self.embed(tokens) + self.pos(positions)))
        return self.head(x if self.causal else x.mean(dim=1))


class NCF(nn.Module):
    """Neural collaborative filtering: GMF and MLP towers over user and item embeddings."""

    def __init__(self, users: int, items: int, width: int, depth: int) -> None:
        super().__init__()
        self.gmf_user, self.gmf_item = nn.Embedding(users, width), nn.Embedding(items, width)
        self.mlp_user, self.mlp_item = nn.Embedding(users, width), nn.Embedding(items, width)
        layers: list[nn.Module] = []
        features = 2 * width
        for _ in range(depth):
            layers += [nn.Linear(features, max(8, features // 2)), nn.ReLU()]
            features = max(8, features // 2)
        self.mlp = nn.Sequential(*layers)
        self.head = nn.Linear(width + features, 1)

    def forward(self, pairs: Tensor) -> Tensor:
        user, item = pairs[:, 0], pairs[:, 1]
        gmf = self.gmf_user(user) * self.gmf_item(item)
        mlp = self.mlp(torch.cat([self.mlp_user(user), self.mlp_item(item)], dim=1))
        return self.head(torch.cat([gmf, mlp], dim=1)).squeeze(1)


# ---------------------------------------------------------------- registry

VOCAB = 1000
NCF_USERS, NCF_ITEMS = 5000, 2000


def _token_loss(logits: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


@dataclass(frozen=True)
class ZooEntry:
    family: str
    width: int
    depth: int
    input_size: int
    build: Callable[[ZooSpec], ZooModel]


def _mlp(s: ZooSpec) -> ZooModel:
    def batch(n: int) -> Batch:
        return torch.randn(n, s.input_size), torch.randint(0, 10, (n,))

    return ZooModel(s, MLP(s.input_size, s.width, s.depth), batch, F.cross_entropy)


def _resnet(block: type[BasicBlock | Bottleneck], stages: list[int]) -> Callable:
    def build(s: ZooSpec) -> ZooModel:
        def batch(n: int) -> Batch:
            return torch.randn(n, 3, s.input_size, s.input_size), torch.randint(0, 10, (n,))

        return ZooModel(s, ResNet(block, stages, s.width), batch, F.cross_entropy)

    return build


def _lstm(s: ZooSpec) -> ZooModel:
    def batch(n: int) -> Batch:
        tokens = torch.randint(0, VOCAB, (n, s.input_size + 1))
        return tokens[:, :-1], tokens[:, 1:]

    return ZooModel(s, LSTMLanguageModel(VOCAB, s.width, s.depth), batch, _token_loss)


def _transformer(causal: bool) -> Callable:
    def build(s: ZooSpec) -> ZooModel:
        model = Transformer(VOCAB, s.width, s.depth, s.input_size, causal)

        def batch(n: int) -> Batch:
            tokens = torch.randint(0, VOCAB, (n, s.input_size + 1))
            if causal:
                return tokens[:, :-1], tokens[:, 1:]
            return tokens[:, :-1], torch.randint(0, 2, (n,))

        return ZooModel(s, model, batch, _token_loss if causal else F.cross_entropy)

    return build


def _ncf(s: ZooSpec) -> ZooModel:
    def batch(n: int) -> Batch:
        pairs = torch.stack(
            [torch.randint(0, NCF_USERS, (n,)), torch.randint(0, NCF_ITEMS, (n,))], dim=1
        )
        return pairs, torch.randint(0, 2, (n,)).float()

    model = NCF(NCF_USERS, NCF_ITEMS, s.width, s.depth)
    return ZooModel(s, model, batch, F.binary_cross_entropy_with_logits)


# Defaults are small enough to profile on a laptop CPU; scale them up with width/depth/input.
ZOO: dict[str, ZooEntry] = {
    "mlp": ZooEntry("mlp", 256, 3, 784, _mlp),
    "resnet18": ZooEntry("cnn", 16, 18, 32, _resnet(BasicBlock, [2, 2, 2, 2])),
    "resnet50": ZooEntry("cnn", 16, 50, 32, _resnet(Bottleneck, [3, 4, 6, 3])),
    "lstm-lm": ZooEntry("rnn", 256, 2, 32, _lstm),
    "bert-encoder": ZooEntry("transformer", 128, 2, 64, _transformer(causal=False)),
    "gpt-decoder": ZooEntry("transformer", 128, 2, 64, _transformer(causal=True)),
    "ncf": ZooEntry("recommender", 32, 3, 2, _ncf),
}
FIXED_DEPTH = {"resnet18", "resnet50"}  # depth is part of the architecture's name


def spec(
    name: str, *, width: int | None = None, depth: int | None = None, input_size: int | None = None
) -> ZooSpec:
    """The zoo model `name` at a size; unspecified dimensions take the entry's defaults."""
    if name not in ZOO:
        raise PerfcastError(f"unknown zoo model {name!r}; choose one of {', '.join(ZOO)}")
    entry = ZOO[name]
    if depth is not None and name in FIXED_DEPTH and depth != entry.depth:
        raise PerfcastError(f"{name} has a fixed depth of {entry.depth}; change --width instead")
    chosen = ZooSpec(
        name, width or entry.width, depth or entry.depth, input_size or entry.input_size
    )
    if min(chosen.width, chosen.depth, chosen.input_size) < 1:
        raise PerfcastError(f"{name}: width, depth and input size must be >= 1")
    if name == "ncf" and chosen.input_size != 2:
        raise PerfcastError("ncf takes (user, item) pairs: its input size is always 2")
    return chosen


def build(zoo_spec: ZooSpec, *, seed: int = 0) -> ZooModel:
    """Instantiate `zoo_spec` with deterministic weights."""
    torch.manual_seed(seed)
    return ZOO[zoo_spec.name].build(zoo_spec)


def parse_job(text: str) -> ZooSpec:
    """`resnet18`, or a job name as written in the contract (`resnet18-w32-d18-i32`)."""
    name, *parts = _split_name(text)
    sizes: dict[str, int] = {}
    keys = {"w": "width", "d": "depth", "i": "input_size"}
    for part in parts:
        if part[:1] not in keys or not part[1:].isdigit():
            raise PerfcastError(f"cannot read size {part!r} in {text!r}; expected w<N>, d<N>, i<N>")
        sizes[keys[part[0]]] = int(part[1:])
    return spec(name, **sizes)


def _split_name(text: str) -> list[str]:
    for name in sorted(ZOO, key=len, reverse=True):
        if text == name or text.startswith(name + "-"):
            rest = text[len(name) + 1 :]
            return [name, *(rest.split("-") if rest else [])]
    raise PerfcastError(f"unknown zoo model {text!r}; choose one of {', '.join(ZOO)}")

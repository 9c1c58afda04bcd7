"""NeuSight (ASPLOS'25, sitar-lab/NeuSight): operator graphs of transformer models with measured
per-operator and end-to-end latency on 10 GPUs, as one `graph` contract table.

Each sample is `label/<GPU>/<model>-<train|inf>-<seq>-<batch>.csv`, a torch.fx node table, plus
the `.json` beside it with the measured end-to-end latency. What the files hold, read from them:

- The node table traces ONE transformer layer (with the embeddings and the head), while
  `e2e_latency` in the JSON is the whole model of `num_layer` layers. The sample columns
  `num_layers` (the JSON's `num_layer`) and `graph_layers` (= 1) record this; a predictor that
  sums node latencies must scale the layer part by `num_layers`. `num_layer` 0 means the table
  traces the whole model (NeuSight's aggregator repeats nothing, e.g. Switch Transformers):
  then `num_layers` = `graph_layers` = the numbered layers found in the node names.
- `latency` of a node is `fw_latency + bw_latency + acc_latency` (checked on the data: acc is the
  gradient accumulation of the node's parameters). NeuSight's other label layout (e.g.
  `label/NVIDIA_L4/switch4-inf-512-1.csv`) has no `latency` but `e2e_latency` (the same sum)
  and `bwall_latency` (bw + acc); both layouts give the same node columns. `latency_ms` is that
  total, so in train mode it is the node's whole share of a training iteration; inference nodes
  have bw = acc = 0. The three parts are kept as `fw_latency_ms`, `bw_latency_ms`, `acc_latency_ms`.
- The JSON's `e2e_latency` = `fw_latency` + `bwall_latency`, all in milliseconds; kept as
  `e2e_latency_ms`, `e2e_fw_latency_ms`, `e2e_bw_latency_ms`.
- Samples whose JSON has no node table (the `-fusion`, `-dp4`/`-tp4`/`-pp4` and some `switchxl4`
  runs) have no graph and are left out.

Device specs come from `data/dataset/test/device_configs/<GPU>.json`; the AMD Instinct GPUs have
no config file there, so their spec columns are missing (never zero).

`flops` and `bytes` are estimated from the shapes (see `_node_cost`); `bytes` counts every input
and the output once at the element size of the node's output dtype (4 for float32).
"""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path

import pandas as pd

from perfcast.datasets.fetch import entries, fetch
from perfcast.datasets.registry import dataset
from perfcast.errors import PerfcastError

PREFIX = "neusight/"
LABEL_DIR = "neusight/label/"
DEVICE_CONFIG_DIR = "neusight/data/dataset/test/device_configs/"

# Device config fields -> contract columns. Units as read from the files (e.g. V100-PCIE-32GB:
# Dev_Mem 32, Mem_Bw 900, Num_Sm 80, SingleFLOPs 14029 = 80 SMs * 64 cores * 1370 MHz * 2 / 1000).
GB_PER_DEV_MEM = 1.0  # Dev_Mem is in GB
GBPS_PER_MEM_BW = 1.0  # Mem_Bw is in GB/s
TFLOPS_PER_GFLOPS = 1e-3  # SingleFLOPs is the FP32 peak in GFLOP/s
MB_PER_L2CACHE = 1.0  # L2Cache is in MB

ELEMENT_BYTES = {
    "torch.float32": 4,
    "torch.float16": 2,
    "torch.bfloat16": 2,
    "torch.int64": 8,
    "torch.int32": 4,
    "torch.bool": 1,
}
DEFAULT_ELEMENT_BYTES = 4  # fp32 when the dtype column is empty

# Floating-point operations per output element of the non-GEMM kinds (rough, documented):
# softmax = max, subtract, exp, sum, divide; layernorm = mean, subtract, square, sum, divide
# by std, scale, shift, plus the rsqrt amortized; dropout = compare + multiply.
FLOPS_PER_ELEMENT = {"elementwise": 1, "softmax": 5, "layernorm": 8, "dropout": 2}

# call_module: the module's class (the last entry of the node's `nn_module_stack`) -> op kind;
# a module whose class is not here is looked up by its own name in MODULE_KINDS, and one in
# neither is refused (an unknown kernel silently costed as "other" would skew the graph).
MODULE_CLASS_KINDS = {
    "Linear": "linear", "Conv1D": "linear", "LayerNorm": "layernorm", "Embedding": "embedding",
    "Dropout": "dropout", "Softmax": "softmax", "ReLU": "elementwise", "GELU": "elementwise",
    "NewGELUActivation": "elementwise", "GELUActivation": "elementwise", "Tanh": "elementwise",
    "SiLU": "elementwise", "Sigmoid": "elementwise",
}  # fmt: skip
_MODULE_CLASS = re.compile(r"<class '([\w.]+)'>")

# call_module: the module's own name (last path component) -> op kind.
MODULE_KINDS = {
    "linear": {
        "dense", "query", "key", "value", "q_proj", "k_proj", "v_proj", "out_proj", "fc1",
        "fc2", "lm_head", "decoder", "classifier", "seq_relationship",
    },
    "layernorm": {"LayerNorm", "ln_1", "ln_2", "ln_f", "final_layer_norm", "self_attn_layer_norm"},
    "embedding": {
        "word_embeddings", "position_embeddings", "token_type_embeddings", "wte", "wpe",
        "embed_tokens",
    },
    "dropout": {"dropout", "drop", "attn_dropout", "resid_dropout"},
    "elementwise": {"activation", "activation_fn"},
}  # fmt: skip
_MODULE_KIND = {name: kind for kind, names in MODULE_KINDS.items() for name in names}

# call_function / call_method targets -> op kind. Functions are matched on their name inside
# torch.fx's repr (`<built-in method addmm of type object at 0x...>`).
FUNCTION_KINDS = {
    "linear": {"addmm"},  # GPT-2's Conv1D: addmm(bias, x, weight)
    "bmm": {"matmul", "bmm"},
    "softmax": {"softmax"},
    "embedding": {"embedding"},
    "dropout": {"dropout"},
    "elementwise": {
        "add", "sub", "mul", "truediv", "pow", "gelu", "tanh", "eq", "ne", "gt", "lt", "le",
        "where", "masked_fill", "masked_fill_", "cumsum", "max", "rsqrt", "log", "abs", "neg",
        "one_hot",
    },
    "reduction": {"mean", "sum", "min", "argmax", "count_nonzero", "logsumexp"},
    "view": {"view", "reshape", "permute", "transpose", "expand", "unsqueeze", "split"},
    "copy": {"contiguous", "clone", "cat", "repeat"},
    "cast": {"to", "type", "type_as", "long", "bool", "float"},
    "fill": {"ones", "full", "arange", "tensor", "zeros", "zeros_like", "full_like"},
    "getitem": {"getitem"},
    "metadata": {"size", "dim", "getattr", "finfo"},
}  # fmt: skip
_FUNCTION_KIND = {name: kind for kind, names in FUNCTION_KINDS.items() for name in names}
_FUNCTION_NAME = re.compile(r"<(?:built-in (?:function|method)|function|class) '?([\w.]+)'?")
_INPUT_NAME = re.compile(r"([A-Za-z_]\w*): None")
_SAMPLE_NAME = re.compile(r"^(?P<model>.+)-(?P<mode>train|inf)-(?P<seq>\d+)-(?P<batch>\d+)$")


def module_class(meta: object) -> str | None:
    """The class name of a call_module node's module, from its `meta` column (the last class
    in `nn_module_stack`), or None when the column does not name one."""
    classes = _MODULE_CLASS.findall(str(meta))
    return classes[-1].rsplit(".", 1)[-1] if classes else None


def op_kind(fx_op: str, target: str, output_is_tensor: bool, module: str | None = None) -> str:
    """The normalized op kind of one torch.fx node (`module`: a call_module node's class).
    Raises ValueError for a module known neither by its class nor by its name."""
    if fx_op in ("placeholder", "output", "get_attr"):
        return fx_op
    if fx_op == "call_module":
        name = target.rsplit(".", 1)[-1]
        kind = MODULE_CLASS_KINDS.get(module or "") or _MODULE_KIND.get(name)
        if kind is None:
            raise ValueError(
                f"module {target!r} (class {module or 'unknown'}) is not a known op kind; "
                "add its class to MODULE_CLASS_KINDS or its name to MODULE_KINDS"
            )
        return kind
    match = _FUNCTION_NAME.match(target)
    name = match.group(1).rsplit(".", 1)[-1] if match else target
    kind = _FUNCTION_KIND.get(name, "other")
    if not output_is_tensor and kind not in ("view", "metadata"):
        return "scalar"  # Python arithmetic on sizes (`add` of two ints), no tensor work
    return kind


def _numel(shape: list[int]) -> int:
    return math.prod(shape) if shape else 1


def _gemm_flops(kind: str, inputs: list[list[int]], output: list[int]) -> float:
    """2*M*K*N multiply-adds for a linear layer; batched over the output's leading dims for
    matmul/bmm. The bias add of a linear layer is not counted (as in NeuSight's opgraph)."""
    if kind == "linear":
        x = inputs[1] if len(inputs) == 3 else inputs[0]  # addmm(bias, x, w) vs module(x)
        k = x[-1]
        m = _numel(x[:-1])
        n = output[-1]
        return 2.0 * m * k * n
    a, b = inputs[0], inputs[1]
    k = a[-1]
    if len(b) >= 2 and b[-2] != k:
        raise ValueError(f"matmul shapes {a} x {b} do not agree")
    return 2.0 * _numel(output) * k


def node_cost(kind: str, inputs: list[list[int]], output: list[int], element_bytes: int) -> tuple:
    """(flops, bytes, params) of one node from its shapes; params is None when unknown."""
    out = _numel(output)
    if kind in ("placeholder", "output", "view", "metadata", "scalar"):
        return 0.0, 0.0, 0.0
    if kind == "get_attr":  # a parameter or buffer read by later nodes
        return 0.0, 0.0, float(out)
    moved = float((sum(_numel(s) for s in inputs) + out) * element_bytes)
    if kind == "fill":
        return 0.0, float(out * element_bytes), 0.0
    if kind in ("linear", "bmm"):
        flops = _gemm_flops(kind, inputs, output)
        if kind == "linear" and len(inputs) == 1:  # nn.Linear module: weight K*N not in inputs
            k, n = inputs[0][-1], output[-1]
            return flops, moved + k * n * element_bytes, float(k * n)
        return flops, moved, 0.0
    if kind == "layernorm":
        hidden = output[-1]
        return FLOPS_PER_ELEMENT[kind] * out, moved, float(2 * hidden)
    if kind == "embedding":
        return 0.0, moved, None  # the table size (vocabulary) is not in the node table
    return float(FLOPS_PER_ELEMENT.get(kind, 0) * out), moved, 0.0


def _shape_list(text: str) -> list:
    value = ast.literal_eval(text)
    return [int(v) for v in value] if isinstance(value, (tuple, list)) else [int(value)]


def _input_shapes(text: str) -> list[list[int]]:
    return [[int(v) for v in s] for s in ast.literal_eval(text)]


# the node latency columns of NeuSight's two label layouts -> ours
_LATENCY_LAYOUTS = (
    {"latency": "latency", "fw_latency": "fw", "bw_latency": "bw", "acc_latency": "acc"},
    {"e2e_latency": "latency", "fw_latency": "fw", "bw_latency": "bw", "acc_latency": "acc"},
)


def _node_latencies(raw: pd.DataFrame, path: Path) -> pd.DataFrame:
    """(latency, fw, bw, acc) per node in ms, from whichever layout the table uses."""
    for layout in _LATENCY_LAYOUTS:
        if set(layout) <= set(raw.columns):
            return raw[list(layout)].rename(columns=layout).astype(float)
    expected = " or ".join(", ".join(layout) for layout in _LATENCY_LAYOUTS)
    raise PerfcastError(f"{path}: no node latency columns; expected {expected}")


def parse_node_table(path: Path) -> pd.DataFrame:
    """Turn one NeuSight torch.fx node table into the node columns of the graph contract."""
    raw = pd.read_csv(path).rename(columns={"_input_nodes": "input_nodes"})
    latencies = _node_latencies(raw, path)
    raw = raw.drop(columns=[c for c in ("latency", "fw_latency", "bw_latency") if c in raw])
    raw = raw.assign(**latencies)
    ids = {name: i for i, name in enumerate(raw["Name"])}
    rows = []
    for i, r in enumerate(raw.itertuples(index=False)):
        where = f"{path}, row {i + 1}"
        try:
            is_tensor = isinstance(r.dtype, str)
            kind = op_kind(r.op, str(r.target), is_tensor, module_class(r.meta))
            inputs = _input_shapes(r.input_shapes)
            output = _shape_list(r.output_shape)
            size = ELEMENT_BYTES.get(r.dtype, DEFAULT_ELEMENT_BYTES) if is_tensor else 0
            flops, moved, params = node_cost(kind, inputs, output, size)
            sources = [ids[name] for name in _INPUT_NAME.findall(r.input_nodes)]
        except (ValueError, SyntaxError, KeyError, IndexError) as err:
            raise PerfcastError(f"{where}: cannot read node {r.Name!r}: {err}") from None
        rows.append(
            {
                "node_id": i,
                "node_name": r.Name,
                "op": kind,
                "fx_target": str(r.target).split(" at 0x")[0],
                "input_shapes": json.dumps(inputs),
                "output_shape": json.dumps(output),
                "dtype": r.dtype if is_tensor else None,
                "flops": flops,
                "bytes": moved,
                "inputs": json.dumps(sources),
                "params": params,
                "latency_ms": r.latency,
                "fw_latency_ms": r.fw,
                "bw_latency_ms": r.bw,
                "acc_latency_ms": r.acc,
            }
        )
    return pd.DataFrame(rows)


def device_specs(device: str) -> dict[str, float | None]:
    """Spec columns of a device folder name; all missing when NeuSight has no config for it."""
    path = f"{DEVICE_CONFIG_DIR}{device}.json"
    if not any(e.path == path for e in entries(DEVICE_CONFIG_DIR)):
        return dict.fromkeys(("mem_gb", "mem_bw_gbps", "num_sm", "peak_tflops_fp32", "l2_mb"))
    cfg = json.loads(fetch(path).read_text())
    return {
        "mem_gb": cfg["Dev_Mem"] * GB_PER_DEV_MEM,
        "mem_bw_gbps": cfg["Mem_Bw"] * GBPS_PER_MEM_BW,
        "num_sm": float(cfg["Num_Sm"]),
        "peak_tflops_fp32": cfg["SingleFLOPs"] * TFLOPS_PER_GFLOPS,
        "l2_mb": cfg["L2Cache"] * MB_PER_L2CACHE,
    }


def sample_paths() -> list[tuple[str, str]]:
    """(node table, e2e JSON) manifest paths of every sample that has both."""
    paths = {e.path for e in entries(LABEL_DIR)}
    return [
        (p, p[: -len(".csv")] + ".json")
        for p in sorted(paths)
        if p.endswith(".csv") and p[: -len(".csv")] + ".json" in paths
    ]


def load_sample(table_path: str, e2e_path: str) -> pd.DataFrame:
    """One sample from its manifest paths (`label/<device>/<name>.csv` and `.json`)."""
    device = table_path[len(LABEL_DIR) :].split("/")[0]
    return read_sample(fetch(table_path), fetch(e2e_path), device, device_specs(device))


def read_sample(
    table: Path, e2e_json: Path, device: str, specs: dict[str, float | None]
) -> pd.DataFrame:
    """One sample from a NeuSight node table and its e2e JSON on `device` (spec columns
    `specs`); the file name says the model, mode, sequence length and batch size."""
    stem = table.name.removesuffix(".csv")
    match = _SAMPLE_NAME.match(stem)
    if match is None:
        raise PerfcastError(f"{table}: name is not <model>-<train|inf>-<seq>-<batch>")
    e2e = json.loads(e2e_json.read_text())
    nodes = parse_node_table(table)
    num_layers, graph_layers = layer_counts(e2e["num_layer"], nodes["node_name"], table)
    sample = {
        "sample_id": f"{device}/{stem}",
        "model": match["model"],
        "device": device,
        **specs,
        "mode": "train" if match["mode"] == "train" else "inference",
        "batch_size": int(match["batch"]),
        "seq_len": int(match["seq"]),
        "e2e_latency_ms": e2e["e2e_latency"],
        "e2e_fw_latency_ms": e2e["fw_latency"],
        "e2e_bw_latency_ms": e2e["bwall_latency"],
        "num_layers": num_layers,
        "graph_layers": graph_layers,
    }
    return nodes.assign(**sample)[[*sample, *nodes.columns]]


# the outermost numbered layer in a node name: `encoder_block_3_layer_0_...` -> (encoder, 3)
_OUTER_LAYER = re.compile(r"^(.*?)(?:^|_)(?:h|layer|layers|block|blocks)_(\d+)(?:_|$)")


def layer_counts(num_layer: int, node_names: pd.Series, table: Path) -> tuple[int, int]:
    """(num_layers of the model, layers traced in the graph). NeuSight's `num_layer` > 0: the
    graph traces one layer of that many. 0: it traces the whole model (its aggregator then
    repeats nothing), whose layers are counted from the node names."""
    if num_layer > 0:
        return int(num_layer), 1
    layers = {m.groups() for m in map(_OUTER_LAYER.match, node_names.astype(str)) if m}
    if not layers:
        raise PerfcastError(
            f"{table}: num_layer is 0 (the whole model traced) but no node name has a numbered "
            "layer (`..._block_<i>_...`, `..._layer_<i>_...`), so its layer count is unknown"
        )
    return len(layers), len(layers)


def _all_sample_paths() -> list[str]:
    return [e.path for e in entries(PREFIX) if e.path.startswith((LABEL_DIR, DEVICE_CONFIG_DIR))]


@dataset(
    "neusight-graphs",
    "graph",
    description=(
        "torch.fx operator graphs (one transformer layer + embeddings/head) of BERT-large, "
        "GPT-2-large, GPT-3 XL/2.7B and OPT-1.3B, train and inference, with measured per-op "
        "and whole-model latency on 10 NVIDIA/AMD GPUs"
    ),
    source="NeuSight (ASPLOS'25), github.com/sitar-lab/NeuSight",
    files=_all_sample_paths(),
)
def neusight_graphs() -> pd.DataFrame:
    return pd.concat([load_sample(t, j) for t, j in sample_paths()], ignore_index=True)

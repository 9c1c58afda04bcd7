"""Contract rows from the model zoo: `scaling` rows from profiled steps and `graph` samples
from traced DAGs. The CLI and the measured-dataset script build on these."""

from __future__ import annotations

import math
import socket
import statistics
import time
from typing import Any

import pandas as pd
import psutil
import torch

from perfcast.features.profiling import dag, zoo
from perfcast.features.profiling.step_profiler import (
    StepProfile,
    device_name,
    profile_step,
    resolve_device,
)


def source_tag() -> str:
    return f"measured:{socket.gethostname()}"


def forward_gflops_per_sample(zoo_spec: zoo.ZooSpec, *, batch_size: int = 2) -> float:
    """Forward-pass GFLOPs per sample, from the model's traced DAG."""
    built = zoo.build(zoo_spec)
    inputs, _ = built.make_batch(batch_size)
    graph = dag.to_digraph(dag.trace(built.model, inputs))
    return dag.total_flops(graph) / batch_size / 1e9


def profile_zoo(
    zoo_spec: zoo.ZooSpec, batch_size: int, *, device: str, warmup: int, steps: int
) -> StepProfile:
    dev = resolve_device(device)
    built = zoo.build(zoo_spec)
    model = built.model.to(dev)
    optimizer = torch.optim.Adam(model.parameters())
    return profile_step(
        model,
        optimizer,
        lambda: built.make_batch(batch_size),
        loss_fn=built.loss_fn,
        device=dev,
        warmup=warmup,
        steps=steps,
    )


def scaling_row(
    zoo_spec: zoo.ZooSpec, result: StepProfile, gflops_per_sample: float
) -> dict[str, Any]:
    """One contract `scaling` row (single device, data parallelism of 1)."""
    return {
        "job": zoo_spec.job,
        "gpu_type": result.device,
        "num_nodes": 1,
        "num_gpus": 1,
        "local_batch_size": result.batch_size,
        "amp": False,
        "step_time_s": result.step_time_s,
        "source": source_tag(),
        "model": zoo_spec.name,
        "model_family": zoo_spec.family,
        "width": zoo_spec.width,
        "depth": zoo_spec.depth,
        "input_size": zoo_spec.input_size,
        "steps": len(result.step_times_s),
        "cpu_threads": torch.get_num_threads(),
        "params_m": result.params_m,
        "gflops_per_sample": gflops_per_sample,
    } | {k: v for k, v in result.as_row().items() if k not in {"device", "batch_size"}}


def device_specs(dev: torch.device) -> dict[str, float]:
    """The graph contract's device columns; what cannot be read here stays missing."""
    nan = math.nan
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        l2 = getattr(props, "L2_cache_size", 0)
        return {
            "mem_gb": props.total_memory / 2**30,
            "mem_bw_gbps": nan,
            "num_sm": float(props.multi_processor_count),
            "peak_tflops_fp32": nan,
            "l2_mb": l2 / 2**20 if l2 else nan,
        }
    return {
        "mem_gb": psutil.virtual_memory().total / 2**30,
        "mem_bw_gbps": nan,
        "num_sm": nan,
        "peak_tflops_fp32": nan,
        "l2_mb": nan,
    }


def _forward_latency_ms(model: torch.nn.Module, inputs: torch.Tensor, steps: int) -> float:
    cuda = inputs.is_cuda
    times = []
    with torch.no_grad():
        for i in range(steps + 2):  # two warm-up passes
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(inputs)
            if cuda:
                torch.cuda.synchronize()
            if i >= 2:
                times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def graph_sample(
    zoo_spec: zoo.ZooSpec,
    batch_size: int,
    *,
    device: str = "cpu",
    mode: str = "train",
    steps: int = 10,
    node_latency: bool = False,
) -> pd.DataFrame:
    """One contract `graph` sample: the model's forward DAG on `device`, with the measured
    end-to-end latency of a training step (`train`) or of a forward pass (`inference`)."""
    dev = resolve_device(device)
    built = zoo.build(zoo_spec)
    model = built.model.to(dev)
    inputs, _ = built.make_batch(batch_size)
    inputs = inputs.to(dev)
    gm = dag.trace(model, inputs)
    graph = dag.to_digraph(gm)
    if node_latency:
        gm.train(mode == "train")
        dag.measure_node_latency(gm, graph, inputs)
    if mode == "train":
        profiled = profile_zoo(zoo_spec, batch_size, device=device, warmup=2, steps=steps)
        e2e = 1000 * profiled.step_time_s
    else:
        model.eval()
        e2e = _forward_latency_ms(model, inputs, steps)
    name = device_name(dev)
    sample = {
        "sample_id": f"{zoo_spec.job}-{mode}-b{batch_size}-{name.replace(' ', '_')}",
        "model": zoo_spec.job,
        "device": name,
        **device_specs(dev),
        "mode": mode,
        "batch_size": batch_size,
        "seq_len": zoo_spec.seq_len,
        "e2e_latency_ms": e2e,
        "source": source_tag(),
    }
    table = dag.graph_table(graph, sample)
    table["seq_len"] = table["seq_len"].astype("Int64")
    return table

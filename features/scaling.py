"""What the `scaling` task knows of a job before it has been measured: the bytes its gradient
synchronization moves (its parameter count, fp32 gradients as data-parallel frameworks
all-reduce them). The throughput model itself is `predictor.throughput`."""

from __future__ import annotations

import numpy as np
import pandas as pd

BYTES_PER_PARAM = 4  # fp32 gradients

# Parameters (millions) of the models the shipped datasets name, for the gradient bytes of a
# job whose synchronization was never measured (a row's own `params_m` wins). Counts of the
# reference implementations: torchvision (resnet18/50, vgg16/19, shufflenet_v2_x1_0), the
# CIFAR ResNet-18 (kuangliu/pytorch-cifar), BERT-base, GPT-2 small, YOLOv3 (Darknet-53),
# CycleGAN (two ResNet-9 generators, two PatchGAN discriminators), the Nature-DQN CNN (dqn,
# a2c). Models whose size the datasets leave open (deepspeech2, ncf, lstm, ...) are absent.
MODEL_PARAMS_M: dict[str, float] = {
    "resnet18": 11.69,
    "resnet18-cifar10": 11.17,
    "resnet50-imagenet": 25.56,
    "vgg16": 138.36,
    "vgg19": 143.67,
    "shufflenet_v2_x1_0": 2.28,
    "bert": 110.0,
    "bert-squad": 110.0,
    "gpt2": 124.4,
    "yolov3-voc": 61.9,
    "cyclegan-monet2photo": 28.3,
    "dqn": 1.7,
    "a2c": 1.7,
}


def nominal_gradient_bytes(jobs: np.ndarray, params_m: np.ndarray) -> np.ndarray:
    """Parameters x 4 bytes per row: the row's `params_m` where positive, else
    MODEL_PARAMS_M of its job; NaN where neither is known."""
    if len(jobs) <= 64:  # a few rows: no pandas call
        names = list(dict.fromkeys(jobs))
        codes = np.array([names.index(job) for job in jobs], dtype=np.int64)
    else:  # 10^5 candidates, a few jobs
        codes, names = pd.factorize(np.asarray(jobs, dtype=object))
    known = np.array([MODEL_PARAMS_M.get(job, np.nan) for job in names], dtype=float)[codes]
    params = np.where(np.asarray(params_m, dtype=float) > 0, params_m, known)
    return params * 1e6 * BYTES_PER_PARAM

"""How many parameters each model the shipped datasets name has: the one home of that fact, read
by the scaling features (gradient bytes all-reduced per step) and by the simulator's memory
estimate (weights, gradients and optimizer state).

`PARAMS_M` holds the counts of the reference implementations: torchvision (resnet18/50,
vgg16/19, shufflenet_v2_x1_0), the CIFAR ResNet-18 (kuangliu/pytorch-cifar), BERT-base, GPT-2
small, YOLOv3 (Darknet-53), CycleGAN (two ResNet-9 generators, two PatchGAN discriminators), the
Nature-DQN CNN (dqn, a2c). `ROUGH_PARAMS_M` holds sizes the datasets leave open (which
DeepSpeech2, which LSTM): a typical configuration's size, good for a memory estimate (+-2x) but
not trusted for gradient bytes, which use `PARAMS_M` only.
"""

from __future__ import annotations

PARAMS_M: dict[str, float] = {
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

ROUGH_PARAMS_M: dict[str, float] = {
    "deepspeech2-arctic": 26.0,
    "ncf-movielens": 5.0,
    "a3c-pong": 1.0,
    "autoencoder-ml20m": 20.0,
    "lstm-wikitext2": 66.0,
    "transformer-multi30k": 52.0,
}


def params_m(job: str, *, rough: bool = False) -> float | None:
    """Millions of parameters of `job`, None when unknown (`rough`: accept a typical size)."""
    found = PARAMS_M.get(job)
    if found is None and rough:
        found = ROUGH_PARAMS_M.get(job)
    return found

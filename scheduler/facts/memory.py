"""GPU memory of simulated job types, split as Salus does (persistent: weights, gradients and
optimizer state; ephemeral: the activations of one mini-batch), so Gandiva can check Salus's
condition before packing two jobs on one GPU.

Measured where the data has it: a job type with a device-memory figure in the interference
tables (`a_mem_mb`) uses it, as its total (counted as persistent, which is the stricter
reading). None of the shipped GPU tables records memory for the simulated types, so the others
use an ESTIMATE from model size, never reported as measured:

- persistent = parameters x 16 bytes (fp32 weights and gradients plus Adam's two moments; SGD
  with momentum needs 12) + 400 MB of CUDA context and workspace;
- ephemeral = activations per sample x local batch, the per-sample figures below, worked out
  from each model's layer shapes at its usual input (fp32, everything autograd keeps for the
  backward pass), rounded; read them as +-2x.

The parameter counts come from `features.model_sizes` (reference sizes, else a typical
configuration's); the activation figures were checked
against this repository's own profiler where it measured a scaled-down variant
(datasets/measured/cpu/zoo_scaling.csv: resnet18 at width 32 on 32 px images saves 2.25 MB
per sample, twice that at the full width 64 is the 4.5 MB used for resnet18-cifar10).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from perfcast.features.model_sizes import params_m
from perfcast.scheduler.facts.catalog import InterferenceCatalog

TRAINING_BYTES_PER_PARAM = 16  # fp32 weights, gradients and Adam's two moments
CONTEXT_MB = 400.0


@dataclass(frozen=True, slots=True)
class JobMemory:
    persistent_mb: float
    ephemeral_mb: float
    measured: bool  # False: the model-size estimate below

    @property
    def total_mb(self) -> float:
        return self.persistent_mb + self.ephemeral_mb


# job type -> (activation MB per sample, the input the figure assumes)
ACTIVATIONS: dict[str, tuple[float, str]] = {
    # Muri's job types
    "resnet18": (40.0, "ImageNet 224 px"),
    "vgg16": (120.0, "ImageNet 224 px"),
    "vgg19": (130.0, "ImageNet 224 px"),
    "shufflenet_v2_x1_0": (25.0, "ImageNet 224 px"),
    "bert": (110.0, "BERT-base, 128 tokens"),
    "gpt2": (500.0, "GPT-2 small, 256 tokens"),
    "a2c": (0.5, "Atari 4x84x84, Nature CNN"),
    "dqn": (0.5, "Atari 4x84x84, Nature CNN"),
    # the Pollux artifact's applications
    "resnet18-cifar10": (4.5, "CIFAR-10 32 px"),
    "resnet50-imagenet": (100.0, "ImageNet 224 px"),
    "bert-squad": (450.0, "BERT-base, 384 tokens"),
    "deepspeech2-arctic": (150.0, "spectrograms of a few seconds"),
    "yolov3-voc": (250.0, "416 px"),
    "ncf-movielens": (0.002, "one user-item pair"),
    # Gavel's job types
    "a3c-pong": (0.5, "Atari 4x84x84"),
    "autoencoder-ml20m": (0.5, "one user's ratings vector"),
    "cyclegan-monet2photo": (300.0, "256 px, two generators and discriminators"),
    "lstm-wikitext2": (2.0, "35 tokens, 2 layers of 1,500"),
    "transformer-multi30k": (20.0, "a sentence pair of ~30 tokens"),
}


def estimated_memory(job_type: str, local_batch: int) -> JobMemory | None:
    """The model-size estimate of a job type's memory at `local_batch`, None if not listed."""
    entry, size = ACTIVATIONS.get(job_type), params_m(job_type, rough=True)
    if entry is None or size is None:
        return None
    persistent = size * 1e6 * TRAINING_BYTES_PER_PARAM / 2**20 + CONTEXT_MB
    return JobMemory(persistent, entry[0] * max(local_batch, 1), measured=False)


MemoryModel = Callable[[str, int], JobMemory | None]


def memory_model(interference: InterferenceCatalog) -> MemoryModel:
    """Each job type's memory at a local batch: measured (the interference tables' figure) where
    there is one, else the estimate."""

    def memory(job_type: str, local_batch: int) -> JobMemory | None:
        measured = interference.memory_mb(job_type, local_batch) if interference else None
        if measured is not None:
            return JobMemory(measured, 0.0, measured=True)
        return estimated_memory(job_type, local_batch)

    return memory

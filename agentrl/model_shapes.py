"""Randomly initialised models of real shapes, and whether a training run of a model fits this machine.

What this is: `SHAPES`, Llama-architecture shapes of published models (SmolLM2-360M, SmolLM2-1.7B) for
systems checks where only the 135M model's weights are here (`model.random_shape=smollm2-360m` builds that
shape with random weights and `model.name`'s tokenizer, whose vocabulary the shapes share); `parameters`
of a shape; and `training_bytes` / `check_fits`, the estimate a run is refused with, before anything loads,
when it cannot fit: weights in their dtype, and for each trainable parameter an fp32 gradient and Adam's two
fp32 moments (16 bytes a parameter in all for full fine-tuning in fp32), times a margin for activations,
the engine's cache and the process (`ACTIVATION_MARGIN`, a guess, said so in the error).

What this is not: a download (nothing leaves this machine), a model zoo, or a measurement: bench/memory.py
measures steps (docs/memory.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agentrl.errors import ConfigError


@dataclass(frozen=True)
class Shape:
    """A Llama decoder's dimensions (tied input and output embeddings)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int = 49152
    max_positions: int = 8192


SHAPES: dict[str, Shape] = {
    "smollm2-135m": Shape(hidden=576, layers=30, heads=9, kv_heads=3, intermediate=1536),
    "smollm2-360m": Shape(hidden=960, layers=32, heads=15, kv_heads=5, intermediate=2560),
    "smollm2-1.7b": Shape(hidden=2048, layers=24, heads=32, kv_heads=32, intermediate=8192),
}
"""SmolLM2's published configs (HuggingFaceTB/SmolLM2-*-Instruct config.json), vocabulary 49,152."""

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
ACTIVATION_MARGIN = 1.5  # the step's activations, the engine's KV cache and the process, over the state


def parameters(shape: Shape) -> int:
    """Parameters of `shape`: embeddings (tied), per layer attention, MLP and two norms, the final norm."""
    head_dim = shape.hidden // shape.heads
    attention = shape.hidden * head_dim * (shape.heads * 2 + shape.kv_heads * 2)
    mlp = 3 * shape.hidden * shape.intermediate
    per_layer = attention + mlp + 2 * shape.hidden
    return shape.vocab * shape.hidden + shape.layers * per_layer + shape.hidden


def lora_parameters(shape: Shape, rank: int, modules: int = 2) -> int:
    """Trainable parameters of rank-`rank` adapters on `modules` square-ish projections per layer."""
    return shape.layers * modules * rank * 2 * shape.hidden


def training_bytes(shape: Shape, dtype: str, lora_rank: int = 0) -> int:
    """Bytes a training run of `shape` holds at least, before the margin: the weights in `dtype`, and for
    each trainable parameter an fp32 gradient and two fp32 Adam moments (12 bytes)."""
    total = parameters(shape)
    trainable = lora_parameters(shape, lora_rank) if lora_rank else total
    return total * DTYPE_BYTES[dtype] + trainable * 12


def available_bytes() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_fits(name: str, shape: Shape, dtype: str, lora_rank: int, available: int | None) -> None:
    """Refuse, before anything loads, a training run whose estimate (state times `ACTIVATION_MARGIN`) is
    more than `available` bytes, with the estimate and what would fit."""
    if available is None:
        return
    need = int(training_bytes(shape, dtype, lora_rank) * ACTIVATION_MARGIN)
    if need <= available:
        return
    gib = 1024**3
    lora = training_bytes(shape, "bfloat16", 16) * ACTIVATION_MARGIN
    how = f"LoRA rank {lora_rank}" if lora_rank else "full fine-tuning"
    raise ConfigError(
        f"model {name} ({parameters(shape) / 1e9:.2f}B parameters, {dtype}, {how}) needs about "
        f"{need / gib:.1f} GiB to train (weights, fp32 gradients and Adam moments, x{ACTIVATION_MARGIN} for "
        f"activations and the rest: an estimate), and {available / gib:.1f} GiB is available. Try "
        f"model.lora.rank=16 model.dtype=bfloat16 (about {lora / gib:.1f} GiB) or a machine with more memory"
    )


def random_shape(name: str) -> Shape:
    """The shape `model.random_shape` names (a `ConfigError` naming the known ones otherwise)."""
    if name not in SHAPES:
        raise ConfigError(f"model.random_shape={name!r} is unknown; use one of {', '.join(SHAPES)}")
    return SHAPES[name]

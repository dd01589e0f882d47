"""Workarounds for differences between transformers versions (4.x and 5) and peft wrappers, in one place.

What this is: small lookups the shared-prefix forward needs, each naming the version difference it hides:
the model under a peft wrapper, the KV-cache argument's name, the last-position-only logits argument, a
DynamicCache's tensors, whether activation checkpointing is on, and turning it on. What this is not: a
general adapter layer; code that does not touch these differences calls transformers directly.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch


def transformers_model(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under a peft wrapper (or `model` itself)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def cache_keyword(model: torch.nn.Module) -> str:
    """The forward's KV-cache argument and output: `cache` since transformers 5 renamed it, else
    `past_key_values`."""
    parameters = inspect.signature(type(transformers_model(model)).forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def only_last_logits(model: torch.nn.Module) -> dict[str, int]:
    """The forward argument that projects only the last position onto the vocabulary (for a shared prefix
    whose own logits are not needed: no member trains a token in it), where the model has it."""
    parameters = inspect.signature(type(transformers_model(model)).forward).parameters
    return {name: 1 for name in ("logits_to_keep", "num_logits_to_keep") if name in parameters}


def cache_tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) per layer, each [1, kv_heads, K, head_dim], of a transformers DynamicCache."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [(layer.keys, layer.values) for layer in layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))


def activation_checkpointing(model: torch.nn.Module) -> bool:
    """Whether the model recomputes activations (transformers 5 renamed is_gradient_checkpointing)."""
    value = getattr(model, "is_activation_checkpointing", None)
    if value is None:
        value = getattr(model, "is_gradient_checkpointing", False)
    return bool(value() if callable(value) else value)


def enable_activation_checkpointing(model: torch.nn.Module) -> None:
    """Recompute each decoder layer's activations in the backward pass instead of keeping them
    (`update.activation_checkpointing`): transformers' own switch on the model under a peft wrapper,
    non-reentrant (no input that requires a gradient is needed, so frozen embeddings under LoRA work)."""
    base = transformers_model(model)
    renamed = getattr(base, "activation_checkpointing_enable", None)  # transformers 5's name
    if callable(renamed):
        renamed(activation_checkpointing_kwargs={"use_reentrant": False})
        return
    enable = getattr(base, "gradient_checkpointing_enable", None)
    if not callable(enable):
        raise TypeError(
            f"{type(base).__name__} has no gradient_checkpointing_enable: not a transformers model"
        )
    enable(gradient_checkpointing_kwargs={"use_reentrant": False})

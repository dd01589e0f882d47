"""Recomputing each decoder layer's MLP in the backward pass (`update.recompute_mlp`), a cheaper cousin of
full activation checkpointing.

What this is: `recompute_mlps`, which wraps every decoder MLP's `forward` in non-reentrant
`torch.utils.checkpoint`, so that the MLP's inner tensors (the gate and up projections, the activation and
their product: about three fifths of a Llama layer's saved activations) are recomputed from the MLP's input
during the backward pass instead of kept. Attention and its KV cache are untouched, so, unlike
`update.activation_checkpointing` (which turns the cache off), the shared-prefix update still runs. Only a
pass that builds a graph recomputes: sampling under `no_grad` runs each MLP once. The wrapping is in place,
so parameter names, the state dict and the engine's weight sync are unchanged.

What this is not: selective per-layer policies, or anything for attention (its saved tensors stay).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from agentrl.trainer.transformers_compat import transformers_model

MARK = "_agentrl_recomputed"


def recompute_mlps(model: torch.nn.Module) -> int:
    """Wrap each decoder MLP (`*.mlp`) of `model` (under a peft wrapper too) not wrapped yet; returns how
    many it wrapped. A model with no decoder MLP at all is refused."""
    base = transformers_model(model)
    mlps = [module for name, module in base.named_modules() if name.endswith(".mlp")]
    if not mlps:
        raise TypeError(f"{type(base).__name__} has no decoder MLP (`*.mlp`) to recompute")
    fresh = [module for module in mlps if not getattr(module, MARK, False)]
    for module in fresh:
        module.forward = recomputed(module.forward)
        setattr(module, MARK, True)
    return len(fresh)


def recomputed(forward: Any) -> Any:
    """`forward`, run under non-reentrant checkpointing whenever autograd records the pass."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled():
            return checkpoint(forward, *args, use_reentrant=False, **kwargs)
        return forward(*args, **kwargs)

    return wrapped

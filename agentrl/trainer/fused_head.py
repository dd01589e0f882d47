"""The output head fused with the sampled tokens' log-probs: no [B, L, vocab] logits in the update.

What this is: `hidden_states_only(model)`, a context in which the causal LM's forward returns its last
hidden states where it returned logits (its output projection swapped for the identity, the projection's
weight handed back), and `head_token_logprobs(hidden, weight, ids, temperature)`, which gives what
`losses.sampled_token_logprobs` gives of `hidden @ weight.T`, a chunk of positions at a time. Its backward
pass recomputes each chunk's logits, turns them into their gradient in place and multiplies it straight
into the gradients of the hidden states and of the weight, so neither the logits nor their gradient
(each [B, L, 49k] fp32 for SmolLM2: 1.2 GB for four rows of 1,500 tokens) is ever whole in memory. The
price is the head's forward matmul once more in the backward pass.

`update.fused_head` turns it on (`fused_head_where_supported`). It needs a bias-free `nn.Linear` output
head reached through `transformers_compat.transformers_model` (Llama-family models, peft adapters on the
layers below it) and one process: under FSDP2 the head's weight is a shard outside its module's forward
(`fused_head_unsupported` says why, and the update falls back to whole logits).

What this is not: the loss (`losses.py`), or a kernel: the chunks are torch matmuls.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from agentrl.trainer.configs import UpdateConfig
from agentrl.trainer.losses import chunk_gradient, chunk_statistics, row_chunks
from agentrl.trainer.transformers_compat import transformers_model

LOG = logging.getLogger(__name__)


def fused_head_unsupported(model: torch.nn.Module, world_size: int) -> str | None:
    """Why `hidden_states_only` cannot run on `model` with `world_size` processes, or None when it can."""
    if world_size > 1:
        return "several processes: under FSDP2 the head's weight is a shard outside its module's forward"
    head = _output_head(model)
    if not isinstance(head, torch.nn.Linear) or head.bias is not None:
        return f"the output head is {type(head).__name__}, not a bias-free nn.Linear"
    return None


@contextlib.contextmanager
def hidden_states_only(model: torch.nn.Module) -> Iterator[torch.Tensor]:
    """Within: `model(...).logits` are the [B, L, hidden] states the head would project; yields the head's
    [vocab, hidden] weight. The head is put back on exit (the backward pass needs only the weight)."""
    base: Any = transformers_model(model)  # a transformers PreTrainedModel
    head = base.get_output_embeddings()
    base.set_output_embeddings(torch.nn.Identity())
    try:
        yield head.weight
    finally:
        base.set_output_embeddings(head)


def head_token_logprobs(
    hidden: torch.Tensor, weight: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, L, H] hidden states, [V, H] head weight, [B, L] ids -> ([B, L] log-probs, [B, L] entropies) of
    the logits `hidden @ weight.T` / temperature, aligned as `losses.sampled_token_logprobs` (0 at position
    0) and equal to it to float32 rounding; both carry a gradient to `hidden` and `weight`."""
    logprobs, entropy = _HeadLogprobs.apply(hidden, weight, input_ids, temperature)
    return logprobs, entropy


class _HeadLogprobs(torch.autograd.Function):
    """`losses._SampledLogprobs` with the head's matmul inside each chunk (see its docstring for the
    derivatives): dL/dh = dL/dz W and dL/dW = sum over chunks of dL/dz^T h."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, input_ids: torch.Tensor, temperature: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch, length, _ = hidden.shape
        logprobs, entropy, lse = (hidden.new_zeros((batch, length), dtype=torch.float32) for _ in range(3))
        divisor = max(temperature, 1e-6)
        for row, start, stop in row_chunks(batch, length):
            scores = _chunk_logits(hidden, weight, row, start, stop)
            if temperature != 1.0:
                scores = scores / divisor
            stats = chunk_statistics(scores, input_ids[row, start:stop])
            logprobs[row, start:stop], entropy[row, start:stop], lse[row, start:stop] = stats
        ctx.save_for_backward(hidden, weight, input_ids, lse, lse - entropy)
        ctx.temperature = temperature
        ctx.set_materialize_grads(False)
        return logprobs, entropy

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_logprobs: torch.Tensor | None, grad_entropy: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None]:
        hidden, weight, input_ids, lse, expected_score = ctx.saved_tensors
        if grad_logprobs is None and grad_entropy is None:
            return None, None, None, None
        divisor = max(ctx.temperature, 1e-6) if ctx.temperature != 1.0 else None
        batch, length, _ = hidden.shape
        grad_hidden = torch.zeros_like(hidden)
        grad_weight = torch.zeros_like(weight, dtype=torch.float32)
        for row, start, stop in row_chunks(batch, length):
            chunk = _chunk_logits(hidden, weight, row, start, stop)
            upstreams = (grad_logprobs, grad_entropy)
            where = (row, start, stop)
            grad = chunk_gradient(chunk, divisor, where, input_ids, lse, expected_score, upstreams)
            states = hidden[row, start - 1 : stop - 1]
            grad_hidden[row, start - 1 : stop - 1] = (grad @ weight.float()).to(hidden.dtype)
            grad_weight.addmm_(grad.t(), states.float())  # [V, n] x [n, H]
        return grad_hidden, grad_weight.to(weight.dtype), None, None


def _chunk_logits(
    hidden: torch.Tensor, weight: torch.Tensor, row: int, start: int, stop: int
) -> torch.Tensor:
    """[n, V] fp32 logits of positions start-1..stop-2 of `row` (those predicting tokens start..stop-1)."""
    return (hidden[row, start - 1 : stop - 1].to(weight.dtype) @ weight.t()).float()


def fused_head_where_supported(
    update_cfg: UpdateConfig, models: Sequence[torch.nn.Module | None], world_size: int
) -> UpdateConfig:
    """`update_cfg` with `fused_head` off where it cannot run on one of `models` (the reason logged once)."""
    if not update_cfg.fused_head:
        return update_cfg
    reasons = (fused_head_unsupported(model, world_size) for model in models if model is not None)
    reason = next((why for why in reasons if why is not None), None)
    if reason is None:
        return update_cfg
    _log_once(f"update.fused_head: projecting whole logits: {reason}")
    return dataclasses.replace(update_cfg, fused_head=False)


@functools.cache
def _log_once(message: str) -> None:
    LOG.warning(message)


def _output_head(model: torch.nn.Module) -> torch.nn.Module | None:
    base: Any = transformers_model(model)
    getter = getattr(base, "get_output_embeddings", None)
    return getter() if callable(getter) else None

"""`update.activation_checkpointing` and `update.recompute_mlp`. The first switch turns transformers'
recomputation on for the trained model (under a peft wrapper too), gives the same loss and gradients as
keeping the activations, and turns the shared-prefix update off with its reason (it needs the KV cache that
checkpointing turns off). The second recomputes only the MLPs: the same loss and gradients, the shared-prefix
update still on.

What this is not: a measurement of the memory it saves (bench/ measures that).
"""

from __future__ import annotations

import copy

import pytest
import torch
from tiny_models import tiny_llama

from agentrl.trainer.losses import sampled_token_logprobs
from agentrl.trainer.recompute import recompute_mlps
from agentrl.trainer.shared_prefix import shared_prefix_unsupported
from agentrl.trainer.transformers_compat import activation_checkpointing, enable_activation_checkpointing


def loss_and_grads(model: torch.nn.Module, ids: torch.Tensor) -> tuple[float, list[torch.Tensor]]:
    model.train()
    model.zero_grad()
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    logprobs, _ = sampled_token_logprobs(logits, ids, 0.7)
    loss = -logprobs[:, 1:].mean()
    loss.backward()
    return loss.item(), [param.grad.clone() for param in model.parameters() if param.grad is not None]


def test_recomputing_activations_gives_the_same_loss_and_gradients() -> None:
    kept = tiny_llama()
    recomputed = copy.deepcopy(kept)
    assert not activation_checkpointing(recomputed) and shared_prefix_unsupported(recomputed) is None
    enable_activation_checkpointing(recomputed)
    assert activation_checkpointing(recomputed)
    assert "gradient checkpointing" in (shared_prefix_unsupported(recomputed) or "")
    ids = torch.randint(0, kept.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    loss, grads = loss_and_grads(kept, ids)
    loss_again, grads_again = loss_and_grads(recomputed, ids)
    assert loss_again == loss and len(grads) == len(grads_again) > 0
    for expected, got in zip(grads, grads_again, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_the_switch_reaches_the_model_under_a_lora_wrapper() -> None:
    from peft import LoraConfig, get_peft_model

    wrapped = get_peft_model(tiny_llama(), LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    enable_activation_checkpointing(wrapped)
    assert activation_checkpointing(wrapped.get_base_model())
    ids = torch.randint(0, 100, (1, 16), generator=torch.Generator().manual_seed(1))
    _, grads = loss_and_grads(wrapped, ids)
    assert grads and all(
        torch.isfinite(grad).all() for grad in grads
    )  # non-reentrant: frozen inputs are fine


def test_recomputing_the_mlps_gives_the_same_loss_and_gradients_and_keeps_the_shared_prefix() -> None:
    kept = tiny_llama()
    recomputed = copy.deepcopy(kept)
    assert recompute_mlps(recomputed) == 2 and recompute_mlps(recomputed) == 0  # one per layer, once
    assert shared_prefix_unsupported(recomputed) is None  # attention and its cache are untouched
    assert recomputed.state_dict().keys() == kept.state_dict().keys()
    calls = []
    recomputed.model.layers[0].mlp.gate_proj.register_forward_hook(lambda *_: calls.append(1))
    ids = torch.randint(0, kept.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    loss, grads = loss_and_grads(kept, ids)
    loss_again, grads_again = loss_and_grads(recomputed, ids)
    assert len(calls) == 2  # the forward, then its recomputation in the backward pass
    assert loss_again == loss and len(grads) == len(grads_again) > 0
    for expected, got in zip(grads, grads_again, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        recomputed(input_ids=ids)
    assert len(calls) == 3  # sampling builds no graph: the MLP runs once


def test_a_model_without_decoder_mlps_is_refused() -> None:
    with pytest.raises(TypeError, match="no decoder MLP"):
        recompute_mlps(torch.nn.Sequential(torch.nn.Linear(2, 2)))

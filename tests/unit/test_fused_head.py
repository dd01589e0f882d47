"""`update.fused_head`'s log-probs: `head_token_logprobs(h, W, ids, T)` equals `sampled_token_logprobs(h W^T,
ids, T)` in values and in the gradients of h and W (across chunk boundaries, with and without the entropy
bonus's gradient, in bf16 hidden states from autocast), and the switch falls back where it cannot run.
The whole update with it on is compared with it off in tests/integration/test_shared_prefix.py.

What this is not: a measurement of the memory it saves (bench/memory.py measures that).
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_llama

from agentrl.trainer.fused_head import fused_head_unsupported, head_token_logprobs, hidden_states_only
from agentrl.trainer.losses import LOGPROB_CHUNK_ROWS, sampled_token_logprobs

VOCAB, HIDDEN = 97, 16


def inputs(length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(length)
    hidden = torch.randn(2, length, HIDDEN, generator=generator, requires_grad=True)
    weight = torch.randn(VOCAB, HIDDEN, generator=generator, requires_grad=True)
    ids = torch.randint(0, VOCAB, (2, length), generator=generator)
    return hidden, weight, ids


def values_and_grads(
    fused: bool, temperature: float, entropy_grad: bool, length: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    hidden, weight, ids = inputs(length)
    if fused:
        logprobs, entropy = head_token_logprobs(hidden, weight, ids, temperature)
    else:
        logprobs, entropy = sampled_token_logprobs(hidden @ weight.t(), ids, temperature)
    upstream = torch.linspace(-1.0, 1.0, logprobs.numel()).view_as(logprobs)
    loss = (logprobs * upstream).sum() + (0.3 * entropy.sum() if entropy_grad else 0.0)
    loss.backward()
    assert hidden.grad is not None and weight.grad is not None
    return logprobs.detach(), entropy.detach(), hidden.grad, weight.grad


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("entropy_grad", [False, True])
def test_fused_log_probs_and_gradients_equal_the_whole_logits_ones(
    temperature: float, entropy_grad: bool
) -> None:
    length = 2 * LOGPROB_CHUNK_ROWS + 37  # three chunks per row, the last one short
    fused = values_and_grads(True, temperature, entropy_grad, length)
    whole = values_and_grads(False, temperature, entropy_grad, length)
    for got, expected in zip(fused, whole, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert bool((fused[0][:, 0] == 0).all()) and bool((fused[0][:, 1:] < 0).all())


def test_bf16_hidden_states_from_autocast_meet_an_fp32_head() -> None:
    hidden, weight, ids = inputs(40)
    low = hidden.detach().bfloat16().requires_grad_()
    logprobs, _ = head_token_logprobs(low, weight, ids)
    logprobs.sum().backward()
    expected, _ = sampled_token_logprobs(low.float() @ weight.t(), ids)
    torch.testing.assert_close(logprobs, expected, rtol=1e-5, atol=1e-5)
    assert low.grad is not None and low.grad.dtype == torch.bfloat16 and weight.grad is not None


def test_the_model_returns_hidden_states_inside_and_its_head_after() -> None:
    model = tiny_llama()
    head = model.get_output_embeddings()
    ids = torch.randint(0, model.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        logits = model(input_ids=ids).logits
        with hidden_states_only(model) as weight:
            states = model(input_ids=ids).logits
        assert weight is head.weight and states.shape[-1] == model.config.hidden_size
        torch.testing.assert_close(states @ weight.t(), logits, rtol=1e-5, atol=1e-5)
    assert model.get_output_embeddings() is head


def test_the_switch_says_why_it_cannot_run() -> None:
    model = tiny_llama()
    assert fused_head_unsupported(model, 1) is None
    assert "FSDP2" in (fused_head_unsupported(model, 2) or "")
    model.lm_head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=True)
    assert "bias-free" in (fused_head_unsupported(model, 1) or "")

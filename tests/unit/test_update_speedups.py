"""The update's speed changes keep its numbers: the fused AdamW `make_optimizer` builds steps like torch's
default per-tensor AdamW to float32 rounding, skipping the division by a temperature of 1 is exact, and the
chunked log-probs of the sampled tokens equal the full-vocabulary computation, gradients included."""

from __future__ import annotations

import pytest
import torch

from agentrl.trainer import losses
from agentrl.trainer.configs import OptimConfig
from agentrl.trainer.losses import sampled_token_logprobs, scaled_logits, token_entropy, token_logprobs
from agentrl.trainer.optim import make_optimizer


def trained_weights(fused: bool) -> torch.Tensor:
    """Weights of a small MLP after 5 AdamW steps with weight decay and a warm-up schedule."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 64))
    config = OptimConfig(lr=1e-3, weight_decay=0.01, warmup_steps=3)
    optimizer, scheduler = make_optimizer(model, config)
    if not fused:
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 3))
    generator = torch.Generator().manual_seed(1)
    for _ in range(5):
        optimizer.zero_grad()
        model(torch.randn(8, 64, generator=generator)).pow(2).mean().backward()
        optimizer.step()
        scheduler.step()
    return torch.cat([param.detach().flatten() for param in model.parameters()])


def test_the_optimizer_is_fused_on_cpu_and_steps_like_the_default_adamw() -> None:
    optimizer, _ = make_optimizer(torch.nn.Linear(4, 4), OptimConfig())
    assert optimizer.defaults["fused"] is True
    fused, default = trained_weights(fused=True), trained_weights(fused=False)
    torch.manual_seed(0)
    initial = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 64))
    start = torch.cat([param.detach().flatten() for param in initial.parameters()])
    assert (fused - start).abs().max() > 1e-3  # the steps moved the weights
    assert torch.allclose(fused, default, atol=1e-7, rtol=1e-6)


def test_temperature_one_skips_the_division_exactly() -> None:
    logits = torch.randn(2, 5, 11).bfloat16()
    assert torch.equal(scaled_logits(logits, 1.0), logits.float() / 1.0)
    assert scaled_logits(logits, 1.0).dtype == torch.float32
    assert torch.equal(scaled_logits(logits, 0.7), logits.float() / 0.7)
    assert torch.equal(scaled_logits(logits, 0.0), logits.float() / 1e-6)


@pytest.mark.parametrize(
    ("dtype", "temperature"), [(torch.float32, 1.0), (torch.bfloat16, 1.0), (torch.bfloat16, 0.7)]
)
def test_chunked_sampled_logprobs_equal_the_full_vocabulary_computation(
    dtype: torch.dtype, temperature: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(losses, "LOGPROB_CHUNK_ROWS", 32)  # several chunks per row, and a ragged last one
    generator = torch.Generator().manual_seed(0)
    raw = (3 * torch.randn(3, 150, 1000, generator=generator)).to(dtype)
    ids = torch.randint(0, 1000, (3, 150), generator=generator)
    upstream = torch.randn(3, 150, generator=generator)
    full = raw.clone().requires_grad_(True)
    expected = token_logprobs(scaled_logits(full, temperature), ids)
    (expected * upstream).sum().backward()
    chunked = raw.clone().requires_grad_(True)
    logprobs, entropy = sampled_token_logprobs(chunked, ids, temperature)
    (logprobs * upstream).sum().backward()
    assert torch.equal(logprobs, expected)
    assert full.grad is not None and chunked.grad is not None
    assert chunked.grad.dtype == dtype and torch.equal(chunked.grad, full.grad)
    expected_entropy = token_entropy(scaled_logits(raw, temperature))
    assert torch.allclose(entropy, expected_entropy, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize(
    ("dtype", "temperature"), [(torch.float32, 1.0), (torch.float32, 0.7), (torch.bfloat16, 0.7)]
)
def test_the_chunked_entropy_bonus_has_the_full_vocabulary_gradient(
    dtype: torch.dtype, temperature: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(losses, "LOGPROB_CHUNK_ROWS", 32)
    generator = torch.Generator().manual_seed(1)
    raw = (3 * torch.randn(2, 90, 800, generator=generator)).to(dtype)
    ids = torch.randint(0, 800, (2, 90), generator=generator)
    up_logprobs, up_entropy = torch.randn(2, 2, 90, generator=generator)
    full = raw.clone().requires_grad_(True)
    scores = scaled_logits(full, temperature)
    (
        (token_logprobs(scores, ids) * up_logprobs).sum() + (token_entropy(scores) * up_entropy).sum()
    ).backward()
    chunked = raw.clone().requires_grad_(True)
    logprobs, entropy = sampled_token_logprobs(chunked, ids, temperature)
    ((logprobs * up_logprobs).sum() + (entropy * up_entropy).sum()).backward()
    assert full.grad is not None and chunked.grad is not None and chunked.grad.dtype == dtype
    # fp32: z - E_p[z] cancels (|z| ~ 15, gradients ~ 1), so 1e-4; bf16: the gradient is rounded to bf16
    tolerance = 1e-4 if dtype == torch.float32 else 2e-2
    assert torch.allclose(chunked.grad.float(), full.grad.float(), atol=tolerance, rtol=tolerance)
    only_entropy = raw.clone().requires_grad_(True)  # the log-probs unused: None upstream, no crash
    (sampled_token_logprobs(only_entropy, ids, temperature)[1] * up_entropy).sum().backward()
    assert only_entropy.grad is not None and torch.isfinite(only_entropy.grad.float()).all()

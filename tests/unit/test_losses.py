"""Losses against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.errors import ConfigError
from agentrl.trainer.configs import AGGREGATIONS, Aggregation, LossConfig
from agentrl.trainer.losses import (
    aggregate,
    aggregation_weight,
    kl_k3,
    policy_loss,
    ppo_clip_loss,
    token_entropy,
    token_logprobs,
)


def test_token_logprobs_alignment() -> None:
    # vocab 2; logits at position t predict token t + 1
    logits = torch.tensor([[[0.0, 0.0], [math.log(3.0), 0.0], [5.0, 5.0]]])
    input_ids = torch.tensor([[1, 0, 0]])
    out = token_logprobs(logits, input_ids)
    assert out.shape == (1, 3)
    assert out[0].tolist() == pytest.approx([0.0, math.log(0.5), math.log(0.75)])


def test_token_entropy_alignment() -> None:
    logits = torch.tensor([[[0.0, 0.0], [100.0, 0.0], [0.0, 0.0]]])
    assert token_entropy(logits)[0].tolist() == pytest.approx([0.0, math.log(2.0), 0.0], abs=1e-6)


def test_ppo_clip_loss_hand_computed() -> None:
    config = LossConfig(clip_low=0.2, clip_high=0.28)
    ratios = torch.tensor([[1.5, 0.5, 1.1, 2.0]])
    advantages = torch.tensor([[1.0, -1.0, 1.0, 1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    loss, metrics = ppo_clip_loss(ratios.log(), torch.zeros(1, 4), advantages, mask, config)
    # token 0: min(1.5, 1.28) = 1.28; token 1: min(-0.5, -0.8) = -0.8; token 2: 1.1; token 3 masked out
    assert loss.item() == pytest.approx(-(1.28 - 0.8 + 1.1) / 3)
    assert metrics["clip_frac"] == pytest.approx(2 / 3)
    assert metrics["ratio_mean"] == pytest.approx((1.5 + 0.5 + 1.1) / 3)
    expected_kl = sum(r - 1 - math.log(r) for r in (1.5, 0.5, 1.1)) / 3
    assert metrics["approx_kl"] == pytest.approx(expected_kl, rel=1e-5)


def test_ppo_clip_loss_gradient_is_zero_where_clipped() -> None:
    logprobs = torch.tensor([[math.log(1.5), math.log(1.1)]], requires_grad=True)
    loss, _ = ppo_clip_loss(logprobs, torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2), LossConfig())
    loss.backward()
    assert logprobs.grad is not None
    assert logprobs.grad[0].tolist() == pytest.approx([0.0, -1.1 / 2])


def test_aggregation_modes() -> None:
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert aggregate(values, mask, "token_mean").item() == pytest.approx(10 / 4)
    assert aggregate(values, mask, "seq_mean_token_mean").item() == pytest.approx((2.0 + 4.0) / 2)
    assert aggregate(values, mask, "constant", constant_normaliser=10.0).item() == pytest.approx(10 / 20)
    assert aggregation_weight(mask, "token_mean") == 4.0
    assert aggregation_weight(mask, "constant") == 2.0


@pytest.mark.parametrize("mode", list(AGGREGATIONS))
def test_weighted_micro_batches_equal_the_whole(mode: Aggregation) -> None:
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [7.0, 1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    whole = aggregate(values, mask, mode, 8.0).item()
    total = aggregation_weight(mask, mode)
    parts = [(values[:1], mask[:1]), (values[1:], mask[1:])]
    summed = sum(
        float(aggregate(v, m, mode, 8.0).item()) * aggregation_weight(m, mode) / total for v, m in parts
    )
    assert summed == pytest.approx(whole)


def test_kl_k3_values_and_clamp() -> None:
    logprobs = torch.tensor([0.0, 0.0, 0.0, -30.0])
    ref = torch.tensor([0.0, math.log(2.0), math.log(0.5), 0.0])
    kl = kl_k3(logprobs, ref)
    assert kl[:3].tolist() == pytest.approx([0.0, 2 - math.log(2) - 1, 0.5 + math.log(2) - 1])
    assert kl[3].item() == 10.0
    assert bool((kl >= 0).all())


def test_policy_loss_adds_kl_and_entropy_terms() -> None:
    config = LossConfig(kl_coef=0.5, entropy_coef=0.1)
    zeros, ones = torch.zeros(1, 2), torch.ones(1, 2)
    ref = torch.full((1, 2), math.log(2.0))
    entropy = torch.tensor([[1.0, 3.0]])
    loss, metrics = policy_loss(zeros, zeros, zeros, ones, config, ref_logprobs=ref, entropy=entropy)
    kl = 2 - math.log(2) - 1
    assert loss.item() == pytest.approx(0.5 * kl - 0.1 * 2.0)
    assert metrics["kl"] == pytest.approx(kl)
    assert metrics["entropy"] == pytest.approx(2.0)
    with pytest.raises(ConfigError, match="reference"):
        policy_loss(zeros, zeros, zeros, ones, config)


def test_unknown_aggregation_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="token_mean"):
        LossConfig(aggregation="sum")  # type: ignore[arg-type]

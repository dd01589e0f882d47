"""ESS of the importance weights pi_trainer / pi_sampler, hand-computed (logged in both modes)."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.trainer.update import _Tally, effective_sample_size, sampler_mismatch


def test_ess_hand_computed() -> None:
    # weights 1, 2, 3, 2 over n = 4 tokens: (sum w)^2 / (n sum w^2) = 64 / (4 * 18) = 8/9
    assert effective_sample_size(8 / 4, 18 / 4) == pytest.approx(8 / 9)
    assert effective_sample_size(1.0, 1.0) == 1.0  # on-policy: every weight is 1
    # one token of n = 4 carries all the weight: ESS = 1/n
    assert effective_sample_size(5 / 4, 25 / 4) == pytest.approx(0.25)
    assert effective_sample_size(0.0, 0.0) == 1.0  # empty batch


def test_sampler_mismatch_moments_cover_sampled_tokens_only() -> None:
    sampler = torch.tensor([[-1.0, -1.0, -1.0, -2.0, -1.0]])
    weights = torch.tensor([[1.0, 2.0, 3.0, 2.0, 7.0]])
    trainer = sampler + torch.log(weights)
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])  # the last token was forced (prompt): no weight
    stats = sampler_mismatch(trainer, sampler, mask)
    assert stats["sampler_weight_mean"] == pytest.approx(2.0)
    assert stats["sampler_weight_sq_mean"] == pytest.approx(4.5)
    assert effective_sample_size(
        stats["sampler_weight_mean"], stats["sampler_weight_sq_mean"]
    ) == pytest.approx(8 / 9)
    assert stats["sampler_abs_log_ratio"] == pytest.approx((math.log(2) * 2 + math.log(3)) / 4)


def test_token_weighted_means_over_micro_batches_give_the_batch_ess() -> None:
    # micro batches of 3 and 1 sampled tokens, merged as ppo_update merges them (weight = token count)
    first = sampler_mismatch(torch.log(torch.tensor([[1.0, 2.0, 3.0]])), torch.zeros(1, 3), torch.ones(1, 3))
    second = sampler_mismatch(
        torch.log(torch.tensor([[2.0, 9.0]])), torch.zeros(1, 2), torch.tensor([[1.0, 0.0]])
    )
    tally = _Tally()
    tally.add(first, weight=3.0)
    tally.add(second, weight=1.0)
    means = tally.means()
    assert effective_sample_size(
        means["sampler_weight_mean"], means["sampler_weight_sq_mean"]
    ) == pytest.approx(8 / 9)

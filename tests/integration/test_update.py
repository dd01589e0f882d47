"""ppo_update on a tiny randomly initialised Llama: the PPO step moves log-probs the right way."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agentrl.trainer.configs import LossConfig, OptimConfig, UpdateConfig
from agentrl.trainer.losses import token_logprobs
from agentrl.trainer.optim import make_optimizer
from agentrl.trainer.samples import TrainSample, collate, episode_to_sample
from agentrl.trainer.update import ppo_update
from agentrl.types import Action, Episode, Turn

PAD_ID = 0


def tiny_model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=PAD_ID,
    )
    return LlamaForCausalLM(config).eval()


@torch.no_grad()
def sequence_logprobs(model: LlamaForCausalLM, samples: list[TrainSample]) -> torch.Tensor:
    """[B, L] log-probs of each sample's own tokens under `model`."""
    batch = collate(samples, PAD_ID)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return token_logprobs(logits, batch["input_ids"])


def sampled_episode(model: LlamaForCausalLM, advantage_turns: int = 2) -> Episode:
    """Two turns sampled from the model itself, with the sampler's log-probs recorded as the runner would."""
    generator = torch.Generator().manual_seed(1)
    ids: list[int] = []
    turns = []
    for index in range(advantage_turns):
        prompt = tuple(int(t) for t in torch.randint(1, 64, (5,), generator=generator))
        ids.extend(prompt)
        completion, logprobs = [], []
        for _ in range(6):
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            token = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=generator))
            completion.append(token)
            logprobs.append(float(torch.log_softmax(logits, -1)[token]))
            ids.append(token)
        action = Action(text="t")
        turns.append(
            Turn(index, prompt, tuple(completion), tuple(logprobs), "t", action, "o", 0.0, False, None)
        )
    return Episode("e", "env", "task", "g", 0, tuple(turns), "terminated")


def completion_logprob(model: LlamaForCausalLM, sample: TrainSample) -> float:
    return float((sequence_logprobs(model, [sample])[0] * sample.loss_mask).sum())


def test_old_logprobs_match_the_trainer_alignment() -> None:
    model = tiny_model()
    sample = episode_to_sample(sampled_episode(model), [1.0, 1.0], max_length=100)
    recomputed = sequence_logprobs(model, [sample])[0]
    assert torch.allclose(recomputed * sample.loss_mask, sample.old_logprobs, atol=1e-4)


def test_positive_advantage_raises_the_sampled_sequence_logprob() -> None:
    model = tiny_model()
    sample = episode_to_sample(sampled_episode(model), [1.0, 1.0], max_length=100)
    before = completion_logprob(model, sample)
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-2))
    metrics = ppo_update(model, optimizer, scheduler, [sample], PAD_ID, LossConfig(), UpdateConfig())
    assert completion_logprob(model, sample) > before + 0.1
    assert not model.training
    assert metrics["tokens"] == 12.0
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert metrics["grad_norm"] > 0


def test_negative_advantage_lowers_it() -> None:
    model = tiny_model()
    sample = episode_to_sample(sampled_episode(model), [-1.0, -1.0], max_length=100)
    before = completion_logprob(model, sample)
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-2))
    ppo_update(model, optimizer, scheduler, [sample], PAD_ID, LossConfig(), UpdateConfig())
    assert completion_logprob(model, sample) < before - 0.1


def test_zero_advantages_leave_weights_unchanged() -> None:
    model = tiny_model()
    sample = episode_to_sample(sampled_episode(model), [0.0, 0.0], max_length=100)
    before = {name: param.detach().clone() for name, param in model.named_parameters()}
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-2, weight_decay=0.0))
    update = UpdateConfig(ppo_epochs=2, micro_batch_size=1, mini_batches=1)
    ppo_update(model, optimizer, scheduler, [sample, sample], PAD_ID, LossConfig(kl_coef=0.0), update)
    for name, param in model.named_parameters():
        assert torch.equal(param, before[name]), name


def test_micro_batches_accumulate_to_the_full_batch_gradient() -> None:
    episode = sampled_episode(tiny_model())
    samples = [
        episode_to_sample(episode, [1.0, -0.5], max_length=100),
        episode_to_sample(episode, [0.3, 0.7], max_length=9),
        episode_to_sample(episode, [-1.0, 2.0], max_length=16),
    ]
    grads = []
    for micro_batch_size in (3, 1):
        model = tiny_model()
        optimizer, scheduler = make_optimizer(model, OptimConfig(lr=0.0))
        update = UpdateConfig(micro_batch_size=micro_batch_size)
        ppo_update(
            model,
            optimizer,
            scheduler,
            samples,
            PAD_ID,
            LossConfig(),
            update,
            optim_cfg=OptimConfig(lr=0.0, grad_clip=0.0),
        )
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_bf16_autocast_update_also_raises_the_logprob() -> None:
    model = tiny_model()
    sample = episode_to_sample(sampled_episode(model), [1.0, 1.0], max_length=100)
    before = completion_logprob(model, sample)
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-2))
    update = UpdateConfig(autocast_bf16=True, ppo_epochs=2)
    metrics = ppo_update(model, optimizer, scheduler, [sample], PAD_ID, LossConfig(), update)
    assert completion_logprob(model, sample) > before + 0.1
    assert all(math.isfinite(value) for value in metrics.values())


def test_the_sampler_mismatch_is_measured_on_the_sampling_weights() -> None:
    model = tiny_model()
    sample = episode_to_sample(sampled_episode(model), [1.0, 1.0], max_length=100)
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-2))
    exact = ppo_update(
        model, optimizer, scheduler, [sample], PAD_ID, LossConfig(), UpdateConfig(ppo_epochs=2)
    )
    assert exact["sampler_abs_log_ratio"] < 1e-4 and abs(exact["sampler_kl"]) < 1e-6  # same weights, fp32

    model = tiny_model()
    shifted = dataclasses.replace(sample, old_logprobs=sample.old_logprobs - 0.1 * sample.loss_mask)
    optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-2))
    off = ppo_update(model, optimizer, scheduler, [shifted], PAD_ID, LossConfig(), UpdateConfig(ppo_epochs=2))
    assert off["sampler_abs_log_ratio"] == pytest.approx(
        0.1, abs=1e-3
    )  # a sampler 0.1 nats below the trainer
    assert off["sampler_kl"] == pytest.approx(math.exp(0.1) - 0.1 - 1.0, abs=1e-4)


def test_truncated_importance_sampling_weights_tokens_by_the_capped_ratio() -> None:
    sample = episode_to_sample(sampled_episode(tiny_model()), [1.0, 1.0], max_length=100)
    shifted = dataclasses.replace(sample, old_logprobs=sample.old_logprobs - 0.1 * sample.loss_mask)

    def update(samples: list[TrainSample], loss: LossConfig) -> tuple[dict[str, float], LlamaForCausalLM]:
        model = tiny_model()
        optimizer, scheduler = make_optimizer(model, OptimConfig(lr=1e-2))
        return ppo_update(model, optimizer, scheduler, samples, PAD_ID, loss, UpdateConfig()), model

    plain, plain_model = update([sample], LossConfig())
    exact, exact_model = update([sample], LossConfig(tis_cap=2.0))  # the sampler is the trainer: w = 1
    assert exact["tis_weight_mean"] == pytest.approx(1.0, abs=1e-4) and exact["tis_capped_frac"] == 0.0
    for before, after in zip(plain_model.parameters(), exact_model.parameters(), strict=True):
        assert torch.allclose(before, after, atol=1e-6)

    uncapped, _ = update([shifted], LossConfig(tis_cap=2.0))  # sampler 0.1 nats low: w = e^0.1
    assert uncapped["tis_weight_mean"] == pytest.approx(math.exp(0.1), abs=1e-3)
    assert uncapped["sampler_abs_log_ratio"] == pytest.approx(0.1, abs=1e-3)
    assert uncapped["ratio_mean"] == pytest.approx(1.0, abs=1e-4)  # the ratio is against the trainer's own
    capped, _ = update([shifted], LossConfig(tis_cap=1.05))
    assert capped["tis_weight_mean"] == pytest.approx(1.05) and capped["tis_capped_frac"] == 1.0

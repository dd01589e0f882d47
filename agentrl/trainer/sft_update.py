"""SFT's update: demonstrations -> token samples with assistant-only loss masks, and the NLL loss that trains
on them through the update path `agentrl train` uses.

What this is: `sft_sample` (one demonstration episode as the trainer's `TrainSample`: the same `concat`
layout and loss mask as RL's, laid out by `samples.episode_to_sample`, with the completions of invalid turns
left out of the loss) and `sft_samples` (one per token segment, for demonstrations played under a context
policy), `sft_schedule` (which demonstrations each optimiser step trains on), `nll_loss` (the
micro batch's negative log-likelihood of its sampled tokens) and `sft_update` (one optimiser step:
`update.loss_step` with that loss, so micro batching, shared-prefix packs, FSDP2's data-parallel scaling,
clipping and metrics are `ppo_update`'s).

Per token, as in `samples.py`: position t holds log p(token t | tokens before it), and the loss mask is 1 on
the tokens the demonstrating policy wrote (its assistant completions), 0 on prompts, templates and tool
observations. A demonstration's turn that the env judged invalid (possible in episodes taken from an RL run)
stays in the sequence, as context, but its completion is masked out: SFT should not teach a malformed call.

What this is not: its config (`SFTConfig`, the `sft.*` section: `configs.py`), the SFT run
(`agentrl/trainer/sft.py`) or where demonstrations come from (`agentrl/demos.py`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from contextlib import nullcontext

import numpy as np
import torch

from agentrl.cpu import native_cpu_bf16
from agentrl.trainer.configs import Aggregation, OptimConfig, UpdateConfig
from agentrl.trainer.losses import aggregate
from agentrl.trainer.parallel import SINGLE_PROCESS, DataParallel
from agentrl.trainer.samples import (
    TrainSample,
    along_columns,
    column_ids,
    episode_to_sample,
    episode_to_samples,
)
from agentrl.trainer.shared_prefix import pack_logits, pack_token_logprobs
from agentrl.trainer.update import loss_step
from agentrl.types import Episode


def sft_sample(episode: Episode, max_length: int) -> TrainSample:
    """The demonstration as a `TrainSample`: `episode_to_sample`'s tokens and mask, with invalid turns'
    completions masked out; `advantages` is 1 on the trained tokens (unused by the NLL), `old_logprobs` 0.

    Its `group_key` is the env's: every demonstration of an env starts with the same system prompt, tools
    and few-shot examples, so with `update.shared_prefix` the update runs that prefix once per pack of
    demonstrations (`samples.plan_packs`), as it does for the members of an RL group."""
    weights = [0.0 if turn.invalid else 1.0 for turn in episode.turns]
    return as_demonstrated(episode_to_sample(episode, weights, max_length), episode)


def sft_samples(episode: Episode, max_length: int) -> list[TrainSample]:
    """`sft_sample` per token segment: a demonstration played under a context policy (`rollout.context`)
    or by a harness holds several sequences, each trained as the engine would have seen it
    (`episode_to_samples`); one segment gives `[sft_sample(episode, max_length)]`."""
    weights = [0.0 if turn.invalid else 1.0 for turn in episode.turns]
    return [as_demonstrated(sample, episode) for sample in episode_to_samples(episode, weights, max_length)]


def as_demonstrated(sample: TrainSample, episode: Episode) -> TrainSample:
    trained = sample.loss_mask * (sample.advantages > 0).to(sample.loss_mask.dtype)
    return dataclasses.replace(
        sample,
        loss_mask=trained,
        advantages=trained,
        old_logprobs=torch.zeros_like(trained),
        group_key=f"demos:{episode.env_id}",
    )


def sft_schedule(count: int, epochs: int, batch_size: int, seed: int) -> list[list[int]]:
    """The demonstrations (indices into `count`) of each optimiser step: every epoch is a fresh seeded
    permutation cut into batches of `batch_size` (the last one of an epoch may be smaller)."""
    rng = np.random.default_rng(seed)
    steps: list[list[int]] = []
    for _ in range(epochs):
        order = [int(index) for index in rng.permutation(count)]
        steps.extend(order[start : start + batch_size] for start in range(0, count, batch_size))
    return steps


def nll_loss(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    aggregation: Aggregation = "token_mean",
    autocast_bf16: bool = False,
) -> tuple[torch.Tensor, dict[str, float], dict[str, float]]:
    """A micro batch's negative log-likelihood of its masked tokens (at temperature 1), `aggregate`d like the
    RL loss; its token-mean metrics (`nll`, `token_accuracy`: the share of masked tokens that are the model's
    argmax) and the aggregated loss (reported by the caller as `loss`)."""
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if autocast_bf16 and native_cpu_bf16() else None
    with autocast or nullcontext():
        logits = pack_logits(model, batch)
    logprobs, _ = pack_token_logprobs(logits, batch, 1.0)
    mask = batch["loss_mask"]
    loss = aggregate(-logprobs, mask, aggregation)
    with torch.no_grad():
        count = mask.sum().clamp(min=1.0)
        prefix = None if logits.prefix is None else _argmax_predictions(logits.prefix)
        predicted = along_columns(_argmax_predictions(logits.rows), prefix)
        hits = (predicted == column_ids(batch)).float() * mask
        metrics = {
            "nll": float(((-logprobs.detach() * mask).sum() / count).item()),
            "token_accuracy": float((hits.sum() / count).item()),
        }
    return loss, metrics, {}


def _argmax_predictions(logits: torch.Tensor) -> torch.Tensor:
    """[B, L, V] -> [B, L]: the token the model ranks first at each position (-1 at position 0)."""
    return torch.nn.functional.pad(logits[:, :-1].argmax(-1), (1, 0), value=-1)


def sft_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    samples: Sequence[TrainSample],
    pad_id: int,
    update_cfg: UpdateConfig,
    optim_cfg: OptimConfig,
    aggregation: Aggregation = "token_mean",
    parallel: DataParallel = SINGLE_PROCESS,
) -> dict[str, float]:
    """One optimiser step of SFT on `samples`: `loss`, `nll`, `token_accuracy`, `grad_norm`, `tokens`."""

    def micro_loss(
        module: torch.nn.Module, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float], dict[str, float]]:
        return nll_loss(module, batch, aggregation, update_cfg.autocast_bf16)

    return loss_step(
        model,
        optimizer,
        scheduler,
        list(samples),
        pad_id,
        update_cfg,
        micro_loss,
        aggregation=aggregation,
        grad_clip=optim_cfg.grad_clip,
        parallel=parallel,
    )

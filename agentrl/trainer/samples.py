"""Episodes -> token-level training samples (the `concat` mode of docs/design.md) and their padded collation.

What this is: `episode_to_sample` lays an episode's tokens out exactly as the engine saw and produced them
(turn after turn, `prompt_ids + completion_ids`; nothing is re-tokenised) with per-token masks, and
`collate` right-pads samples into [B, L] tensors.

Per-token conventions (position t is the t-th token of the sequence):
    loss_mask    1 on tokens the engine sampled, 0 on prompt, template and observation tokens ("1 if
                 sampled, 0 if forced").
    old_logprobs the sampler's log-probability of the token at t (placed at t itself, matching
                 `losses.token_logprobs`); 0 where loss_mask is 0.
    advantages   the advantage of the token's turn on sampled tokens; 0 elsewhere.

What this is not: a filter or the per-step mode. Callers exclude infrastructure-failure episodes (they are
not training signal) before calling `episode_to_sample`; the per-step sample mode comes later.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentrl.types import Episode, Turn


@dataclass(frozen=True)
class TrainSample:
    """One episode's token sequence and its per-token training targets (all [L], see module docstring)."""

    input_ids: torch.Tensor  # [L] long
    loss_mask: torch.Tensor  # [L] float
    old_logprobs: torch.Tensor  # [L] float
    advantages: torch.Tensor  # [L] float

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_sampled_tokens(self) -> int:
        return int(self.loss_mask.sum().item())


def episode_to_sample(episode: Episode, step_advantages: Sequence[float], max_length: int) -> TrainSample:
    """The episode's `concat` sample, keeping its first `max_length` tokens.

    Tokens past `max_length` are cut (and with them the end of the last turns' signal); the runner's context
    budget normally keeps episodes shorter than that.
    """
    if len(step_advantages) != len(episode.turns):
        raise ValueError(
            f"episode {episode.episode_id} has {len(episode.turns)} turns "
            f"but {len(step_advantages)} advantages"
        )
    columns = [
        _turn_columns(turn, float(advantage))
        for turn, advantage in zip(episode.turns, step_advantages, strict=True)
    ]
    ids, mask, logprobs, advantages = (
        [value for column in columns for value in column[part]][:max_length] for part in range(4)
    )
    return TrainSample(
        input_ids=torch.tensor(ids, dtype=torch.long),
        loss_mask=torch.tensor(mask, dtype=torch.float32),
        old_logprobs=torch.tensor(logprobs, dtype=torch.float32),
        advantages=torch.tensor(advantages, dtype=torch.float32),
    )


def _turn_columns(turn: Turn, advantage: float) -> tuple[Sequence[float], ...]:
    """(ids, loss_mask, old_logprobs, advantages) of one turn's prompt + completion tokens."""
    if len(turn.completion_logprobs) != len(turn.completion_ids):
        raise ValueError(
            f"turn {turn.index}: {len(turn.completion_ids)} completion ids but "
            f"{len(turn.completion_logprobs)} logprobs; the engine must return one logprob per sampled token"
        )
    prompt, completion = len(turn.prompt_ids), len(turn.completion_ids)
    return (
        [*turn.prompt_ids, *turn.completion_ids],
        [0.0] * prompt + [1.0] * completion,
        [0.0] * prompt + list(turn.completion_logprobs),
        [0.0] * prompt + [advantage] * completion,
    )


def collate(samples: Sequence[TrainSample], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad to the longest sample: input_ids, attention_mask, loss_mask, old_logprobs and advantages,
    each [B, L]. Padding has attention_mask 0 and loss_mask 0."""
    if not samples:
        raise ValueError("collate needs at least one sample")
    length = max(sample.num_tokens for sample in samples)
    return {
        "input_ids": _pad([s.input_ids for s in samples], length, pad_id),
        "attention_mask": _pad([torch.ones_like(s.input_ids) for s in samples], length, 0),
        "loss_mask": _pad([s.loss_mask for s in samples], length, 0.0),
        "old_logprobs": _pad([s.old_logprobs for s in samples], length, 0.0),
        "advantages": _pad([s.advantages for s in samples], length, 0.0),
    }


def _pad(rows: Sequence[torch.Tensor], length: int, value: float) -> torch.Tensor:
    out = torch.full((len(rows), length), value, dtype=rows[0].dtype)
    for index, row in enumerate(rows):
        out[index, : row.shape[0]] = row
    return out

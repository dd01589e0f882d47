"""Episodes -> concat training samples and their collation."""

from __future__ import annotations

import pytest
import torch

from agentrl.trainer.samples import collate, episode_to_sample
from agentrl.types import Action, Episode, Turn


def turn(index: int, prompt: tuple[int, ...], completion: tuple[int, ...]) -> Turn:
    logprobs = tuple(-0.1 * (k + 1) for k in range(len(completion)))
    return Turn(index, prompt, completion, logprobs, "t", Action("t"), "obs", 0.0, False, None)


EPISODE = Episode(
    "e", "env", "task", "g", 0, (turn(0, (1, 2, 3), (10, 11)), turn(1, (4, 5), (12,))), "terminated"
)


def test_concat_layout() -> None:
    sample = episode_to_sample(EPISODE, [0.5, -2.0], max_length=100)
    assert sample.input_ids.tolist() == [1, 2, 3, 10, 11, 4, 5, 12]
    assert sample.loss_mask.tolist() == [0, 0, 0, 1, 1, 0, 0, 1]
    assert sample.old_logprobs.tolist() == pytest.approx([0, 0, 0, -0.1, -0.2, 0, 0, -0.1])
    assert sample.advantages.tolist() == [0, 0, 0, 0.5, 0.5, 0, 0, -2.0]
    assert sample.input_ids.dtype == torch.long and sample.loss_mask.dtype == torch.float32
    assert sample.num_sampled_tokens == 3


def test_truncation_keeps_the_first_tokens() -> None:
    sample = episode_to_sample(EPISODE, [0.5, -2.0], max_length=6)
    assert sample.input_ids.tolist() == [1, 2, 3, 10, 11, 4]
    assert sample.loss_mask.tolist() == [0, 0, 0, 1, 1, 0]


def test_advantage_count_must_match_turns() -> None:
    with pytest.raises(ValueError, match="2 turns"):
        episode_to_sample(EPISODE, [1.0], max_length=100)


def test_collate_right_pads() -> None:
    long = episode_to_sample(EPISODE, [1.0, 1.0], max_length=100)
    short = episode_to_sample(EPISODE, [1.0, 1.0], max_length=4)
    batch = collate([short, long], pad_id=99)
    assert {name: tuple(t.shape) for name, t in batch.items()} == {
        name: (2, 8) for name in ("input_ids", "attention_mask", "loss_mask", "old_logprobs", "advantages")
    }
    assert batch["input_ids"][0].tolist() == [1, 2, 3, 10, 99, 99, 99, 99]
    assert batch["attention_mask"][0].tolist() == [1, 1, 1, 1, 0, 0, 0, 0]
    assert batch["loss_mask"][0].tolist() == [0, 0, 0, 1, 0, 0, 0, 0]
    assert batch["attention_mask"][1].tolist() == [1] * 8

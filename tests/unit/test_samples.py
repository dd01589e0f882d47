"""Episodes -> concat training samples and their collation; what episodes cost the env."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from agentrl.trainer.samples import (
    TrainSample,
    along_columns,
    collate,
    collate_shared,
    column_ids,
    columns_start,
    env_steps_of,
    episode_to_sample,
    forks_of,
    plan_packs,
    shared_length,
    to_sample_layout,
    trains_prefix,
)
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


def sample(ids: list[int], mask: list[int], group: str | None = "g") -> TrainSample:
    values = torch.tensor(mask, dtype=torch.float32)
    return TrainSample(torch.tensor(ids), values, -0.5 * values, 2.0 * values, group_key=group)


def test_episode_samples_carry_their_group() -> None:
    assert episode_to_sample(EPISODE, [0.5, -2.0], max_length=100).group_key == "g"


def test_the_shared_length_stops_before_the_first_sampled_token_and_the_divergence() -> None:
    a = sample([1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 1, 1])
    b = sample([1, 2, 3, 4, 9, 9, 9], [0, 0, 0, 0, 0, 1, 1])
    assert shared_length([a, b]) == 3  # tokens 0..3 unsampled in both: token 3 starts each row
    c = sample([1, 2, 7, 4, 5, 6], [0, 0, 0, 0, 1, 1])
    assert shared_length([a, b, c]) == 2  # c diverges at token 2
    assert shared_length([sample([1, 2], [0, 0]), sample([1, 2, 3], [0, 0, 1])]) == 1  # a row keeps a token
    assert shared_length([sample([5, 2], [0, 1]), sample([5, 2], [0, 1])]) == 0


def test_packs_keep_groups_whole_within_the_memory_of_a_micro_batch() -> None:
    prompt = list(range(1, 21))
    members = [sample([*prompt, 30 + k, 40, 41], [0] * 21 + [1, 1]) for k in range(3)]
    other = [sample([*prompt, 50 + k, 60], [0] * 21 + [1], group="h") for k in range(2)]
    loose = sample([*prompt, 7, 8], [0] * 21 + [1], group=None)
    samples = [members[0], other[0], loose, members[1], other[1], members[2]]
    packs = plan_packs(samples, micro_batch_size=2, min_shared_tokens=4)
    assert [(pack.indices, pack.shared) for pack in packs] == [((0, 3, 5), 20), ((1, 4), 20)]
    # a micro batch of 1 has room for one 23-token row: no pack (the samples run unshared)
    assert plan_packs(samples, micro_batch_size=1, min_shared_tokens=4) == []
    assert plan_packs(samples, micro_batch_size=2, min_shared_tokens=21) == []


def test_collate_shared_slices_every_column_at_the_prefix() -> None:
    a = sample([1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 1, 1])
    b = sample([1, 2, 3, 4, 9], [0, 0, 0, 0, 1])
    batch = collate_shared([a, b], shared=3, pad_id=0)
    assert batch["prefix_ids"].tolist() == [[1, 2, 3]]
    assert batch["input_ids"].tolist() == [[4, 5, 6], [4, 9, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["loss_mask"].tolist() == [[0, 1, 1], [0, 1, 0]]
    assert batch["advantages"].tolist() == [[0, 2, 2], [0, 2, 0]]
    assert to_sample_layout(batch["old_logprobs"][1], b, 3).tolist() == [0, 0, 0, 0, -0.5]
    with pytest.raises(ValueError, match="do not share"):
        collate_shared([a, sample([1, 2, 8, 4], [0, 0, 0, 1])], shared=3, pad_id=0)


def test_a_tree_shares_its_prefix_past_the_turns_one_member_trained() -> None:
    # prompt 1 2, the root's completion 3 4 (its branches hold copies, loss 0), the next prompt 5 6, then
    # each member's own completion
    root = sample([1, 2, 3, 4, 5, 6, 7], [0, 0, 1, 1, 0, 0, 1])
    branch = sample([1, 2, 3, 4, 5, 6, 8, 9], [0, 0, 0, 0, 0, 0, 1, 1])
    other = sample([1, 2, 3, 4, 5, 6, 9, 9], [0, 0, 0, 0, 0, 0, 1, 1])
    assert shared_length([root, branch, other]) == 5  # token 5 starts every row, trained in none
    assert shared_length([branch, other]) == 5
    # a second member training a prefix token (two flat episodes that sampled the same first tokens) ends
    # the prefix before it: one member's log-probs come from the prefix, never two
    twin = sample([1, 2, 3, 4, 5, 6, 7], [0, 0, 1, 1, 0, 0, 1])
    assert shared_length([root, twin]) == 1
    # the owner is the member that trains the first trained token: another one's trained token ends it
    late = sample([1, 2, 3, 4, 5, 6, 7], [0, 0, 0, 0, 0, 1, 0])
    assert shared_length([root, late]) == 4


def test_a_pack_that_trains_its_prefix_keeps_the_whole_sequences_loss_columns() -> None:
    root = sample([1, 2, 3, 4, 5, 6, 7], [0, 0, 1, 1, 0, 0, 1])
    branch = sample([1, 2, 3, 4, 5, 8], [0, 0, 0, 0, 0, 1])
    batch = collate_shared([root, branch], shared=4, pad_id=0)
    assert trains_prefix(batch) and columns_start(batch) == 0
    assert batch["prefix_ids"].tolist() == [[1, 2, 3, 4]]
    assert batch["input_ids"].tolist() == [[5, 6, 7], [5, 8, 0]]
    assert batch["loss_mask"].tolist() == [[0, 0, 1, 1, 0, 0, 1], [0, 0, 0, 0, 0, 1, 0]]
    assert batch["advantages"].tolist() == [[0, 0, 2, 2, 0, 0, 2], [0, 0, 0, 0, 0, 2, 0]]
    assert column_ids(batch).tolist() == [[1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 8, 0]]
    prefix_values = torch.tensor([[10.0, 11.0, 12.0, 13.0]])
    assert along_columns(batch["attention_mask"].float(), prefix_values)[1].tolist() == [
        10,
        11,
        12,
        13,
        1,
        1,
        0,
    ]
    assert to_sample_layout(batch["old_logprobs"][0], root, columns_start(batch)).tolist() == [
        0,
        0,
        -0.5,
        -0.5,
        0,
        0,
        -0.5,
    ]
    flat = collate_shared([branch, sample([1, 2, 3, 4, 5, 9], [0, 0, 0, 0, 0, 1])], shared=4, pad_id=0)
    assert not trains_prefix(flat) and columns_start(flat) == 4
    assert along_columns(flat["loss_mask"], None).tolist() == [[0, 1], [0, 1]]


def episode_of(
    turns: int, episode_id: str = "e", parent: str | None = None, branch: int | None = None
) -> Episode:
    played = tuple(turn(index, (1,), (2,)) for index in range(turns))
    return replace(EPISODE, episode_id=episode_id, turns=played, parent_id=parent, branch_turn=branch)


def test_a_flat_episode_costs_one_env_step_per_turn_and_no_fork() -> None:
    flat = [episode_of(9, "a"), episode_of(7, "b")]
    assert env_steps_of(flat) == 16 and forks_of(flat) == 0
    assert env_steps_of([]) == 0


def test_a_tree_branch_costs_only_the_turns_it_played_and_one_fork() -> None:
    # the root plays 9 turns; a branch copies its first turn and plays 8; a deeper branch copies 3 and plays 6
    root, branch = episode_of(9, "root"), episode_of(9, "branch", parent="root", branch=1)
    deeper = episode_of(9, "deeper", parent="branch", branch=3)
    assert env_steps_of([root, branch, deeper]) == 9 + 8 + 6
    assert forks_of([root, branch, deeper]) == 2
    assert env_steps_of([episode_of(4, "at-reset", parent="root", branch=0)]) == 4  # branched before turn 0

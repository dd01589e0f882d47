"""The trainer's log-probs mapped back to turns (the viewer's importance ratio): which turns a sample holds
(`sample_sources`, in `training_samples`' order), where each turn's sampled tokens sit in it, and each
turn's values, or None where the sample does not train all of its tokens (a cut at max context, a tree
branch's copied turns); micro-batch rows of a shared-prefix pack back in each sample's layout; and the
store keeping them beside the sampler's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from agentrl.errors import StoreError
from agentrl.store import pages
from agentrl.store.repository import close_store, create_run, load_episodes, open_store, record_episodes
from agentrl.trainer.samples import (
    Pack,
    collate_shared,
    completion_spans,
    episode_to_sample,
    segment_turns,
    shared_length,
    trains_prefix,
    turn_values,
)
from agentrl.trainer.step import SampleSource, sample_sources, trainer_turn_logprobs, training_samples
from agentrl.trainer.update import sample_logprobs
from agentrl.types import Action, Episode, Turn


def turn(index: int, prompt: tuple[int, ...], completion: tuple[int, ...], segment: int = 0) -> Turn:
    logprobs = tuple(-0.1 * (k + 1) for k in range(len(completion)))
    return Turn(index, prompt, completion, logprobs, "t", Action("t"), "o", 0.0, False, None, segment=segment)


def episode(uid: str, *turns: Turn, **fields: object) -> Episode:
    return Episode(uid, "env", "task", "g", 0, turns, "terminated", **fields)  # type: ignore[arg-type]


TWO_TURNS = episode("e", turn(0, (1, 2, 3), (10, 11)), turn(1, (4, 5), (12, 13, 14)))
"""Layout: 1 2 3 [10 11] 4 5 [12 13 14]; sampled tokens at positions 3-4 and 7-9."""


def positions(sample_length: int) -> torch.Tensor:
    """Values that name their own position: what a correct mapping must hand each token."""
    return -torch.arange(sample_length, dtype=torch.float32) / 100


def test_each_turn_gets_the_values_at_its_own_sampled_tokens() -> None:
    sample = episode_to_sample(TWO_TURNS, [1.0, -1.0], max_length=100)
    spans = completion_spans(TWO_TURNS.turns)
    assert spans == [(3, 5), (7, 10)]
    found = turn_values(positions(sample.num_tokens), sample, spans)
    assert found == [pytest.approx([-0.03, -0.04]), pytest.approx([-0.07, -0.08, -0.09])]


def test_a_turn_cut_at_max_context_is_not_mapped_never_shifted() -> None:
    for cut in (8, 9, 7, 5):  # inside the second completion, just before it, at the first one's end
        sample = episode_to_sample(TWO_TURNS, [1.0, -1.0], max_length=cut)
        first, second = turn_values(positions(cut), sample, completion_spans(TWO_TURNS.turns))
        assert first == pytest.approx([-0.03, -0.04]) and second is None, cut
    sample = episode_to_sample(TWO_TURNS, [1.0, -1.0], max_length=4)  # inside the first completion
    assert turn_values(positions(4), sample, completion_spans(TWO_TURNS.turns)) == [None, None]


def test_copied_turns_empty_turns_and_a_wrong_length_are_not_mapped() -> None:
    branch = dataclasses.replace(TWO_TURNS, parent_id="root", branch_turn=1)  # turn 0 copied from its parent
    sample = episode_to_sample(branch, [1.0, -1.0], max_length=100)
    spans = completion_spans(branch.turns)
    assert turn_values(positions(sample.num_tokens), sample, spans) == [
        None,
        pytest.approx([-0.07, -0.08, -0.09]),
    ]
    silent = episode("s", turn(0, (1, 2), ()), turn(1, (3,), (4,)))
    sample = episode_to_sample(silent, [1.0, 1.0], max_length=100)
    assert turn_values(positions(4), sample, completion_spans(silent.turns)) == [None, [pytest.approx(-0.03)]]
    with pytest.raises(ValueError, match=r"values of shape \(3,\) for a sample of 4 tokens"):
        turn_values(positions(3), sample, completion_spans(silent.turns))


def test_sources_follow_the_samples_and_their_segments() -> None:
    """Episodes with no signal are left out of the samples and of the sources alike; a harness episode of
    two segments gives two samples, each mapped to its own turns."""
    harness = episode(
        "h", turn(0, (1, 2), (20, 21), segment=0), turn(1, (1, 2, 9), (22,), segment=1), turn(2, (5,), (23,))
    )
    episodes = [TWO_TURNS, episode("zero", turn(0, (1,), (2,))), harness]
    advantages = [[1.0, 1.0], [0.0], [0.5, -0.5, 0.5]]
    samples = training_samples(episodes, advantages, max_length=100)
    sources = sample_sources(episodes, advantages)
    assert sources == [SampleSource(0, (0, 1)), SampleSource(2, (0, 2)), SampleSource(2, (1,))]
    assert segment_turns(harness) == [(0, 2), (1,)]
    assert len(sample_sources(episodes, advantages, keep_all=True)) == len(samples) + 1
    # each sample's values: its own position, plus 100 x the sample's number
    logprobs = [positions(s.num_tokens) + 100 * k for k, s in enumerate(samples)]
    logprobs[0] = logprobs[0] * samples[0].loss_mask  # as the update hands them: 0 where not trained
    mapped = trainer_turn_logprobs(episodes, sources, samples, logprobs)
    assert mapped[0] == [pytest.approx([-0.03, -0.04]), pytest.approx([-0.07, -0.08, -0.09])]
    assert mapped[1] == [None]  # not trained: no signal
    # segment 0: 1 2 [20 21] 5 [23]; segment 1: 1 2 9 [22]
    assert mapped[2] == [pytest.approx([99.98, 99.97]), pytest.approx([199.97]), pytest.approx([99.95])]


def test_samples_the_update_kept_nothing_for_map_to_none() -> None:
    samples = training_samples([TWO_TURNS], [[1.0, 1.0]], max_length=100)
    sources = sample_sources([TWO_TURNS], [[1.0, 1.0]])
    assert trainer_turn_logprobs([TWO_TURNS], sources, samples, [None]) == [[None, None]]
    assert trainer_turn_logprobs([TWO_TURNS], sources, samples, []) == [[None, None]]  # SFT, or no update
    with pytest.raises(ValueError, match="1 sources, 1 samples and 2 log-prob rows"):
        trainer_turn_logprobs([TWO_TURNS], sources, samples, [None, None])


def test_a_shared_prefix_packs_rows_come_back_at_each_members_positions() -> None:
    """A flat group's pack: its rows are the suffixes from token K on; a tree's pack whose owner trains
    prefix tokens: its rows are whole sequences. Either way the values land at each sample's own positions,
    0 where the sample trains nothing."""
    prompt = (1, 2, 3, 4, 5)
    flat = [
        episode_to_sample(episode(f"m{k}", turn(0, prompt, (10 + k, 11, 12 + k))), [1.0], max_length=100)
        for k in range(3)
    ]
    shared = shared_length(flat)
    assert shared == len(prompt) - 1  # token K, the prompt's last, starts each row untrained
    batch = collate_shared(flat, shared, pad_id=0)
    assert not trains_prefix(batch)
    columns = batch["loss_mask"].shape[1]
    rows = torch.stack([shared + torch.arange(columns, dtype=torch.float32) + 100 * k for k in range(3)])
    kept = sample_logprobs(rows, batch, Pack((4, 5, 6), shared), [*flat, *flat, *flat])
    assert sorted(kept) == [4, 5, 6]
    for k, index in enumerate((4, 5, 6)):
        assert kept[index].tolist() == [0, 0, 0, 0, 0, 100 * k + 5, 100 * k + 6, 100 * k + 7]

    root = episode("r", turn(0, prompt, (10, 11)), turn(1, (6,), (20, 21)))
    branch = episode("b", *root.turns[:1], turn(1, (6,), (30, 31, 32)), parent_id="r", branch_turn=1)
    tree = [episode_to_sample(root, [1.0, 1.0], 100), episode_to_sample(branch, [1.0, -1.0], 100)]
    shared = shared_length(tree)
    batch = collate_shared(tree, shared, pad_id=0)
    assert trains_prefix(batch) and shared == 7  # up to the branch turn's prompt, less its last token
    columns = batch["loss_mask"].shape[1]
    rows = torch.stack([torch.arange(columns, dtype=torch.float32) + 100 * k for k in range(2)])
    kept = sample_logprobs(rows, batch, Pack((0, 1), shared), tree)
    assert kept[0].tolist() == [0, 0, 0, 0, 0, 5, 6, 0, 8, 9]  # the owner: its prefix turn and its own
    assert kept[1].tolist() == [0] * 8 + [108, 109, 110]  # the branch: its own turn only
    mapped = trainer_turn_logprobs(
        [root, branch], sample_sources([root, branch], [[1.0, 1.0], [1.0, -1.0]]), tree, [kept[0], kept[1]]
    )
    assert mapped == [[[5.0, 6.0], [8.0, 9.0]], [None, [108.0, 109.0, 110.0]]]


def test_the_store_keeps_trainer_log_probs_beside_the_samplers(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    run_id = create_run(store, "r", "t", {})
    trainer = [[[-0.125, -0.25], None]]
    record_episodes(store, run_id, 1, "train", [TWO_TURNS], [[1.0, 1.0]], trainer_logprobs=trainer)
    with pytest.raises(StoreError, match="2 trainer log-probs for 3 completion tokens"):
        record_episodes(store, run_id, 1, "train", [TWO_TURNS], None, trainer_logprobs=[[None, [-1.0, -2.0]]])
    with pytest.raises(StoreError, match="got 2 trainer log-prob lists for 1 episodes"):
        record_episodes(store, run_id, 1, "train", [TWO_TURNS], None, trainer_logprobs=[[], []])
    [stored] = load_episodes(store, run_id)
    loaded = pages.load_episode(store, run_id, stored["id"])
    assert loaded is not None
    first, second = (t["tokens"] for t in loaded["turns"])
    assert first["trainer"] == [-0.125, -0.25] and first["logprobs"] == pytest.approx([-0.1, -0.2])
    assert second["trainer"] is None and second["logprobs"] == pytest.approx([-0.1, -0.2, -0.3])
    close_store(store)

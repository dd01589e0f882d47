"""Several trees per task (`rollout.tree.trees`, issue 42): the config's leaf count, `collect_groups` playing
M trees whose leaves are one group (links within each tree, one env seed, a sampler seed per tree), with a
scripted engine and the in-memory forking client of tests/unit/test_tree_rollout.py; and the shared-prefix
update's packing of such a group, tree by tree."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from test_rollout import SAMPLING
from test_tree_entropy import EntropyEngine, entropy_config
from test_tree_rollout import REPLIES, TASK, CyclingEngine, ForkingCounter, tree_config

from agentrl.agent.rollout import derive_seed, episode_seed
from agentrl.agent.rollout_config import RolloutConfig, TreeConfig
from agentrl.agent.tree import collect_groups, tree_sampler_seed
from agentrl.config import RunConfig
from agentrl.errors import ConfigError
from agentrl.trainer.samples import collate_shared, plan_packs, shared_length, trains_prefix, tree_keys
from agentrl.trainer.step import training_samples
from agentrl.types import Episode


def several(branch_turns: tuple[int, ...], trees: int, max_turns: int = 4) -> RolloutConfig:
    config = tree_config(branch_turns, max_turns=max_turns)
    return replace(config, tree=replace(config.tree, trees=trees, width=0))


def roots_and_links(episodes: list[Episode]) -> tuple[list[str], dict[str, str]]:
    """The roots' ids, and each episode's root (followed up its parent links)."""
    by_id = {episode.episode_id: episode for episode in episodes}

    def root(episode: Episode) -> str:
        while episode.parent_id is not None:
            episode = by_id[episode.parent_id]
        return episode.episode_id

    roots = [episode.episode_id for episode in episodes if episode.parent_id is None]
    return roots, {episode.episode_id: root(episode) for episode in episodes}


def test_the_leaf_count_is_trees_times_width_to_the_levels() -> None:
    assert TreeConfig(True, (1,), trees=2).width_for(4) == 2
    assert TreeConfig(True, (1, 2), trees=2).width_for(8) == 2
    assert TreeConfig(True, (1,), trees=3).width_for(9) == 3
    assert TreeConfig(True, branch_on="entropy", branch_points=2, trees=2).width_for(8) == 2
    assert TreeConfig(True, (1,), trees=2, width=3).width_for(6) == 3
    with pytest.raises(
        ValueError, match="2 tree\\(s\\) with 1 branch turn\\(s\\) .*group_size=5 leaves.*e.g. 4 or 6"
    ):
        TreeConfig(True, (1,), trees=2).width_for(5)
    with pytest.raises(ValueError, match="cannot make train.group_size=2 .* rollout.tree.trees"):
        TreeConfig(True, (1,), trees=2).width_for(2)  # one leaf per tree: nothing branches
    with pytest.raises(ValueError, match="branch point\\(s\\) per path"):
        TreeConfig(True, branch_on="entropy", branch_points=2, trees=2).width_for(4)
    with pytest.raises(ValueError, match="trees must be >= 1"):
        TreeConfig(True, trees=0)
    with pytest.raises(ConfigError, match="cannot make train.group_size=4"):
        RunConfig(rollout=RolloutConfig(tree=TreeConfig(True, (1, 2), trees=2)))


def test_collect_groups_plays_several_trees_per_task_as_one_group() -> None:
    client = ForkingCounter()
    tasks = [TASK, {"id": "t2", "target": 3}]
    played = asyncio.run(
        collect_groups(client, CyclingEngine(REPLIES), "e", tasks, 4, SAMPLING, several((1,), trees=2), 3)
    )
    assert [e.task_id for e in played] == ["t1"] * 4 + ["t2"] * 4
    for group in (played[:4], played[4:]):
        assert len({e.group_id for e in group}) == 1
        roots, root_of = roots_and_links(group)
        assert len(roots) == 2  # two trees, each root followed by its branch
        assert [root_of[e.episode_id] for e in group] == [roots[0], roots[0], roots[1], roots[1]]
        assert all(e.branch_turn == 1 for e in group if e.parent_id is not None)
    assert played[0].group_id != played[4].group_id
    # every tree reset once, with the env seed a flat group's members get
    assert client.created == [("t1", episode_seed(3, 0))] * 2 + [("t2", episode_seed(3, 1))] * 2
    assert len(client.forked) == 4  # one fork per tree


def test_several_trees_on_entropy_make_exactly_group_size_leaves() -> None:
    config = entropy_config(max_turns=5, branch_points=2)
    config = replace(config, tree=replace(config.tree, trees=2))
    engine = EntropyEngine(lambda turn: float(turn % 2))
    played = asyncio.run(collect_groups(ForkingCounter(), engine, "e", [TASK], 8, SAMPLING, config, 0))
    roots, root_of = roots_and_links(played)
    assert len(played) == 8 and len(roots) == 2 and len({e.group_id for e in played}) == 1
    assert [root_of[e.episode_id] for e in played] == [roots[0]] * 4 + [roots[1]] * 4


def test_each_tree_samples_with_its_own_seed_and_the_first_keeps_the_single_trees() -> None:
    assert tree_sampler_seed(7, 2, 0) == derive_seed(7, 2)  # `trees: 1` samples as before
    seeds = {tree_sampler_seed(7, 2, number) for number in range(4)}
    assert len(seeds) == 4


def test_tree_keys_name_each_episodes_root_and_leave_flat_episodes_out() -> None:
    client = ForkingCounter()
    group = asyncio.run(
        collect_groups(client, CyclingEngine(REPLIES), "e", [TASK], 4, SAMPLING, several((1,), trees=2), 0)
    )
    flat = replace(group[0], episode_id="flat", group_id="h", parent_id=None)
    orphan = replace(group[3], parent_id="gone")  # its parent left out (e.g. an infrastructure failure)
    roots = [group[0].episode_id, group[2].episode_id]
    assert tree_keys([*group, flat]) == [roots[0], roots[0], roots[1], roots[1], None]
    assert tree_keys([group[0], group[1], group[2], orphan]) == [roots[0], roots[0], None, None]


def test_a_group_of_two_trees_is_packed_tree_by_tree_each_prefix_trained_once() -> None:
    """Two trees of width 2 branching at turn 2: the group's members share only the first prompt (each root
    trains its own turn 0), each tree's members its two turns before the branch point. Packed per tree,
    each pack runs its tree's prefix once and its root alone trains it, from the prefix's logits."""
    config = several((2,), trees=2)
    group = asyncio.run(
        collect_groups(ForkingCounter(), CyclingEngine(REPLIES), "e", [TASK], 4, SAMPLING, config, 0)
    )
    samples = training_samples(group, [[1.0] * len(e.turns) for e in group], 10_000)
    first_prompt = len(group[0].turns[0].prompt_ids)
    assert shared_length(samples) == first_prompt - 1  # the whole group: the first prompt only
    packs = plan_packs(samples, micro_batch_size=4, min_shared_tokens=1)
    assert [pack.indices for pack in packs] == [(0, 1), (2, 3)]
    for pack, root in zip(packs, (group[0], group[2]), strict=True):
        turns_before_branch = sum(len(t.prompt_ids) + len(t.completion_ids) for t in root.turns[:2])
        prompt_of_the_branch_turn = len(root.turns[2].prompt_ids)
        assert (
            pack.shared == turns_before_branch + prompt_of_the_branch_turn - 1
        )  # all but a row's first token
        owner, copy = (samples[index] for index in pack.indices)
        trained = owner.loss_mask[: pack.shared].sum().item()
        assert trained == sum(len(t.completion_ids) for t in root.turns[:2])  # the root trains the prefix
        assert copy.loss_mask[: pack.shared].sum().item() == 0  # the branch holds it as context
        assert trains_prefix(collate_shared([owner, copy], pack.shared, pad_id=0))
    untagged = [replace(sample, tree_key=None) for sample in samples]  # packed as one group: prompt only
    assert [(p.indices, p.shared) for p in plan_packs(untagged, 4, 1)] == [((0, 1, 2, 3), first_prompt - 1)]

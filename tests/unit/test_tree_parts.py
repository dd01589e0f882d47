"""Tree rollouts branching at part boundaries (`rollout.tree.branch_on=parts`, `agentrl/agent/tree.py`): the
scripted engines of `test_tree_rollout.py` and an in-memory forking multi-part counter env whose parts take
as many turns as the policy needs, each ending with `info["context_reset"]` (pure logic: no model, no
server)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from test_rollout import SAMPLING, ScriptedEngine, call
from test_tree_rollout import CyclingEngine, ForkingCounter

from agentrl.agent.rollout_config import ContextConfig, RolloutConfig, TreeConfig
from agentrl.agent.tree import collect_groups, play_tree
from agentrl.config import RunConfig
from agentrl.env.core import INFO_CONTEXT_RESET, StepResult
from agentrl.errors import ConfigError
from agentrl.trainer.samples import env_steps_of
from agentrl.typed import build
from agentrl.types import Action, Episode, ForkedSession

PART = 3  # the total each part asks for, from 0
PARTS = 3  # parts per episode: the step that ends the last ends the episode
TASK = {"id": "t1", "target": PART}
ADD_1, ADD_2, ADD_4 = call("add", n=1), call("add", n=2), call("add", n=4)


@dataclass
class PartsCounter(ForkingCounter):
    """`ForkingCounter` as a multi-part env: each part asks for a total of `PART` from 0; the step that
    reaches it ends the part (`info["context_reset"]` True, the total back to 0), or in the last of `PARTS`
    parts the episode (reward 1). A fork copies the part too."""

    parts: dict[str, int] = field(default_factory=dict)

    async def create_session(self, env_id: str, task: Any, seed: int) -> Any:
        start = await super().create_session(env_id, task, seed)
        self.parts[start.session_id] = 1
        return start

    async def fork_session(self, session_id: str, n: int = 1) -> list[ForkedSession]:
        forks = await super().fork_session(session_id, n)
        for fork in forks:
            self.parts[fork.session_id] = self.parts[session_id]
        return forks

    async def step(self, session_id: str, action: Action) -> StepResult:
        result = await super().step(session_id, action)
        total, part = self.totals[session_id], self.parts[session_id]
        if result.terminated or total < PART:
            return result._replace(info={**result.info, "state_key": f"{part}:{total}"})
        self.totals[session_id], self.parts[session_id] = 0, part + 1
        last = part == PARTS
        info = {"state_key": f"{part + 1}:0", INFO_CONTEXT_RESET: not last, "success": last}
        return StepResult(f"part {part} done; reach {PART} again", float(last), last, False, info)


def parts_config(
    branch_parts: tuple[int, ...] = (1,), width: int = 2, max_turns: int = 10, **rollout: Any
) -> RolloutConfig:
    tree = TreeConfig(True, width=width, branch_on="parts", branch_parts=branch_parts)
    return RolloutConfig(max_turns=max_turns, tree=tree, **rollout)


def play(config: RolloutConfig, engine: ScriptedEngine, client: PartsCounter | None = None) -> list[Episode]:
    client = client or PartsCounter()
    width = config.tree.width
    return asyncio.run(play_tree(client, engine, "test/Parts-v0", TASK, 7, "g", SAMPLING, config, width))


def boundaries(episode: Episode, upto: int | None = None) -> list[int]:
    """The indices of `episode`'s turns (before turn `upto`) that ended a part."""
    return [turn.index for turn in episode.turns[:upto] if turn.info.get(INFO_CONTEXT_RESET)]


def assert_branched_at_parts(leaves: list[Episode], branch_parts: tuple[int, ...]) -> None:
    """Every branch starts at the first turn of a part, after the k-th boundary for a k of `branch_parts`,
    and shares its parent's turns before it exactly."""
    by_id = {leaf.episode_id: leaf for leaf in leaves}
    for leaf in leaves:
        if leaf.parent_id is None:
            continue
        at = leaf.branch_turn
        assert at is not None and at - 1 in boundaries(leaf)  # the turn before it ended a part
        assert len(boundaries(leaf, at)) in branch_parts
        assert leaf.turns[:at] == by_id[leaf.parent_id].turns[:at]  # same tokens, rewards, states


def test_siblings_share_the_whole_first_part_and_fork_at_the_seconds_first_turn() -> None:
    client = PartsCounter()
    engine = CyclingEngine([ADD_1, ADD_1, ADD_1, ADD_2, ADD_4, ADD_1])  # part 1: three turns of add(1)
    root, branch = play(parts_config(), engine, client)
    assert boundaries(root, 3) == [2]  # part 1 ended at turn 2: not a turn the config could name
    assert root.parent_id is None and root.branch_turn is None
    assert branch.parent_id == root.episode_id and branch.branch_turn == 3
    assert branch.turns[:3] == root.turns[:3]
    assert branch.turns[3].prompt_ids == root.turns[3].prompt_ids  # the same prompt at the forked state
    # from the second part's first turn on each samples its own: the root add(2), the fork add(1)
    assert [root.turns[3].state_key, branch.turns[3].state_key] == ["2:2", "2:1"]
    assert_branched_at_parts([root, branch], (1,))
    # env steps: part 1 once, then each branch's own turns; the trainer counts the copied prefix once
    assert client.steps == 3 + (len(root.turns) - 3) + (len(branch.turns) - 3) == env_steps_of([root, branch])
    assert sorted(client.closed) == sorted(["s0", *client.forked])


def test_two_boundaries_make_two_levels_each_branch_forking_where_its_own_part_ends() -> None:
    engine = CyclingEngine([ADD_1, ADD_2, ADD_4, ADD_1])
    leaves = play(parts_config((1, 2)), engine)
    assert len(leaves) == 2**2 and TreeConfig(True, branch_on="parts", branch_parts=(1, 2)).levels == 2
    assert_branched_at_parts(leaves, (1, 2))
    root, _, fork, _ = leaves  # depth first: the root, its fork at part 3, the part-2 fork, its fork
    assert [leaf.branch_turn for leaf in leaves] == [None, 3, 2, 5]
    # part 2 took the root one turn (add(4)) and the part-2 fork three (add(1), add(1), add(2)): each
    # branch forked at its own boundary, not at a shared turn
    assert boundaries(root)[:2] == [1, 2] and boundaries(fork)[:2] == [1, 4]


def test_an_episode_that_ends_before_its_boundary_is_one_leaf() -> None:
    client = PartsCounter()
    leaves = play(parts_config(), ScriptedEngine([call("submit")]), client)
    assert len(leaves) == 1 and leaves[0].stop_reason == "terminated" and client.forked == []


def test_branches_that_run_out_of_turns_before_the_next_boundary_are_leaves() -> None:
    # add(1) only: part 1 ends at turn 2, part 2 would end at turn 5, past max_turns 5 (turns 0-4)
    leaves = play(parts_config((1, 2), max_turns=5), CyclingEngine([ADD_1]))
    assert [leaf.branch_turn for leaf in leaves] == [None, 3]
    assert all(leaf.stop_reason == "max_turns" and len(leaf.turns) == 5 for leaf in leaves)


def test_under_the_window_policy_every_sibling_starts_the_part_in_the_same_fresh_window() -> None:
    config = parts_config(context=ContextConfig(policy="window"))
    root, branch = play(config, CyclingEngine([ADD_1, ADD_2, ADD_4]))
    assert branch.branch_turn == 2  # part 1: add(1), add(2)
    for leaf in (root, branch):
        assert leaf.turns[2].segment == leaf.turns[1].segment + 1  # the boundary started a new window
    assert branch.turns[2].prompt_ids == root.turns[2].prompt_ids  # one context at the forked state
    assert_branched_at_parts([root, branch], (1,))


def test_collect_groups_makes_trees_times_width_to_the_levels_leaves_per_task() -> None:
    tasks = [TASK, {"id": "t2", "target": PART}]
    tree = TreeConfig(True, branch_on="parts", trees=2, branch_parts=(1, 2))  # width 0: from the group
    config = RolloutConfig(max_turns=10, tree=tree)
    engine = CyclingEngine([ADD_1, ADD_2, ADD_4])
    played = asyncio.run(collect_groups(PartsCounter(), engine, "e", tasks, 8, SAMPLING, config, 0))
    assert [episode.task_id for episode in played] == ["t1"] * 8 + ["t2"] * 8
    assert_branched_at_parts(played, (1, 2))


def test_parts_tree_configs_that_cannot_work_are_refused() -> None:
    with pytest.raises(ValueError, match="branch_parts must be distinct part boundaries >= 1"):
        TreeConfig(True, branch_on="parts", branch_parts=(0,))
    with pytest.raises(ValueError, match="strictly ascending, e.g. \\[1\\] or \\[1, 2\\]; got \\(2, 1\\)"):
        TreeConfig(True, branch_on="parts", branch_parts=(2, 1))
    with pytest.raises(ValueError, match="strictly ascending"):
        TreeConfig(True, branch_on="parts", branch_parts=(1, 1))
    with pytest.raises(ValueError, match="branch_parts \\(4,\\) must be below rollout.max_turns \\(4\\)"):
        parts_config((4,), max_turns=4)
    with pytest.raises(ValueError, match="2 part boundary\\(ies\\) of width w cannot make"):
        TreeConfig(True, branch_on="parts", branch_parts=(1, 2)).width_for(6)
    tree = {"enabled": True, "branch_on": "parts", "branch_parts": [1, 2]}
    config = build(RunConfig, {"rollout": {"tree": tree}}, "")
    assert config.rollout.tree.branch_parts == (1, 2) and config.rollout.tree.levels == 2
    assert config.rollout.tree.width_for(config.train.group_size) == 2  # the default group of 4: 2 x 2
    with pytest.raises(ConfigError, match="cannot make train.group_size=4"):
        build(RunConfig, {"rollout": {"tree": {**tree, "branch_parts": [1, 2, 3]}}}, "")

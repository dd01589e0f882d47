"""Tree rollouts (`agentrl/agent/tree.py`) with a scripted engine and an in-memory forking client (pure logic:
no model, no server; the fork endpoint itself is tested over HTTP and WebSocket in the service tests)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import torch
from test_rollout import SAMPLING, CounterClient, ScriptedEngine, call

from agentrl.agent.rollout_config import HarnessConfig, RolloutConfig, TreeConfig
from agentrl.agent.tree import collect_groups, play_tree
from agentrl.config import RunConfig
from agentrl.errors import ConfigError, ServiceUnavailable
from agentrl.trainer.step import training_samples
from agentrl.types import Episode, ForkedSession


@dataclass
class ForkingCounter(CounterClient):
    """`CounterClient` whose sessions fork: a fork copies the running total and the target."""

    forked: list[str] = field(default_factory=list)
    fail_fork: bool = False

    async def fork_session(self, session_id: str, n: int = 1) -> list[ForkedSession]:
        if self.fail_fork:
            raise ServiceUnavailable("the replica holding the parent was lost")
        made = []
        for _ in range(n):
            new = f"f{len(self.forked)}"
            self.forked.append(new)
            self.totals[new], self.targets[new] = self.totals[session_id], self.targets[session_id]
            made.append(ForkedSession(new, self.totals[new], 1))
        return made


class CyclingEngine(ScriptedEngine):
    """Replies with its scripted texts in turn, round and round (siblings get different replies)."""

    def __init__(self, replies: list[str]) -> None:
        super().__init__(replies)
        self.cycle, self.calls = list(replies), 0

    async def generate(self, prompt_ids: Any, params: Any) -> Any:
        self.replies = [self.cycle[self.calls % len(self.cycle)]]
        self.calls += 1
        return await super().generate(prompt_ids, params)


TASK = {"id": "t1", "target": 5}
REPLIES = [call("add", n=1), call("add", n=2), call("add", n=4)]


def tree_config(branch_turns: tuple[int, ...], width: int = 2, max_turns: int = 4) -> RolloutConfig:
    return RolloutConfig(max_turns=max_turns, tree=TreeConfig(True, branch_turns, width))


def play(
    client: ForkingCounter, config: RolloutConfig, engine: ScriptedEngine | None = None
) -> list[Episode]:
    engine = engine or CyclingEngine(REPLIES)
    width = config.tree.width
    return asyncio.run(play_tree(client, engine, "test/Counter-v0", TASK, 7, "g", SAMPLING, config, width))


def test_a_tree_shares_its_prefix_and_links_every_branch_to_its_parent() -> None:
    client = ForkingCounter()
    leaves = play(client, tree_config((1, 2), width=2))
    assert len(leaves) == 4
    root = leaves[0]
    assert root.parent_id is None and root.branch_turn is None
    by_id = {leaf.episode_id: leaf for leaf in leaves}
    for leaf in leaves[1:]:
        parent = by_id[leaf.parent_id]  # type: ignore[index]
        shared = leaf.branch_turn
        assert shared in (1, 2)
        assert leaf.turns[:shared] == parent.turns[:shared]  # the copied prefix: same tokens, same states
    assert all(len(leaf.turns) == 4 and leaf.stop_reason == "max_turns" for leaf in leaves)
    assert len({leaf.group_id for leaf in leaves}) == 1
    # env steps: 1 shared turn, 2 branches x 1 turn, then 4 leaves x 2 turns = 11, against 16 for 4 episodes
    assert client.steps == 1 + 2 * 1 + 4 * 2
    assert sorted(client.closed) == sorted(["s0", *client.forked])  # every session, forks included


def test_siblings_continue_from_the_forked_state_not_from_the_start() -> None:
    client = ForkingCounter()
    leaves = play(client, tree_config((1,), width=3, max_turns=2))
    first_states = {leaf.turns[0].state_key for leaf in leaves}
    assert first_states == {"1"}  # turn 0 was played once: add(1)
    assert {leaf.turns[1].state_key for leaf in leaves} == {"2", "3", "5"}  # each from total 1


def test_an_episode_that_ends_before_the_branch_turn_is_one_leaf() -> None:
    client = ForkingCounter()
    leaves = play(client, tree_config((2,), max_turns=3), ScriptedEngine([call("submit")]))
    assert len(leaves) == 1 and leaves[0].stop_reason == "terminated" and client.forked == []


def test_a_failed_fork_ends_that_branch_as_an_infrastructure_failure_with_its_turns() -> None:
    """With re-plays off (`infra_attempts=1`); re-plays: tests/unit/test_tree_replay.py."""
    client = ForkingCounter(fail_fork=True)
    leaves = play(client, replace(tree_config((1,)), infra_attempts=1))
    assert len(leaves) == 1
    assert leaves[0].stop_reason == "infra_error" and len(leaves[0].turns) == 1
    assert "lost" in str(leaves[0].error) and client.closed == ["s0"]


def test_a_root_that_cannot_reset_gives_one_failed_episode() -> None:
    client = ForkingCounter(fail_on_create=True)
    leaves = play(client, tree_config((1,)))
    assert [leaf.stop_reason for leaf in leaves] == ["infra_error"] and leaves[0].turns == ()


def test_collect_groups_plays_a_tree_per_task_or_flat_groups() -> None:
    tasks = [TASK, {"id": "t2", "target": 3}]
    treed = asyncio.run(
        collect_groups(
            ForkingCounter(), CyclingEngine(REPLIES), "e", tasks, 2, SAMPLING, tree_config((1,)), 0
        )
    )
    assert [e.task_id for e in treed] == ["t1", "t1", "t2", "t2"]
    assert [e.parent_id is None for e in treed] == [True, False, True, False]
    flat = asyncio.run(
        collect_groups(CounterClient(), CyclingEngine(REPLIES), "e", tasks, 2, SAMPLING, RolloutConfig(), 0)
    )
    assert len(flat) == 4 and all(e.parent_id is None for e in flat)


def test_a_group_of_one_is_played_flat_in_a_tree_run() -> None:
    """The held-out evaluation plays groups of one: a tree run must evaluate, not refuse the group size."""
    client = ForkingCounter()
    tasks = [TASK, {"id": "t2", "target": 3}]
    played = asyncio.run(
        collect_groups(client, CyclingEngine(REPLIES), "e", tasks, 1, SAMPLING, tree_config((1, 2)), 0)
    )
    assert [e.task_id for e in played] == ["t1", "t2"] and client.forked == []
    assert all(e.parent_id is None and len(e.turns) == 4 for e in played)


def test_tree_configs_that_cannot_work_are_refused() -> None:
    with pytest.raises(ValueError, match="harness"):
        RolloutConfig(tree=TreeConfig(True), harness=HarnessConfig(target="m:f"))
    with pytest.raises(ValueError, match="below rollout.max_turns"):
        RolloutConfig(max_turns=2, tree=TreeConfig(True, (2,)))
    with pytest.raises(ValueError, match="ascending"):
        TreeConfig(True, (2, 1))
    assert TreeConfig(True, (1, 2)).width_for(9) == 3 and TreeConfig(True, (1,)).width_for(6) == 6
    with pytest.raises(ValueError, match="cannot make train.group_size=6"):
        TreeConfig(True, (1, 2)).width_for(6)
    with pytest.raises(ConfigError, match="cannot make train.group_size=4"):
        RunConfig(rollout=RolloutConfig(tree=TreeConfig(True, (1,), width=3)))
    RunConfig(rollout=RolloutConfig(tree=TreeConfig(True, (1, 2))))  # 2 x 2 leaves: the default group of 4


def test_a_branch_trains_only_its_own_turns_the_copied_prefix_is_context() -> None:
    leaves = play(ForkingCounter(), tree_config((2,), width=2))
    root, branch = leaves
    assert branch.branch_turn == 2
    advantages = [1.0] * len(branch.turns)
    (sample,) = training_samples([branch], [advantages], 10_000)
    (whole,) = training_samples([root], [advantages], 10_000)
    assert torch.equal(sample.input_ids[: len(whole.input_ids)][:10], whole.input_ids[:10])  # same context
    own = sum(len(turn.completion_ids) for turn in branch.turns[2:])
    assert sample.loss_mask.sum().item() == own  # the two copied turns carry no loss
    assert whole.loss_mask.sum().item() == sum(len(turn.completion_ids) for turn in root.turns)

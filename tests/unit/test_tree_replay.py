"""Tree rollouts re-playing a branch that failed for infrastructure reasons (`agentrl/agent/tree.py`,
`replaying`, `fork_at`, `reopen`): the in-memory forking counter env of `test_tree_rollout.py` with
failures injected where each test says, and scripted engines whose every sampled turn is its own, so a
turn that was discarded can be looked for in every episode (pure logic: no model, no server)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from test_rollout import SAMPLING, ScriptedEngine, call
from test_tree_entropy import EntropyEngine, by_turn, entropy_config
from test_tree_rollout import TASK, ForkingCounter, tree_config

from agentrl.agent import tree
from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.retry import RetryConfig
from agentrl.agent.rollout_config import RolloutConfig
from agentrl.agent.tree import BRANCH_INFO_KEYS, play_tree, reset_mismatch, step_mismatch
from agentrl.env.core import StepResult
from agentrl.errors import ServiceUnavailable
from agentrl.types import Action, Episode, ForkedSession, SessionStart, Turn


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Re-plays without the wait before each (`RetryConfig.backoff_s`), which only slows these tests."""
    monkeypatch.setattr(tree, "RetryConfig", functools.partial(RetryConfig, backoff_s=0.0))
    yield


@dataclass
class FailingCounter(ForkingCounter):
    """`ForkingCounter` whose infrastructure fails where a test says: the first `fork_failures` fork calls;
    every fork call on a session in `unforkable`; every step of a session after the `lives[session]` steps
    it survives (it is lost); the first `create_failures` resets. With `drift`, each new session starts one
    higher than the one before (an env that is not deterministic). `stepped`: each session's actions."""

    fork_failures: int = 0
    unforkable: set[str] = field(default_factory=set)
    lives: dict[str, int] = field(default_factory=dict)
    create_failures: int = 0
    drift: bool = False
    stepped: dict[str, list[Action]] = field(default_factory=dict)

    async def create_session(self, env_id: str, task: Mapping[str, Any], seed: int) -> Any:
        if self.create_failures:
            self.create_failures -= 1
            raise ServiceUnavailable("the replica was lost during the reset")
        start = await super().create_session(env_id, task, seed)
        if self.drift:
            self.totals[start.session_id] = len(self.created) - 1
        return start

    async def fork_session(self, session_id: str, n: int = 1) -> list[ForkedSession]:
        if self.fork_failures or session_id in self.unforkable:
            self.fork_failures = max(0, self.fork_failures - 1)
            raise ServiceUnavailable(f"the fork of {session_id} failed")
        return await super().fork_session(session_id, n)

    async def step(self, session_id: str, action: Action) -> StepResult:
        taken = self.stepped.setdefault(session_id, [])
        if len(taken) >= self.lives.get(session_id, len(taken) + 1):
            raise ServiceUnavailable(f"the sandbox of {session_id} was lost")
        result = await super().step(session_id, action)
        taken.append(action)
        return result


class CountingEngine(ScriptedEngine):
    """Replies add(n), n the number of its calls so far: every sampled turn is its own."""

    def __init__(self) -> None:
        super().__init__([])
        self.calls = 0

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        self.calls += 1
        self.replies = [call("add", n=self.calls)]
        return await super().generate(prompt_ids, params)


class SeededEngine(ScriptedEngine):
    """Replies add(n), n a function of the request's sampler seed alone (a seeded sampler)."""

    def __init__(self) -> None:
        super().__init__([])

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        assert params.seed is not None
        self.replies = [call("add", n=params.seed % 9 + 1)]
        return await super().generate(prompt_ids, params)


def play(
    client: FailingCounter,
    config: RolloutConfig,
    engine: ScriptedEngine,
    width: int = 2,
    sampler_seed: int | None = None,
) -> list[Episode]:
    return asyncio.run(
        play_tree(client, engine, "test/Counter-v0", TASK, 7, "g", SAMPLING, config, width, sampler_seed)
    )


def assert_prefixes_are_the_parents(leaves: list[Episode]) -> None:
    by_id = {leaf.episode_id: leaf for leaf in leaves}
    for leaf in leaves:
        if leaf.parent_id is not None:
            shared = leaf.branch_turn
            assert shared is not None and leaf.turns[:shared] == by_id[leaf.parent_id].turns[:shared]


def actions(leaves: list[Episode]) -> list[Action]:
    return [turn.action for leaf in leaves for turn in leaf.turns]


def test_a_failed_fork_is_taken_again_from_the_same_session_and_no_turn_is_lost() -> None:
    client, engine = FailingCounter(fork_failures=1), CountingEngine()
    leaves = play(client, tree_config((1, 2)), engine)
    assert len(leaves) == 4 and all(
        leaf.stop_reason == "max_turns" and len(leaf.turns) == 4 for leaf in leaves
    )
    assert_prefixes_are_the_parents(leaves)
    assert [leaf.branch_turn for leaf in leaves] == [None, 2, 1, 2]
    # nothing was played again: every turn sampled was stepped once and is in the tree (11 steps, as
    # without the failure); only the two leaves under the fork taken twice count a second attempt
    assert client.steps == engine.calls == 1 + 2 * 1 + 4 * 2
    assert len({turn.text for leaf in leaves for turn in leaf.turns}) == 11
    assert [leaf.attempts for leaf in leaves] == [1, 1, 2, 2]
    assert sorted(client.closed) == sorted(["s0", *client.forked])


def test_a_branch_whose_session_is_lost_is_played_again_from_its_branch_point() -> None:
    client, engine = FailingCounter(lives={"f0": 1}), CountingEngine()  # the fork is lost at its 2nd step
    root, fork = play(client, tree_config((1,), width=2, max_turns=4), engine)
    assert fork.parent_id == root.episode_id and fork.branch_turn == 1 and fork.turns[:1] == root.turns[:1]
    assert fork.stop_reason == "max_turns" and len(fork.turns) == 4
    assert (root.attempts, fork.attempts) == (1, 2)
    # a fresh session reset with the tree's seed, replayed the copied turn 0, then played the fork's turns
    assert client.created == [("t1", 7), ("t1", 7)]
    assert client.stepped["s1"] == [turn.action for turn in fork.turns]
    # the turn the lost session played after the branch point is in no episode
    (lost,) = client.stepped["f0"]
    assert lost not in actions([root, fork])
    assert sorted(client.closed) == ["f0", "s0", "s1"]


def test_a_lost_root_session_after_the_branch_point_replays_only_its_own_branch() -> None:
    client, engine = FailingCounter(lives={"s0": 2}), CountingEngine()  # s0 is lost at turn 2
    root, fork = play(client, tree_config((1,), width=2, max_turns=4), engine)
    assert root.parent_id is None and fork.parent_id == root.episode_id  # the links are unchanged
    assert fork.turns[:1] == root.turns[:1] and (root.attempts, fork.attempts) == (2, 1)
    assert client.stepped["s1"] == [turn.action for turn in root.turns]  # replayed turn 0, then its own
    assert client.stepped["s0"][1] not in actions([root, fork])  # the turn s0 played before it was lost


def test_a_fork_whose_parent_session_is_lost_too_replays_the_parents_branch() -> None:
    # the fork made at turn 1 (f0) cannot fork at turn 2: its branch (turn 1 on) is played again from turn 1
    client, engine = FailingCounter(unforkable={"f0"}), CountingEngine()
    leaves = play(client, tree_config((1, 2)), engine)
    assert len(leaves) == 4 and not any(leaf.error for leaf in leaves)
    assert_prefixes_are_the_parents(leaves)
    assert [leaf.attempts for leaf in leaves] == [1, 1, 2, 2]
    fork = leaves[2]
    assert fork.branch_turn == 1 and client.stepped["s1"][:3] == [turn.action for turn in fork.turns[:3]]
    (discarded,) = client.stepped["f0"]  # its turn 1, played before its forks failed
    assert discarded not in actions(leaves)


def test_the_trunks_session_lost_plays_the_whole_tree_again_from_reset() -> None:
    client, engine = FailingCounter(lives={"s0": 0}), CountingEngine()
    leaves = play(client, tree_config((1,)), engine)
    assert len(leaves) == 2 and all(leaf.stop_reason == "max_turns" for leaf in leaves)
    assert [leaf.attempts for leaf in leaves] == [2, 2] and client.created == [("t1", 7), ("t1", 7)]
    assert leaves[0].turns[0].action == client.stepped["s1"][0]


def test_a_root_whose_reset_failed_once_is_played_again_from_reset() -> None:
    leaves = play(FailingCounter(create_failures=1), tree_config((1,)), CountingEngine())
    assert len(leaves) == 2 and [leaf.attempts for leaf in leaves] == [2, 2]
    assert not any(leaf.error for leaf in leaves)
    config = replace(tree_config((1,)), infra_attempts=2)
    (failed,) = play(FailingCounter(create_failures=2), config, CountingEngine())
    assert failed.stop_reason == "infra_error" and failed.turns == () and failed.attempts == 2


def test_attempts_exhausted_leave_the_branch_an_infrastructure_failure_with_its_last_plays_turns() -> None:
    client = FailingCounter(lives={"f0": 1, "s1": 2, "s2": 2})  # every play of the fork is lost at turn 2
    root, fork = play(client, tree_config((1,), width=2, max_turns=4), CountingEngine())
    assert root.stop_reason == "max_turns" and root.attempts == 1
    assert fork.stop_reason == "infra_error" and "was lost" in str(fork.error) and fork.attempts == 3
    assert fork.turns[:1] == root.turns[:1] and len(fork.turns) == 2
    assert fork.turns[1].action == client.stepped["s2"][1]  # the last play's own turn
    assert sorted(client.closed) == ["f0", "s0", "s1", "s2"]


def test_a_fork_that_failed_every_time_plays_the_whole_tree_until_the_attempts_are_spent() -> None:
    client = FailingCounter(unforkable={"s0", "s1"})
    (failed,) = play(client, replace(tree_config((1,)), infra_attempts=2), CountingEngine())
    assert failed.stop_reason == "infra_error" and len(failed.turns) == 1 and failed.attempts == 2
    assert client.closed == ["s0", "s1"]


def test_an_env_that_replays_elsewhere_keeps_the_branch_an_infrastructure_failure() -> None:
    client = FailingCounter(lives={"f0": 1}, drift=True)  # a fresh session starts at 1, not 0
    root, fork = play(client, tree_config((1,), width=2, max_turns=4), CountingEngine())
    assert root.stop_reason == "max_turns"
    assert fork.stop_reason == "infra_error" and "not re-played" in str(fork.error)
    assert "replaying turn 0's action gave another observation" in str(fork.error)
    assert len(fork.turns) == 2 and fork.attempts == 2  # the turns of the play that was lost
    assert client.stepped["s1"] == [root.turns[0].action]  # the replay stopped where it diverged


def test_a_seeded_tree_is_the_same_whether_or_not_its_branches_were_replayed() -> None:
    config = tree_config((1, 2))
    clean = play(FailingCounter(), config, SeededEngine(), sampler_seed=11)
    failing = FailingCounter(fork_failures=1, lives={"s0": 3, "f0": 1})  # a re-fork, two lost sessions
    replayed = play(failing, config, SeededEngine(), sampler_seed=11)
    assert [leaf.turns for leaf in replayed] == [leaf.turns for leaf in clean]
    assert [leaf.branch_turn for leaf in replayed] == [leaf.branch_turn for leaf in clean]
    assert [leaf.attempts for leaf in clean] == [1, 1, 1, 1]
    assert [leaf.attempts for leaf in replayed] == [2, 1, 3, 2]
    assert len({turn.text for leaf in clean for turn in leaf.turns}) > 1  # the seeds made different turns


def test_an_entropy_branch_played_again_samples_its_branch_turn_again_and_keeps_its_mark() -> None:
    # the branch point fires at turn 2; the root's session is lost when the env sees its turn 2
    client, engine = FailingCounter(lives={"s0": 2}), EntropyEngine(by_turn(1.0, 1.5, 2.5, 9.0))
    config = entropy_config(entropy_threshold=1.0)
    root, fork = play(client, config, engine)
    assert fork.branch_turn == 2 and fork.turns[:2] == root.turns[:2]
    assert (root.attempts, fork.attempts) == (2, 1) and len(root.turns) == 4
    assert client.stepped["s1"] == [turn.action for turn in root.turns]  # turns 0-1 replayed, 2-3 its own
    for leaf in (root, fork):
        assert {key: leaf.turns[2].info[key] for key in BRANCH_INFO_KEYS} == {
            "branch_entropy": 2.5,
            "branch_entropy_initial": 1.0,
            "branch_fallback": False,
        }
    # turns 0-1 once, the lost turn 2 once, the fork's turn 2, the root's turn 2 again, turn 3 in each
    assert engine.calls == 2 + 1 + 1 + 1 + 2


def test_a_replay_compares_every_field_a_fork_keeps() -> None:
    action = Action(call("add", n=1))
    turn = Turn(0, (1,), (2,), (-0.5,), "t", action, "total=1", 0.0, False, "1", False, False, {})
    assert step_mismatch(turn, StepResult("total=1", 0.0, False, False, {"state_key": "1", "x": 1})) is None
    assert step_mismatch(turn, StepResult("total=1", 0.0, False, False, {"state_key": "2"})) == (
        "another state_key ('2'; recorded '1')"
    )
    assert "another reward" in str(step_mismatch(turn, StepResult("total=1", 1.0, False, False, {})))
    first = SessionStart("s0", "Reach 5.", {"state_key": "0"}, [], [])
    assert reset_mismatch(first, replace(first, session_id="s1")) is None
    assert "another observation" in str(reset_mismatch(first, replace(first, observation="Reach 6.")))

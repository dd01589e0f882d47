"""Tree rollouts re-playing what a lost env-service replica held (agentrl/agent/tree.py, "Failures"), against
two real replicas (EmbeddedService children, uvicorn on loopback ports) behind one failing-over EnvClient.

What this is: trees of `test/GuessNumber-v0` (tests/fixtures_envs.py: a pure-Python env that forks by copy
and whose steps are pure functions of the task and the actions) grown by `collect_groups`, the trainer's
rollout entry, with a scripted engine that needs no model: the request's sampler seed tells it which branch
(its path in the tree) samples which turn, so the tree it makes is known in advance, and a test stops a
replica at a chosen turn of a chosen branch (in the engine, before that turn is sampled). A tree's sessions
all live on the replica that reset its root (a fork stays on its parent's replica), so losing that replica
loses every branch that was still playing; the cases:
- lost after the first fork: every branch still playing is re-played from its branch point on the survivor
  (a fresh session, the prefix actions replayed and checked), and the tree is the one the policy makes,
  with every leaf, link and reward it would have had;
- lost before the first fork (in the trunk): the whole tree is played again from reset on the survivor;
- the re-play cannot succeed, because no replica is left, or because the survivor's env answers a replayed
  action otherwise (a replica running the env with other settings): the branches end as infrastructure
  failures (`Episode.is_infra_failure`), never as played episodes.

What this is not: the compose stack's load balancer, a Ray fleet, a sandbox env or a replay-fork env (web),
a tree branching on entropy, a replica that hangs instead of dying, or one lost during a re-play. The stop is
timed by the branch that samples (it has no request in flight); another branch's request may be, and either
way that branch fails before its next fork, so each case's outcome is the same every run.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fixtures_envs import GUESS_NUMBER_ID
from tiny_tokenizers import byte_tokenizer

from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.parsing import format_tool_call
from agentrl.agent.rollout import derive_seed
from agentrl.agent.rollout_config import RolloutConfig, TreeConfig
from agentrl.agent.tree import collect_groups, tree_sampler_seed
from agentrl.client import ClientConfig, EnvClient, Transport
from agentrl.service.embedded import EmbeddedService
from agentrl.types import Episode, ToolCall

SEED = 5
TARGET = 50
TASK = {"id": "guess-50", "target": TARGET}
MAX_TURNS = 4
BranchPath = tuple[int, ...]
"""A branch's place in its tree: the branch number taken at each branch point from the root."""


def guess(path: BranchPath, turn: int) -> int:
    """The policy: below the target (answered "higher") until the last turn, which hits it on the branches
    whose path sums to an even number (reward 1) and overshoots on the others ("lower", reward 0). Turn 0's
    guess is the highest below the target, so the interval the env keeps (its state key) shows, at every
    later turn, whether the env that answered it had seen turn 0 (a re-played branch's fresh session)."""
    if turn == 0:
        return TARGET - 5
    if turn < MAX_TURNS - 1:
        return 20 + 10 * turn + sum(path)
    return TARGET if sum(path) % 2 == 0 else TARGET + 20


def answer(number: int) -> tuple[str, float]:
    """What GuessNumber answers to a guess of `number`, and its reward."""
    if number == TARGET:
        return "correct", 1.0
    return ("higher" if number < TARGET else "lower"), 0.0


class TreeGuesser:
    """An engine whose every completion is one `guess` call, `guess(path, turn)` for the branch at `path`
    sampling turn `turn`, recognised by the request's seed (`collect_groups` with seeded sampling derives it
    from the tree's sampler seed, the path and the turn); `before[(path, turn)]` runs, once, before that
    turn is sampled. `sampled`: every (path, turn) sampled, in order."""

    def __init__(
        self, levels: int, width: int, before: Mapping[tuple[BranchPath, int], Callable[[], None]]
    ) -> None:
        self.tokenizer = byte_tokenizer(pad=False)
        tree_seed = tree_sampler_seed(SEED, 0, 0)
        paths = [p for n in range(levels + 1) for p in itertools.product(range(width), repeat=n)]
        self.where = {
            derive_seed(derive_seed(tree_seed, *path), turn): (path, turn)
            for path in paths
            for turn in range(MAX_TURNS)
        }
        self.before = dict(before)
        self.sampled: list[tuple[BranchPath, int]] = []

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        assert params.seed is not None, "the tree is grown with seeded sampling"
        path, turn = self.where[params.seed]
        self.sampled.append((path, turn))
        hook = self.before.pop((path, turn), None)
        if hook is not None:
            hook()
        text = format_tool_call(ToolCall("guess", {"number": guess(path, turn)}))
        ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
        return Completion(tuple(ids), tuple(-0.5 for _ in ids), text, "stop", True)


@contextlib.contextmanager
def replicas(
    tmp_path: Path, b_settings: Mapping[str, Any] | None = None
) -> Iterator[tuple[EmbeddedService, EmbeddedService]]:
    """Two replicas with the test envs; `b_settings`: GuessNumber's constructor arguments on b only."""
    b_kwargs = None if b_settings is None else {GUESS_NUMBER_ID: b_settings}
    a = EmbeddedService(tmp_path / "a.log", preload=["fixtures_envs"])
    b = EmbeddedService(tmp_path / "b.log", preload=["fixtures_envs"], env_kwargs=b_kwargs)
    try:
        with ThreadPoolExecutor(2) as starting:  # both start at once: most of this file's time
            list(starting.map(EmbeddedService.start, (a, b)))
        yield a, b
    finally:
        a.stop()
        b.stop()


def grow(
    a: EmbeddedService,
    b: EmbeddedService,
    engine: TreeGuesser,
    branch_turns: tuple[int, ...],
    infra_attempts: int = 3,
    wire: Transport = "http",
) -> list[Episode]:
    """One task's tree (`collect_groups`, seeded sampling) over a client of a then b speaking `wire`: the
    first session, the root, is created on a, and so are its forks."""
    width = 2
    config = RolloutConfig(
        max_turns=MAX_TURNS,
        max_context_tokens=8192,
        infra_attempts=infra_attempts,
        seeded_sampling=True,
        tree=TreeConfig(True, branch_turns, width),
    )

    async def main() -> list[Episode]:
        client_config = ClientConfig(retries=1, backoff_s=0.01, transport=wire)
        async with EnvClient([a.url, b.url], config=client_config) as client:
            return await collect_groups(
                client,
                engine,
                GUESS_NUMBER_ID,
                [TASK],
                width ** len(branch_turns),
                SamplingParams(max_new_tokens=64),
                config,
                SEED,
                progress=False,
            )

    return asyncio.run(main())


def leaf_paths(levels: int) -> list[BranchPath]:
    """The leaves' paths in the order a tree lists them (depth first, the branch that goes on first)."""
    return list(itertools.product(range(2), repeat=levels))


def assert_the_policys_tree(leaves: list[Episode], branch_turns: tuple[int, ...]) -> None:
    """`leaves` are the tree the policy makes, every turn as the env answers it: each leaf's turns are those
    of the branches on its path (turn t played by the branch whose path has one entry per branch turn at or
    before t), and each leaf links to the leaf it branched from at the right turn."""
    paths = leaf_paths(len(branch_turns))
    assert len(leaves) == len(paths) and not any(leaf.is_infra_failure for leaf in leaves)
    ids = {leaf.episode_id: path for leaf, path in zip(leaves, paths, strict=True)}
    for leaf, path in zip(leaves, paths, strict=True):
        low, high = 1, 100  # the interval the env keeps as the state key
        for turn in leaf.turns:
            number = guess(path[: sum(point <= turn.index for point in branch_turns)], turn.index)
            low, high = (max(low, number + 1), high) if number < TARGET else (low, high)
            low, high = (low, min(high, number - 1)) if number > TARGET else (low, high)
            call = turn.action.tool_calls[0]
            assert (call.name, call.arguments) == ("guess", {"number": number})
            assert (turn.observation, turn.reward) == answer(number)
            assert turn.state_key == f"{low}-{high}"
        assert len(leaf.turns) == MAX_TURNS and leaf.reward == (1.0 if sum(path) % 2 == 0 else 0.0)
        assert leaf.stop_reason == ("terminated" if leaf.reward else "max_turns")
        # the branch: the last branch point where the path did not go on in the parent's session
        forked = [level for level, number in enumerate(path) if number != 0]
        if not forked:
            assert (leaf.parent_id, leaf.branch_turn) == (None, None)
            continue
        level = forked[-1]
        parent = (*path[:level], *(0 for _ in path[level:]))
        assert ids[str(leaf.parent_id)] == parent and leaf.branch_turn == branch_turns[level]


def counters(replica: EmbeddedService) -> tuple[int, int, int]:
    """The replica's sessions created (forks included) and steps so far, and its sessions open now."""
    metrics = httpx.get(f"{replica.url}/metrics", trust_env=False).text
    live = httpx.get(f"{replica.url}/healthz", trust_env=False).json()["sessions"]

    def value(name: str) -> int:
        found = re.search(rf"^{name} (\d+)", metrics, re.MULTILINE)
        assert found is not None, f"{name} not in /metrics"
        return int(found.group(1))

    return value("agentrl_service_sessions_created_total"), value("agentrl_service_step_seconds_count"), live


@pytest.mark.parametrize("wire", ["http", "ws"])
def test_branches_lost_with_their_replica_after_the_fork_are_re_played_on_the_survivor(
    wire: Transport, tmp_path: Path
) -> None:
    branch_turns = (1, 2)  # 4 leaves: forks at turn 1, then each branch forks again at turn 2
    with replicas(tmp_path) as (a, b):
        # a dies when the first fork samples its turn 1: both branches of the first branch point were
        # playing on a (the root's session went on as branch (0,)), neither had reached turn 2's fork
        engine = TreeGuesser(len(branch_turns), 2, {((1,), 1): a.stop})
        leaves = grow(a, b, engine, branch_turns, wire=wire)
        created, steps, live = counters(b)
    assert_the_policys_tree(leaves, branch_turns)
    assert [leaf.attempts for leaf in leaves] == [2, 2, 2, 2]  # each played once more, on its path's branch
    assert engine.sampled.count(((1,), 1)) == 2  # the turn sampled when a died was sampled again
    # b: per branch, a session reset and the copied turn 0 replayed on it (checked against the record),
    # turn 1 played, one fork at turn 2, and two leaves' turns 2-3; nothing is left open
    assert (created, steps, live) == (2 * 2, 2 * (1 + 1 + 2 * 2), 0)


def test_a_trunk_lost_before_the_first_fork_plays_the_whole_tree_again(tmp_path: Path) -> None:
    branch_turns = (2,)
    with replicas(tmp_path) as (a, b):
        engine = TreeGuesser(len(branch_turns), 2, {((), 1): a.stop})  # turn 0 was stepped on a
        leaves = grow(a, b, engine, branch_turns)
        created, steps, live = counters(b)
    assert_the_policys_tree(leaves, branch_turns)
    assert [leaf.attempts for leaf in leaves] == [2, 2]
    assert [turn for path, turn in engine.sampled if not path] == [0, 1, 0, 1]  # the trunk from reset
    # b: the root's reset and its fork; the trunk's 2 turns and each leaf's 2 after the branch point
    assert (created, steps, live) == (2, 2 + 2 * 2, 0)


def test_branches_left_with_no_replica_are_infrastructure_failures(tmp_path: Path) -> None:
    branch_turns = (1,)
    with replicas(tmp_path) as (a, b):

        def stop_both() -> None:
            a.stop()
            b.stop()

        engine = TreeGuesser(len(branch_turns), 2, {((1,), 1): stop_both})
        leaves = grow(a, b, engine, branch_turns, infra_attempts=2)
    assert len(leaves) == 2  # each branch ended before its own leaves (it had none to fork)
    for leaf in leaves:
        assert leaf.is_infra_failure and not leaf.success and leaf.attempts == 2
        assert "no env service replica could create a session" in str(leaf.error)
        # the lost play keeps what it played before the stop, the trunk's turn 0 (never trained on)
        assert [turn.observation for turn in leaf.turns] == ["higher"]
    assert (leaves[1].parent_id, leaves[1].branch_turn) == (leaves[0].episode_id, 1)


def test_a_branch_whose_replay_diverges_stays_an_infrastructure_failure(tmp_path: Path) -> None:
    branch_turns = (1,)
    # b runs GuessNumber allowing one guess: the recorded turn 0 ("higher", the episode going on) replays
    # there as the last guess (truncated), so no branch can be brought back to its branch point on b
    with replicas(tmp_path, b_settings={"max_guesses": 1}) as (a, b):
        engine = TreeGuesser(len(branch_turns), 2, {((1,), 1): a.stop})
        leaves = grow(a, b, engine, branch_turns)
        created, steps, live = counters(b)
    assert len(leaves) == 2
    for leaf in leaves:
        assert leaf.is_infra_failure and not leaf.success and leaf.attempts == 2  # not tried a third time
        assert "not re-played: replaying turn 0's action gave another truncated" in str(leaf.error)
        assert [(turn.observation, turn.truncated) for turn in leaf.turns] == [("higher", False)]
    # b: each branch's fresh session, and the one replayed step that diverged; both closed
    assert (created, steps, live) == (2, 2, 0)

"""Tree rollouts (`rollout.tree`): a task's group played as a tree of episodes branching at forked env states.

What this is: `play_tree`, and `collect_groups`, which the trainer calls for every rollout phase: trees
with `rollout.tree.enabled`, else `rollout.collect_rollouts`'s flat groups. `play_tree` plays the task's
episode up to the first branch turn, forks the env session (`ForkingClient.fork_session`: the env's own
fork, a sandbox's workdir copy, or a replay; docs/env_contract.md) and continues `width` branches from that
same state and the same token context, each sampling its own continuation; every later branch turn
branches each branch again. The leaves are the group: `width ** len(branch_turns)` episodes
(`train.group_size`), each with all its turns (the shared prefix copied: the same tokens, rewards and state
keys), linked by `parent_id` / `branch_turn` (`agentrl.types.Episode`), so siblings share a real state by
construction and every step-level estimator has anchors (agentrl/credit, "Trees").

What it saves: a tree of G leaves of T turns branching once at turn t costs t + G (T - t) env steps and
decoded turns instead of G T; the engine's prefix cache makes siblings reuse the parent's KV (the cached
engine finds the longest cached prefix; vLLM's prefix caching does the same), and the shared-prefix update
trains the copied prefix once (`shared_copy` in the credit batch).

Failures: the root session's reset failing for infrastructure reasons gives one `infra_error` episode; a
branch whose session or fork fails so ends its leaves as `infra_error` with the turns they had (kept,
never trained on); the other branches go on. Branches are not re-played (`rollout.infra_attempts` applies
to flat groups). Every session the tree opened (the root and each fork) is closed when the tree is done.

Where a branch forks (`rollout.tree.branch_on`): at the fixed `branch_turns` (`grow`), or on entropy
(`grow_on_entropy`, after ARPO: Dong et al. 2025, arXiv 2507.19849): a branch samples its turn t in its
window (t >= 1, after a tool result), and when that turn's first-token entropy
(`Completion.first_token_entropy`) exceeds the tree's turn-0 value by more than `entropy_threshold`
(`fires`), or at the window's last turn when it never did, the session is forked before the env sees turn t:
the branch that goes on keeps the turn it sampled, each fork samples its own turn t from the same state and
context. A branch point so chosen is recorded exactly as a fixed one (`parent_id`, `branch_turn`, the copied
prefix), so credit and the update do not know how it was chosen; each branch's turn t also carries the
values that decided it in its `info` (`BRANCH_INFO_KEYS`).

What this is not: harness episodes (refused in the config: a harness keeps its own state outside agentrl),
or ARPO's sampling budget (a variable number of branches per tree, branching with a probability): a tree
has `width ** levels` leaves whatever the rule, so a tree and a flat group compare at equal group size.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from agentrl.agent.engines.base import Completion, Engine, SamplingParams
from agentrl.agent.prompting import render_first_prompt
from agentrl.agent.rollout import (
    Walk,
    collect_rollouts,
    derive_seed,
    episode_seed,
    fits_next_turn,
    play_sampled,
    play_turns,
    run_concurrently,
    run_episode,
    sample_turn,
    walk_episode,
)
from agentrl.agent.rollout_config import RolloutConfig
from agentrl.agent.session import (
    EpisodePlayer,
    EpisodeSession,
    ForkingClient,
    SessionClient,
    close_quietly,
)
from agentrl.errors import INFRA_ERRORS, ConfigError
from agentrl.types import Episode, SessionStart


@dataclass
class Tree:
    """What every branch of one tree shares: the client, engine, sampling and config, and the sessions to
    close when the tree is done (the root's is closed by its `EpisodeSession`)."""

    client: ForkingClient
    engine: Engine
    sampling: SamplingParams
    config: RolloutConfig
    width: int
    forks: list[str]


async def play_tree(
    client: ForkingClient,
    engine: Engine,
    env_id: str,
    task: Mapping[str, Any],
    seed: int,
    group_id: str,
    sampling: SamplingParams,
    config: RolloutConfig,
    width: int,
    sampler_seed: int | None = None,
) -> list[Episode]:
    """The `width ** levels` leaves of one tree of `task` (module docstring), root first, then each
    branch's in order, depth first."""
    tree = Tree(client, engine, sampling, config, width, forks=[])
    leaves: list[tuple[Walk, str | None]] = []
    start: SessionStart | None = None
    try:
        async with EpisodeSession(client) as session:
            start = await session.open(env_id, task, seed)
            pending = render_first_prompt(
                engine.tokenizer, start.tools, start.examples, start.observation, config.instructions
            )
            root = Walk(start.session_id, pending)
            if config.tree.branch_on == "entropy":
                level = Level(config.tree.levels, config.tree.min_turn, sampler_seed=sampler_seed)
                leaves = await grow_on_entropy(tree, root, level)
            else:
                leaves = await grow(tree, root, config.tree.branch_turns, sampler_seed, path=())
    finally:
        await close_forks(tree)
    if session.infra_error is not None:  # the root's reset failed: no tree at all
        return [walk_episode(None, env_id, task, seed, group_id, start, str(session.infra_error))]
    return [walk_episode(walk, env_id, task, seed, group_id, start, error) for walk, error in leaves]


async def grow(
    tree: Tree, walk: Walk, branch_turns: Sequence[int], sampler_seed: int | None, path: tuple[int, ...]
) -> list[tuple[Walk, str | None]]:
    """Play `walk` to its next branch turn (or its end), then branch it; its leaves with their errors."""
    config = tree.config
    until = branch_turns[0] if branch_turns else config.max_turns
    seed = None if sampler_seed is None else derive_seed(sampler_seed, *path)
    try:
        await play_turns(tree.client, tree.engine, walk, until, tree.sampling, config, seed)
        if not branch_turns or walk.stop_reason is not None:
            return [(walk, None)]
        forks = await tree.client.fork_session(walk.session_id, tree.width - 1)
    except INFRA_ERRORS as exc:
        return [(walk, str(exc))]
    tree.forks.extend(fork.session_id for fork in forks)
    branches = [walk, *(walk.branch(fork.session_id) for fork in forks)]
    grown = await run_concurrently(
        grow(tree, branch, branch_turns[1:], sampler_seed, (*path, number))
        for number, branch in enumerate(branches)
    )
    return [leaf for leaves in grown for leaf in leaves]


BRANCH_INFO_KEYS = ("branch_entropy", "branch_entropy_initial", "branch_fallback")
"""What a branch point chosen on entropy adds to the `info` of its turn in every branch through it: the
turn's first-token entropy, the tree's turn-0 value it was compared with, and whether the window ended
without the threshold being exceeded (the branch then fired at the window's last turn)."""


@dataclass(frozen=True)
class Level:
    """Where a branch growing on entropy stands: the branch points still to come on its path (`left`), the
    first turn the next one may be, the tree's turn-0 first-token entropy (None until turn 0 is sampled),
    and the branch's place in the tree (`path`, from which its sampler seed is derived, as in `grow`)."""

    left: int
    first: int
    initial: float | None = None
    sampler_seed: int | None = None
    path: tuple[int, ...] = ()


@dataclass(frozen=True)
class BranchPoint:
    """A branch point that fired: its turn, the completion the branch that goes on sampled for it (the env
    has not seen it yet), that completion's first-token entropy, the tree's turn-0 value, and why it fired
    (`fires`)."""

    turn: int
    completion: Completion
    entropy: float
    initial: float
    fired: str

    @property
    def info(self) -> dict[str, Any]:
        """What each branch's turn `turn` records (`BRANCH_INFO_KEYS`)."""
        values = (self.entropy, self.initial, self.fired == "window_end")
        return dict(zip(BRANCH_INFO_KEYS, values, strict=True))


async def grow_on_entropy(
    tree: Tree,
    walk: Walk,
    level: Level,
    sampled: Completion | None = None,
    mark: Mapping[str, Any] | None = None,
) -> list[tuple[Walk, str | None]]:
    """Play `walk` to its next branch point on entropy (`play_to_branch`), fork it there and grow every
    branch the same way; its leaves with their errors. With `mark`, `walk` was just branched: its next turn
    is the branch turn, `sampled` already for the branch that goes on, sampled here for a fork, and its
    info gets `mark`."""
    seed = None if level.sampler_seed is None else derive_seed(level.sampler_seed, *level.path)
    try:
        if mark is not None:
            completion = sampled
            if completion is None:  # a fork samples its own branch turn from the same context
                completion = await sample_turn(tree.engine, walk, tree.sampling, seed)
            await play_sampled(tree.client, tree.engine, walk, completion, tree.config)
            walk.turns[-1] = replace(walk.turns[-1], info={**walk.turns[-1].info, **mark})
        if level.left == 0:
            config = tree.config
            await play_turns(tree.client, tree.engine, walk, config.max_turns, tree.sampling, config, seed)
            return [(walk, None)]
        point = await play_to_branch(tree, walk, level, seed)
        if point is None:
            return [(walk, None)]
        forks = await tree.client.fork_session(walk.session_id, tree.width - 1)
    except INFRA_ERRORS as exc:
        return [(walk, str(exc))]
    tree.forks.extend(fork.session_id for fork in forks)
    branches = [walk, *(walk.branch(fork.session_id) for fork in forks)]
    after = replace(level, left=level.left - 1, first=point.turn + 1, initial=point.initial)
    grown = await run_concurrently(
        grow_on_entropy(
            tree,
            branch,
            replace(after, path=(*level.path, number)),
            point.completion if number == 0 else None,
            point.info,
        )
        for number, branch in enumerate(branches)
    )
    return [leaf for leaves in grown for leaf in leaves]


async def play_to_branch(tree: Tree, walk: Walk, level: Level, seed: int | None) -> BranchPoint | None:
    """Take `walk`'s turns until its next branch point fires (returned, its turn sampled but not played) or
    it stops (None). Turn 0's first-token entropy is the tree's reference (`Level.initial`)."""
    config = tree.config
    last = window_end(config.tree.last_turn(config.max_turns), level.left)
    initial = level.initial
    while walk.stop_reason is None:
        if not fits_next_turn(walk, tree.sampling, config):
            walk.stop_reason = "max_tokens"
            break
        turn = len(walk.turns)
        completion = await sample_turn(tree.engine, walk, tree.sampling, seed)
        if turn == 0:
            initial = first_token_entropy(completion)
        elif turn >= level.first:
            assert initial is not None  # turn 0 came first: every branch starts after it (min_turn >= 1)
            entropy = first_token_entropy(completion)
            fired = fires(entropy, initial, turn, last, config.tree.entropy_threshold)
            if fired is not None:
                return BranchPoint(turn, completion, entropy, initial, fired)
        await play_sampled(tree.client, tree.engine, walk, completion, config)
    return None


def fires(value: float, initial: float, turn: int, last: int, threshold: float) -> str | None:
    """Why a branch point fires at `turn` of its window (which ends at `last`): "threshold" when the turn's
    first-token entropy `value` exceeds the tree's turn-0 value `initial` by more than `threshold`,
    "window_end" at the window's last turn otherwise, else None (play on)."""
    if value - initial > threshold:
        return "threshold"
    return "window_end" if turn >= last else None


def window_end(last_turn: int, left: int) -> int:
    """The last turn the next of `left` branch points may be, when the last of them may be `last_turn`:
    each later one needs a turn of its own after it."""
    return last_turn - (left - 1)


def first_token_entropy(completion: Completion) -> float:
    """The completion's first-token entropy; ConfigError when the engine does not report it."""
    if completion.first_token_entropy is None:
        raise ConfigError(
            "rollout.tree.branch_on=entropy needs an engine that reports the first token's entropy "
            "(engine.kind cached or hf; vllm and openai return only the sampled tokens' log-probs); "
            "use one of those or rollout.tree.branch_on=turns"
        )
    return completion.first_token_entropy


async def close_forks(tree: Tree) -> None:
    """Close every forked session (an infrastructure failure while closing is left to the service's reaper;
    while another error propagates, every closing error is, so that the error reported is the first)."""
    failing = sys.exc_info()[1] is not None
    await asyncio.gather(*(close_quietly(tree.client, fork, failing) for fork in tree.forks))


async def collect_groups(
    client: SessionClient,
    engine: Engine,
    env_id: str,
    tasks: Sequence[Mapping[str, Any]],
    group_size: int,
    sampling: SamplingParams,
    config: RolloutConfig,
    seed: int,
    progress: bool = True,
    first_task_index: int = 0,
    player: EpisodePlayer = run_episode,
) -> list[Episode]:
    """One group per task, in task order: a tree of `group_size` leaves per task with `rollout.tree`
    (played by `play_tree`, with the seeds `collect_rollouts` gives a flat group), else `collect_rollouts`'s
    G independent episodes played by `player`. A group of one (the held-out evaluation's) is played flat
    even with `rollout.tree`: one episode has nothing to branch, and no width makes one leaf."""
    if not config.tree.enabled or group_size == 1:
        return await collect_rollouts(
            client, engine, env_id, tasks, group_size, sampling, config, seed, progress, first_task_index,
            player,
        )  # fmt: skip
    forking = cast(ForkingClient, client)
    width = config.tree.width_for(group_size)
    nonce = uuid.uuid4().hex[:8]

    async def play(task_index: int, task: Mapping[str, Any]) -> list[Episode]:
        group_id = f"{task.get('id', task_index)}-{nonce}"
        sampler = derive_seed(seed, task_index) if config.seeded_sampling else None
        env_seed = episode_seed(seed, task_index)
        return await play_tree(
            forking, engine, env_id, task, env_seed, group_id, sampling, config, width, sampler
        )

    trees = await run_concurrently(play(i, t) for i, t in enumerate(tasks, first_task_index))
    return [episode for tree in trees for episode in tree]

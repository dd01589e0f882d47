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

What this is not: harness episodes (refused in the config: a harness keeps its own state outside agentrl),
or adaptive branching (ARPO-style, where the policy's entropy after a tool result is highest): the branch
turns are fixed in the config.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from agentrl.agent.engines.base import Engine, SamplingParams
from agentrl.agent.prompting import render_first_prompt
from agentrl.agent.rollout import (
    Walk,
    collect_rollouts,
    derive_seed,
    episode_seed,
    play_turns,
    run_concurrently,
    run_episode,
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
from agentrl.errors import INFRA_ERRORS
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
    """The `width ** len(branch_turns)` leaves of one tree of `task` (module docstring), root first, then
    each branch's in order."""
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

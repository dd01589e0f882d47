"""Tree rollouts (`rollout.tree`): a task's group played as a tree of episodes branching at forked env states.

What this is: `play_tree`, and `collect_groups`, which the trainer calls for every rollout phase: trees
with `rollout.tree.enabled`, else `rollout.collect_rollouts`'s flat groups. `play_tree` plays the task's
episode up to the first branch turn, forks the env session (`ForkingClient.fork_session`: the env's own
fork, a sandbox's workdir copy, or a replay; docs/env_contract.md) and continues `width` branches from that
same state and the same token context, each sampling its own continuation; every later branch turn
branches each branch again. A task's group is the leaves of its `rollout.tree.trees` trees (M, each from
its own reset with the group's env seed and its own sampler seed, `collect_groups`): `trees * width **
levels` episodes (`train.group_size`) under one `group_id`, each with all its turns (the
shared prefix copied: the same tokens, rewards and state keys), linked by `parent_id` / `branch_turn`
(`agentrl.types.Episode`, links within each tree), so siblings share a real state by construction
and every step-level estimator has anchors (agentrl/credit, "Trees").

What it saves: a tree of G leaves of T turns branching once at turn t costs t + G (T - t) env steps and
decoded turns instead of G T; the engine's prefix cache makes siblings reuse the parent's KV (the cached
engine finds the longest cached prefix; vLLM's prefix caching does the same), and the shared-prefix update
trains the copied prefix once (`shared_copy` in the credit batch).

The parts, each in its own module and re-exported here where callers read them:
- the tree's shape: what its branches share, one play of a branch or of the tree, its leaves, a branch
  point's record (`BRANCH_INFO_KEYS`) (agentrl/agent/tree_shape.py);
- where a branch forks (`rollout.tree.branch_on`): at the fixed `branch_turns` (`grow`), at the start of
  an env part, after the `branch_parts`-th boundary (`info["context_reset"]`; `grow` with `to_part`), or on
  entropy (`grow_on_entropy`, `fires`, `window_end`) (agentrl/agent/tree_branching.py);
- Failures: re-playing a branch from its branch point in a fresh session, or a branch point's fork call
  (`replaying`, `fork_at`, `reopen`, `step_mismatch`) (agentrl/agent/tree_replay.py). Here, the root's
  reset or its trunk (the turns before the first branch point, its forks included) failing plays the whole
  tree again from reset, like a flat episode (`play_tree`), and every session the tree opened (the root,
  each fork, each re-play's) is closed when the tree is done (`close_sessions`).

What this is not: harness episodes (refused in the config: a harness keeps its own state outside agentrl),
or ARPO's sampling budget (a variable number of branches per tree, branching with a probability): a tree
has `width ** levels` leaves whatever the rule, so a tree and a flat group compare at equal group size.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from agentrl.agent.engines.base import Engine, SamplingParams
from agentrl.agent.retry import RetryConfig
from agentrl.agent.rollout import (
    Walk,
    collect_rollouts,
    derive_seed,
    episode_seed,
    first_walk,
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
from agentrl.agent.tree_branching import Level, fires, grow, grow_on_entropy, to_part, window_end
from agentrl.agent.tree_replay import reset_mismatch, step_mismatch
from agentrl.agent.tree_shape import BRANCH_INFO_KEYS, Grown, Leaf, Tree
from agentrl.types import Episode

__all__ = [
    "BRANCH_INFO_KEYS",
    "collect_groups",
    "fires",
    "play_tree",
    "reset_mismatch",
    "step_mismatch",
    "tree_sampler_seed",
    "window_end",
]


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
    branch's in order, depth first. The whole tree is played again from reset while its root's reset or
    trunk fails for infrastructure reasons, up to `rollout.infra_attempts` plays (with the same sampler
    seeds); then it is one `infra_error` episode with the trunk's turns, if any."""
    retry = RetryConfig(max_attempts=config.infra_attempts)
    attempt = 1
    while True:
        grown = await grow_tree(
            client, engine, env_id, task, seed, sampling, config, width, sampler_seed, retry
        )
        if grown.error is None:
            return [
                replace(
                    walk_episode(leaf.walk, env_id, task, seed, group_id, grown.start, leaf.error),
                    attempts=attempt + leaf.replays,
                )
                for leaf in grown.leaves
            ]
        if attempt >= retry.max_attempts:
            failed = walk_episode(grown.root, env_id, task, seed, group_id, grown.start, grown.error)
            return [replace(failed, attempts=attempt)]
        attempt += 1
        await asyncio.sleep(retry.backoff_s)


async def grow_tree(
    client: ForkingClient,
    engine: Engine,
    env_id: str,
    task: Mapping[str, Any],
    seed: int,
    sampling: SamplingParams,
    config: RolloutConfig,
    width: int,
    sampler_seed: int | None,
    retry: RetryConfig,
) -> Grown:
    """One play of the tree from reset: the root's session, its trunk and every branch (`grow` at turns or,
    with `to_part`, at part boundaries, or `grow_on_entropy`); every session it opened is closed when it is
    done."""
    tree: Tree | None = None
    root: Walk | None = None
    leaves: list[Leaf] = []
    try:
        async with EpisodeSession(client) as session:
            start = await session.open(env_id, task, seed)
            root = first_walk(engine, start, config)
            tree = Tree(client, engine, sampling, config, width, env_id, task, seed, start, retry)
            if config.tree.branch_on == "entropy":
                level = Level(config.tree.levels, config.tree.min_turn, sampler_seed=sampler_seed)
                leaves = await grow_on_entropy(tree, root, level)
            elif config.tree.branch_on == "parts":
                leaves = await grow(tree, root, config.tree.branch_parts, sampler_seed, (), to_part)
            else:
                leaves = await grow(tree, root, config.tree.branch_turns, sampler_seed, path=())
    finally:
        if tree is not None:
            await close_sessions(tree)
    error = None if session.infra_error is None else str(session.infra_error)
    return Grown(session.start, root, leaves, error)


async def close_sessions(tree: Tree) -> None:
    """Close every session the tree opened besides the root's (an infrastructure failure while closing is
    left to the service's reaper; while another error propagates, every closing error is, so that the error
    reported is the first)."""
    failing = sys.exc_info()[1] is not None
    await asyncio.gather(*(close_quietly(tree.client, session, failing) for session in tree.sessions))


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
    """One group per task, in task order: with `rollout.tree`, `rollout.tree.trees` trees per task whose
    leaves together are the group of `group_size` (`play_tree`, tree after tree; every tree resets with the
    env seed `collect_rollouts` gives the group's members and samples with its own seed, `tree_sampler_seed`),
    else `collect_rollouts`'s G independent episodes played by `player`. A group of one (the held-out
    evaluation's) is played flat even with `rollout.tree`: one episode has nothing to branch, and no width
    makes one leaf."""
    if not config.tree.enabled or group_size == 1:
        return await collect_rollouts(
            client, engine, env_id, tasks, group_size, sampling, config, seed, progress, first_task_index,
            player,
        )  # fmt: skip
    forking = cast(ForkingClient, client)
    width = config.tree.width_for(group_size)
    nonce = uuid.uuid4().hex[:8]

    async def play(task_index: int, task: Mapping[str, Any], number: int) -> list[Episode]:
        group_id = f"{task.get('id', task_index)}-{nonce}"
        sampler = tree_sampler_seed(seed, task_index, number) if config.seeded_sampling else None
        env_seed = episode_seed(seed, task_index)
        return await play_tree(
            forking, engine, env_id, task, env_seed, group_id, sampling, config, width, sampler
        )

    trees = await run_concurrently(
        play(i, t, number)
        for i, t in enumerate(tasks, first_task_index)
        for number in range(config.tree.trees)
    )
    return [episode for tree in trees for episode in tree]


def tree_sampler_seed(seed: int, task_index: int, number: int) -> int:
    """The sampler seed of tree `number` of task `task_index` (its branches derive theirs from it): the
    first tree's is the one a task's single tree always had, so `trees: 1` samples as before."""
    return derive_seed(seed, task_index) if number == 0 else derive_seed(seed, task_index, number)

"""Re-playing what failed in a tree rollout (`agentrl/agent/tree.py`, "Failures"): a branch from its branch
point, or a branch point's fork call.

What this is: failures (`INFRA_ERRORS`) are re-played from the nearest state that still exists and is known
good, up to `rollout.infra_attempts` plays each, as a flat episode is (`replaying`, `fork_at`, `reopen`):
- a fork call that fails is made again on the same session (`fork_at`): forks are taken before any branch
  goes on, so that session is still at the branch point;
- a branch (the turns from a branch point to the next, or to the end) whose session is lost, or whose forks
  still fail (its session taken as lost too), is played again from its branch point in a fresh session:
  the task reset with the tree's seed and the branch's prefix actions replayed, each step checked against
  the turn it replays (`step_mismatch`: observation, reward, flags, state key, what a fork keeps). The
  prefix (tokens, turns, links) is kept; the turns the branch played after its branch point are discarded
  and sampled again, with the same sampler seed (seeded sampling: the tree is the same as without the
  failure). A session that replays elsewhere (`ReplayDiverged`: the env is not deterministic given its
  actions) ends the branch as a failure at once. The parent's session cannot serve: the branch that went
  on in it has moved it past the branch point.
A branch still failing after that ends its leaves as `infra_error` with the turns of their last play (kept,
never trained on); the other branches go on. A leaf's `Episode.attempts` is 1 plus the re-plays on its
path (a re-fork counts for the forks it made, a branch's re-play for every leaf under it: `gathered`,
agentrl/agent/tree_shape.py).

What this is not: re-playing the root's reset or its trunk (the turns before the first branch point, its
forks included): their failure propagates, and `play_tree` (agentrl/agent/tree.py) plays the whole tree
again from reset, like a flat episode; or where a branch forks (agentrl/agent/tree_branching.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from agentrl.agent.rollout import Walk
from agentrl.agent.tree_shape import Leaf, Played, Tree
from agentrl.env.core import StepResult
from agentrl.errors import INFRA_ERRORS, ReplayDiverged
from agentrl.types import ForkedSession, SessionStart, Turn


async def replaying(
    tree: Tree, walk: Walk, play: Callable[[Walk, int], Awaitable[Played]], trunk: bool
) -> Played | Leaf:
    """`play(walk, attempt)`: one play of a branch from `walk`, its start (a branch point), to its next
    branch point or its end. After an infrastructure failure the branch is played again from the same start
    in a fresh session (`reopen`): its prefix kept, the turns it played since its start discarded and
    sampled again; up to `rollout.infra_attempts` plays in all. The play that got through (its `replays`
    set), or the last play's walk as an infrastructure failure (also at once when the env cannot be brought
    back to the start: `ReplayDiverged`). The root's trunk (`trunk`) is not played again here: its failure
    propagates, and `play_tree` plays the whole tree again from reset."""
    start = copy_walk(walk)
    attempt, error = 1, ""
    while True:
        try:
            if attempt > 1:
                walk = await reopen(tree, start)
            return replace(await play(walk, attempt), replays=attempt - 1)
        except INFRA_ERRORS as exc:
            if trunk:
                raise
            error = str(exc)
        except ReplayDiverged as exc:
            return Leaf(walk, f"{error}; not re-played: {exc}", attempt - 1)
        if attempt >= tree.retry.max_attempts:
            return Leaf(walk, error, attempt - 1)
        attempt += 1
        await asyncio.sleep(tree.retry.backoff_s)


async def fork_at(tree: Tree, walk: Walk) -> tuple[tuple[ForkedSession, ...], int]:
    """`width - 1` forks of `walk`'s session at its branch point, and the calls they took: after an
    infrastructure failure the forks are taken again from the same session (no branch has moved it on
    yet), up to `rollout.infra_attempts` calls; the last call's failure propagates (the session is taken as
    lost: the branch that played to this point is played again, `replaying`)."""
    call = 1
    while True:
        try:
            forks = await tree.client.fork_session(walk.session_id, tree.width - 1)
        except INFRA_ERRORS:
            if call >= tree.retry.max_attempts:
                raise
        else:
            tree.sessions.extend(fork.session_id for fork in forks)
            return tuple(forks), call
        call += 1
        await asyncio.sleep(tree.retry.backoff_s)


async def reopen(tree: Tree, start: Walk) -> Walk:
    """`start` again, in a fresh session: the task reset with the tree's seed and `start`'s actions replayed,
    each step result checked against the turn it replays (`step_mismatch`); `ReplayDiverged` at the first
    that differs (the env is not deterministic given its actions). The session is the tree's to close."""
    opened = await tree.client.create_session(tree.env_id, tree.task, tree.seed)
    tree.sessions.append(opened.session_id)
    mismatch = reset_mismatch(tree.start, opened)
    if mismatch is not None:
        raise ReplayDiverged(f"resetting the task again gave {mismatch}")
    for turn in start.turns:
        result = await tree.client.step(opened.session_id, turn.action)
        mismatch = step_mismatch(turn, result)
        if mismatch is not None:
            raise ReplayDiverged(f"replaying turn {turn.index}'s action gave {mismatch}")
    return replace(copy_walk(start), session_id=opened.session_id)


def copy_walk(walk: Walk) -> Walk:
    """A copy of `walk` that its later turns do not change: the same episode, links and turns so far."""
    return replace(walk, pending=list(walk.pending), context=list(walk.context), turns=list(walk.turns))


def reset_mismatch(recorded: SessionStart, again: SessionStart) -> str | None:
    """How a reset's result differs from the one recorded (its observation and state key), or None."""
    return mismatch(
        ("observation", recorded.observation, again.observation),
        ("state_key", recorded.info.get("state_key"), again.info.get("state_key")),
    )


def step_mismatch(turn: Turn, result: StepResult) -> str | None:
    """How a step's result differs from the one `turn` recorded, or None: the observation, reward,
    `terminated`, `truncated` and state key, what a fork keeps (docs/env_contract.md, "Forking")."""
    return mismatch(
        ("observation", turn.observation, result.observation),
        ("reward", turn.reward, float(result.reward)),
        ("terminated", turn.terminated, bool(result.terminated)),
        ("truncated", turn.truncated, bool(result.truncated)),
        ("state_key", turn.state_key, result.info.get("state_key")),
    )


def mismatch(*fields: tuple[str, Any, Any]) -> str | None:
    """What differs first among `fields` (name, recorded value, value again), or None."""
    for name, recorded, again in fields:
        if recorded != again:
            return f"another {name} ({shorten(again)}; recorded {shorten(recorded)})"
    return None


def shorten(value: Any, limit: int = 80) -> str:
    """`repr(value)`, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."

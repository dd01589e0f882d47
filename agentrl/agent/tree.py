"""Tree rollouts (`rollout.tree`): a task's group played as a tree of episodes branching at forked env states.

What this is: `play_tree`, and `collect_groups`, which the trainer calls for every rollout phase: trees
with `rollout.tree.enabled`, else `rollout.collect_rollouts`'s flat groups. `play_tree` plays the task's
episode up to the first branch turn, forks the env session (`ForkingClient.fork_session`: the env's own
fork, a sandbox's workdir copy, or a replay; docs/env_contract.md) and continues `width` branches from that
same state and the same token context, each sampling its own continuation; every later branch turn
branches each branch again. A task's group is the leaves of its `rollout.tree.trees` trees (M, each from
its own reset with the group's env seed and its own sampler seed, `collect_groups`): `trees * width **
len(branch_turns)` episodes (`train.group_size`) under one `group_id`, each with all its turns (the
shared prefix copied: the same tokens, rewards and state keys), linked by `parent_id` / `branch_turn`
(`agentrl.types.Episode`, links within each tree), so siblings share a real state by construction
and every step-level estimator has anchors (agentrl/credit, "Trees").

What it saves: a tree of G leaves of T turns branching once at turn t costs t + G (T - t) env steps and
decoded turns instead of G T; the engine's prefix cache makes siblings reuse the parent's KV (the cached
engine finds the longest cached prefix; vLLM's prefix caching does the same), and the shared-prefix update
trains the copied prefix once (`shared_copy` in the credit batch).

Failures (`INFRA_ERRORS`) are re-played from the nearest state that still exists and is known good, up to
`rollout.infra_attempts` plays each, as a flat episode is (`replaying`, `fork_at`, `reopen`):
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
  on in it has moved it past the branch point;
- the root's reset or its trunk (the turns before the first branch point, its forks included) failing
  plays the whole tree again from reset, like a flat episode.
A branch still failing after that ends its leaves as `infra_error` with the turns of their last play (kept,
never trained on); the other branches go on. A leaf's `Episode.attempts` is 1 plus the re-plays on its
path (a re-fork counts for the forks it made, a branch's re-play for every leaf under it). Every session
the tree opened (the root, each fork, each re-play's) is closed when the tree is done.

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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from agentrl.agent.engines.base import Completion, Engine, SamplingParams
from agentrl.agent.retry import RetryConfig
from agentrl.agent.rollout import (
    Walk,
    collect_rollouts,
    derive_seed,
    episode_seed,
    first_walk,
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
from agentrl.env.core import StepResult
from agentrl.errors import INFRA_ERRORS, ConfigError, ReplayDiverged
from agentrl.types import Episode, ForkedSession, SessionStart, Turn


@dataclass
class Tree:
    """What every branch of one tree shares: the client, engine, sampling and config, how the root was reset
    (`env_id`, `task`, `seed`, and what the reset returned: a re-played branch resets a fresh session the
    same way, `reopen`), the re-play policy, and the sessions to close when the tree is done: every fork and
    every session a re-play opened (the root's is closed by its `EpisodeSession`)."""

    client: ForkingClient
    engine: Engine
    sampling: SamplingParams
    config: RolloutConfig
    width: int
    env_id: str
    task: Mapping[str, Any]
    seed: int
    start: SessionStart
    retry: RetryConfig
    sessions: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Leaf:
    """A branch that ended: its walk, the infrastructure failure it ended in (None: it did not), and the
    re-plays of the branches on its path from the root (`Episode.attempts` is 1 plus these, plus the plays
    of the whole tree before the one that got through)."""

    walk: Walk
    error: str | None = None
    replays: int = 0


@dataclass(frozen=True)
class Played:
    """One play of a branch from its start to its next branch point (its `forks` taken there, in
    `fork_calls` calls; on entropy, the `point` that fired), or to its end (no forks: a leaf); `replays`:
    the plays of it before this one, which failed."""

    walk: Walk
    forks: tuple[ForkedSession, ...] = ()
    fork_calls: int = 1
    point: BranchPoint | None = None
    replays: int = 0


@dataclass(frozen=True)
class Grown:
    """One play of a whole tree: the reset's result (None: it failed), the root's walk (None: no session),
    the leaves, and the infrastructure failure of the reset or the trunk that ended it (None: the tree
    grew; its branches' own failures are on their leaves)."""

    start: SessionStart | None
    root: Walk | None
    leaves: list[Leaf]
    error: str | None


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
    """One play of the tree from reset: the root's session, its trunk and every branch (`grow`, or
    `grow_on_entropy`); every session it opened is closed when it is done."""
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
            else:
                leaves = await grow(tree, root, config.tree.branch_turns, sampler_seed, path=())
    finally:
        if tree is not None:
            await close_sessions(tree)
    error = None if session.infra_error is None else str(session.infra_error)
    return Grown(session.start, root, leaves, error)


async def grow(
    tree: Tree, walk: Walk, branch_turns: Sequence[int], sampler_seed: int | None, path: tuple[int, ...]
) -> list[Leaf]:
    """Play `walk` to its next branch turn (or its end), then branch it; its leaves. A branch that fails for
    an infrastructure reason is played again from its start (`replaying`)."""
    config = tree.config
    until = branch_turns[0] if branch_turns else config.max_turns
    seed = None if sampler_seed is None else derive_seed(sampler_seed, *path)

    async def play(walk: Walk, attempt: int) -> Played:
        await play_turns(tree.client, tree.engine, walk, until, tree.sampling, config, seed)
        if not branch_turns or walk.stop_reason is not None:
            return Played(walk)
        forks, calls = await fork_at(tree, walk)
        return Played(walk, forks, calls)

    played = await replaying(tree, walk, play, trunk=not path)
    if isinstance(played, Leaf):
        return [played]
    if not played.forks:
        return [Leaf(played.walk, None, played.replays)]
    grown = await run_concurrently(
        grow(tree, branch, branch_turns[1:], sampler_seed, (*path, number))
        for number, branch in enumerate(branches(played))
    )
    return gathered(grown, played)


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


def branches(played: Played) -> list[Walk]:
    """The branches at `played`'s branch point: its walk going on in its session, then one per fork."""
    return [played.walk, *(played.walk.branch(fork.session_id) for fork in played.forks)]


def gathered(grown: Sequence[Sequence[Leaf]], played: Played) -> list[Leaf]:
    """The leaves of the branches at `played`'s branch point (`grown`, in `branches` order), each counting
    the re-plays above it: the plays of the branch that led there, and for a fork the re-forks."""
    return [
        replace(leaf, replays=leaf.replays + played.replays + (played.fork_calls - 1 if number else 0))
        for number, leaves in enumerate(grown)
        for leaf in leaves
    ]


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
) -> list[Leaf]:
    """Play `walk` to its next branch point on entropy (`play_to_branch`), fork it there and grow every
    branch the same way; its leaves. With `mark`, `walk` was just branched: its next turn is the branch
    turn, `sampled` already for the branch that goes on (in its first play; a fork and every re-play sample
    their own from the same context), and its info gets `mark`. A branch that fails for an infrastructure
    reason is played again from its start (`replaying`)."""
    seed = None if level.sampler_seed is None else derive_seed(level.sampler_seed, *level.path)

    async def play(walk: Walk, attempt: int) -> Played:
        if mark is not None:
            completion = sampled if attempt == 1 else None
            if completion is None:
                completion = await sample_turn(tree.engine, walk, tree.sampling, seed)
            await play_sampled(tree.client, tree.engine, walk, completion, tree.config)
            walk.turns[-1] = replace(walk.turns[-1], info={**walk.turns[-1].info, **mark})
        if level.left == 0:
            config = tree.config
            await play_turns(tree.client, tree.engine, walk, config.max_turns, tree.sampling, config, seed)
            return Played(walk)
        point = await play_to_branch(tree, walk, level, seed)
        if point is None:
            return Played(walk)
        forks, calls = await fork_at(tree, walk)
        return Played(walk, forks, calls, point)

    played = await replaying(tree, walk, play, trunk=not level.path)
    if isinstance(played, Leaf):
        return [played]
    point = played.point
    if point is None:
        return [Leaf(played.walk, None, played.replays)]
    after = replace(level, left=level.left - 1, first=point.turn + 1, initial=point.initial)
    grown = await run_concurrently(
        grow_on_entropy(
            tree,
            branch,
            replace(after, path=(*level.path, number)),
            point.completion if number == 0 else None,
            point.info,
        )
        for number, branch in enumerate(branches(played))
    )
    return gathered(grown, played)


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

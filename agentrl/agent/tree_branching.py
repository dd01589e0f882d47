"""Where a tree rollout's branch forks (`rollout.tree.branch_on`, agentrl/agent/tree.py): at fixed turns, at
the start of an env part, or on entropy.

What this is: the ways a branch grows, each playing a branch to its next branch point, forking it there
(`fork_at`) and growing every branch the same way, a failed branch played again from its start
(`replaying`, agentrl/agent/tree_replay.py):
- at the fixed `branch_turns` (`grow`, playing to each with `to_turn`);
- at part boundaries (`grow` with `to_part`): a branch plays until it has passed its next `branch_parts`
  count of env boundaries (turns whose info has `context_reset` True, `parts_passed`) and forks before its
  next turn, the first of the new part; parts take a varying number of turns, so no fixed turn would do.
  Its branch point is recorded as a fixed turn's is;
- on entropy (`grow_on_entropy`, after ARPO: Dong et al. 2025, arXiv 2507.19849): a branch samples its
  turn t in its window (t >= 1, after a tool result), and when that turn's first-token entropy
  (`Completion.first_token_entropy`) exceeds the tree's turn-0 value by more than `entropy_threshold`
  (`fires`), or at the window's last turn when it never did, the session is forked before the env sees turn
  t: the branch that goes on keeps the turn it sampled, each fork samples its own turn t from the same state
  and context. A branch point so chosen is recorded exactly as a fixed one (`parent_id`, `branch_turn`, the
  copied prefix), so credit and the update do not know how it was chosen; each branch's turn t also carries
  the values that decided it in its `info` (`BRANCH_INFO_KEYS`, agentrl/agent/tree_shape.py).

What this is not: ARPO's sampling budget (a variable number of branches per tree, branching with a
probability): a tree has `width ** levels` leaves whatever the rule, so a tree and a flat group compare at
equal group size; or the tree's reset, its re-plays from reset and its sessions' closing
(agentrl/agent/tree.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentrl.agent.engines.base import Completion
from agentrl.agent.rollout import (
    Walk,
    derive_seed,
    fits_next_turn,
    play_sampled,
    play_turns,
    run_concurrently,
    sample_turn,
    take_turn,
)
from agentrl.agent.tree_replay import fork_at, replaying
from agentrl.agent.tree_shape import BranchPoint, Leaf, Played, Tree, branches, gathered
from agentrl.env.core import INFO_CONTEXT_RESET
from agentrl.errors import ConfigError

# --- at fixed turns or part boundaries -----------------------------------------------------------------

PlayTo = Callable[[Tree, Walk, int | None, int | None], Awaitable[None]]
"""`play_to(tree, walk, point, seed)`: take `walk`'s turns (sampled with `seed`) until it reaches the branch
point `point` (None: its end) or stops (`to_turn`, `to_part`)."""


async def to_turn(tree: Tree, walk: Walk, turn: int | None, seed: int | None) -> None:
    """Take `walk`'s turns until it has played `turn` env turns (None: `rollout.max_turns`) or has stopped."""
    config = tree.config
    until = config.max_turns if turn is None else turn
    await play_turns(tree.client, tree.engine, walk, until, tree.sampling, config, seed)


async def to_part(tree: Tree, walk: Walk, boundary: int | None, seed: int | None) -> None:
    """Take `walk`'s turns until it has passed `boundary` env part boundaries (`parts_passed`; None: to its
    end) or has stopped: its next turn is then the first of part `boundary + 1`."""
    if boundary is None:
        await to_turn(tree, walk, None, seed)
        return
    while walk.stop_reason is None and parts_passed(walk) < boundary:
        await take_turn(tree.client, tree.engine, walk, tree.sampling, tree.config, seed)


def parts_passed(walk: Walk) -> int:
    """The env part boundaries `walk` has passed: its turns whose info has `context_reset` True."""
    return sum(bool(turn.info.get(INFO_CONTEXT_RESET, False)) for turn in walk.turns)


async def grow(
    tree: Tree,
    walk: Walk,
    points: Sequence[int],
    sampler_seed: int | None,
    path: tuple[int, ...],
    play_to: PlayTo = to_turn,
) -> list[Leaf]:
    """Play `walk` to the first of its branch points to come, `points` (turns, or with `play_to=to_part`
    part boundaries), or to its end, then branch it; its leaves. A branch that fails for an infrastructure
    reason is played again from its start (`replaying`)."""
    point = points[0] if points else None
    seed = None if sampler_seed is None else derive_seed(sampler_seed, *path)

    async def play(walk: Walk, attempt: int) -> Played:
        await play_to(tree, walk, point, seed)
        if not points or walk.stop_reason is not None:
            return Played(walk)
        forks, calls = await fork_at(tree, walk)
        return Played(walk, forks, calls)

    played = await replaying(tree, walk, play, trunk=not path)
    if isinstance(played, Leaf):
        return [played]
    if not played.forks:
        return [Leaf(played.walk, None, played.replays)]
    grown = await run_concurrently(
        grow(tree, branch, points[1:], sampler_seed, (*path, number), play_to)
        for number, branch in enumerate(branches(played))
    )
    return gathered(grown, played)


# --- on entropy ----------------------------------------------------------------------------------------


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

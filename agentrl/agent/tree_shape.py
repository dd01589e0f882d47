"""The shape of a tree rollout (`agentrl/agent/tree.py`): what its branches share, what one play of a branch
or of the whole tree gives, its leaves, and a branch point's record.

What this is: the records the tree's parts pass each other (`Tree`, `Played`, `Leaf`, `Grown`), a branch
point chosen on entropy (`BranchPoint`, with what it adds to its turn's `info`: `BRANCH_INFO_KEYS`), and
the two steps every branch point takes whatever chose it: the branches it opens (`branches`) and their
leaves gathered back in order, each counting the re-plays above it (`gathered`).

What this is not: where a branch forks (`agentrl/agent/tree_branching.py`), re-playing a failed branch
(`agentrl/agent/tree_replay.py`), or playing a task's trees (`agentrl/agent/tree.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agentrl.agent.engines.base import Completion, Engine, SamplingParams
from agentrl.agent.retry import RetryConfig
from agentrl.agent.rollout import Walk
from agentrl.agent.rollout_config import RolloutConfig
from agentrl.agent.session import ForkingClient
from agentrl.types import ForkedSession, SessionStart


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


BRANCH_INFO_KEYS = ("branch_entropy", "branch_entropy_initial", "branch_fallback")
"""What a branch point chosen on entropy adds to the `info` of its turn in every branch through it: the
turn's first-token entropy, the tree's turn-0 value it was compared with, and whether the window ended
without the threshold being exceeded (the branch then fired at the window's last turn)."""


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

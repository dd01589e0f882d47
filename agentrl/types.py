"""The typed records that travel through agentrl: tool calls, actions, turns, episodes, step batches.

What this is: frozen dataclasses only, no behaviour beyond small derived properties. Everything the
runner produces and the store, credit assignment and trainer consume is one of these.

What this is not: the HTTP schema (that is pydantic, in `agentrl/service/schemas.py`) or ORM rows (those
stay inside `agentrl/store/`).

Token bookkeeping (token-in/token-out): an episode's training sequence is the concatenation, turn after
turn, of `turn.prompt_ids + turn.completion_ids`. `prompt_ids` of turn 0 is the whole rendered first
prompt; of later turns it is only the tokens the runner appended since the previous completion (end of
turn markers, the tool observation, the next assistant header). Nothing the model sampled is ever
re-tokenised, so the trainer sees exactly the tokens the engine saw and produced.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

StopReason = Literal[
    "terminated",  # the env ended the episode (e.g. the agent called `submit`)
    "truncated",  # the env's own time limit ended it
    "max_turns",  # the runner's turn budget ran out
    "max_tokens",  # the context budget ran out
    "infra_error",  # the sandbox or service failed; the episode is not a training signal
    "stopped",  # an external harness (agentrl/harness) returned before the env ended the episode
]


@dataclass(frozen=True)
class ToolCall:
    """One parsed tool call: `name` and JSON `arguments`."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Action:
    """A parsed assistant turn as the env receives it.

    `tool_calls` is empty when the turn had none or could not be parsed; `parse_error` then says why
    (None when the text parsed cleanly, including plain text with no tool call at all).
    """

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    parse_error: str | None = None


@dataclass(frozen=True)
class SessionStart:
    """What opening an env session returns: its id, the first observation, and the tools and few-shot
    examples to show the model. The service builds it, the client decodes it, the runner reads it."""

    session_id: str
    observation: str
    info: dict[str, Any]
    tools: list[dict[str, Any]]
    examples: list[dict[str, Any]]


@dataclass(frozen=True)
class ForkedSession:
    """One fork of an env session (`EnvClient.fork_session`): a new session in its parent's state, ready to
    step. `state_key` is the parent's state key when it forked (its last step's, or its reset's);
    `turn_index` the turns the parent had taken, so the index of the fork's next turn."""

    session_id: str
    state_key: Any
    turn_index: int


SUMMARY_INFO = "context_summary"
"""`Turn.info` key the runner sets on a summary turn (`rollout.context.policy=summary`): the policy wrote a
summary of the episode so far; the env was not stepped."""


@dataclass(frozen=True)
class Turn:
    """One assistant turn and the env's answer to it.

    prompt_ids:          [P_t] tokens appended before this turn's generation (see module docstring)
    completion_ids:      [C_t] tokens the engine sampled for this turn
    completion_logprobs: [C_t] sampler log-probabilities of `completion_ids` (at the sampling temperature)
    answer_prob:         IGPO's p_t, the policy's probability of the known answer before this turn; set by
                         the trainer (`agentrl/trainer/answer_probs.py`), None otherwise
    segment:             the token sequence this turn continues (0 for every turn of a `full` context). A
                         prompt that is not the previous one plus this turn starts a new one: a context
                         policy's window or mask (`rollout.context`, `agentrl/agent/context.py`) or an
                         external harness (`agentrl/harness`) that rewrites its history. The turn's
                         `prompt_ids` are then its whole prompt, and each segment is its own sample
                         (`agentrl.trainer.samples.episode_to_samples`)
    prompt_view:         what this turn's prompt held under a context policy other than `full`
                         (`agentrl.agent.context.next_prompt`: the policy, the turns shown, the masked
                         ones, the window's task turn and state line); None for a `full` context
    finish_reason:       why the engine ended the completion: "stop" (the end-of-turn token or a stop
                         string) or "length" (`max_new_tokens` reached); None where not known (demonstrations)
    """

    index: int
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    completion_logprobs: tuple[float, ...]
    text: str
    action: Action
    observation: str
    reward: float
    invalid: bool
    state_key: str | None
    terminated: bool = False
    truncated: bool = False
    info: Mapping[str, Any] = field(default_factory=dict)
    answer_prob: float | None = None
    segment: int = 0
    finish_reason: str | None = None
    prompt_view: Mapping[str, Any] | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)

    @property
    def is_summary(self) -> bool:
        """A summary turn (`SUMMARY_INFO`): sampled and trained like any turn, but no env step; its
        `state_key` is the state it was written in, its reward 0 and its observation empty."""
        return bool(self.info.get(SUMMARY_INFO, False))


@dataclass(frozen=True)
class Episode:
    """A finished episode: its task, its turns and why it stopped.

    `initial_state_key` is the state in which turn 0 was taken; turn t's `state_key` is the state after
    it. `error` is set only for infrastructure failures (`stop_reason == "infra_error"`), which are never
    used as training signal. `attempts` counts plays of this slot: > 1 when earlier plays ended in an
    infrastructure failure and were re-run (`agentrl.agent.retry`).

    Tree rollouts (issue 42): `parent_id` is the `episode_id` of the episode this one branched from (None
    for an episode played from the task's start), and `branch_turn` the index of the first turn it does NOT
    share with that parent: `turns[:branch_turn]` are the parent's turns, copied (same tokens, rewards and
    state keys), and the branch played its own turns from the parent's state after turn `branch_turn - 1`
    (the task's initial state when 0). A tree's episodes share one `group_id`. Credit assignment trains a
    copied turn once, as its original (docs/credit.md, "Trees").
    """

    episode_id: str
    env_id: str
    task_id: str
    group_id: str
    seed: int
    turns: tuple[Turn, ...]
    stop_reason: StopReason
    initial_state_key: str | None = None
    success: bool = False
    error: str | None = None
    attempts: int = 1
    first_observation: str | None = None  # what the env showed at reset (the task prompt)
    parent_id: str | None = None
    branch_turn: int | None = None
    # the env's tools and few-shot examples the first prompt showed ({"tools": [...], "examples": [...]}),
    # rendered around `first_observation` with `rollout.instructions` (the built-in player's; else None)
    prompt_inputs: Mapping[str, Any] | None = None

    @property
    def reward(self) -> float:
        return float(sum(turn.reward for turn in self.turns))

    @property
    def state_keys(self) -> tuple[str | None, ...]:
        """T+1 keys: the state before each turn, then the state after the last one."""
        return (self.initial_state_key, *(turn.state_key for turn in self.turns))

    @property
    def is_infra_failure(self) -> bool:
        return self.stop_reason == "infra_error"


@dataclass(frozen=True)
class StepBatch:
    """A batch of grouped episodes flattened to one row per step, for credit assignment.

    E episodes, S = sum of their lengths T_i steps; rows are ordered by episode, then step.

    group:    [E] int    task-group index of each episode (0..num_groups-1)
    episode:  [S] int    episode index of each step
    step:     [S] int    t within its episode
    rewards:  [S] float  env reward of each step (before any invalid-action penalty)
    valid:    [S] bool   False when the step's assistant turn could not be parsed into an action
    states:   S + E hashables: for each episode in order, its T_i + 1 state keys
    actions:  S hashables or None
    answer_probs: [S] float or None   IGPO's p_t, measured before step t
    outcome:  [E] float or None       IGPO's final-turn score
    reward_components: [S, C] float or None   GDPO's per-step reward components (summing to no particular
                                              total; the env decides what they are)
    parent:      [E] int or None   tree rollouts: the batch index of the episode each one branched from, -1
                                   for none; None for a flat batch (no episode has a parent)
    branch_step: [E] int or None   the first step an episode does not share with its parent (0 for roots);
                                   steps 0..branch_step-1 and states 0..branch_step are copies of the parent's
    boundary:    [S] bool or None  True on a step after which the episode moves to its next part (the env's
                                   `info["context_reset"]`): a part's returns may stop there (GiGPO's
                                   `step_return="part"`); None when the records did not say

    Derived once, when the batch is built (so every estimator works on integers only):
    state_codes:  [S + E] int  `intern_keys(states)`
    action_codes: [S] int or None  `intern_keys(actions)`
    origin:       [S] int   the row of the step each row is a copy of, followed to the first original
                            (a row's own index when it is not a copy): one decision node per value
    state_origin: [S + E] int  the same for the entries of `states`
    shared_copy:  [S] bool  origin != own row: a copied prefix step, which must not be trained again
    """

    group: np.ndarray
    episode: np.ndarray
    step: np.ndarray
    rewards: np.ndarray
    valid: np.ndarray
    states: tuple[Hashable, ...]
    actions: tuple[Hashable, ...] | None = None
    answer_probs: np.ndarray | None = None
    outcome: np.ndarray | None = None
    reward_components: np.ndarray | None = None
    parent: np.ndarray | None = None
    branch_step: np.ndarray | None = None
    boundary: np.ndarray | None = None
    state_codes: np.ndarray = field(init=False, repr=False, compare=False)
    action_codes: np.ndarray | None = field(init=False, repr=False, compare=False)
    origin: np.ndarray = field(init=False, repr=False, compare=False)
    state_origin: np.ndarray = field(init=False, repr=False, compare=False)
    shared_copy: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_codes", intern_keys(self.states))
        codes = None if self.actions is None else intern_keys(self.actions)
        object.__setattr__(self, "action_codes", codes)
        origin, state_origin = copy_origins(self.lengths, self.parent, self.branch_step)
        object.__setattr__(self, "origin", origin)
        object.__setattr__(self, "state_origin", state_origin)
        object.__setattr__(self, "shared_copy", origin != np.arange(origin.size))

    @property
    def is_tree(self) -> bool:
        """True when some episode branched from another one in the batch."""
        return self.parent is not None and bool((self.parent >= 0).any())

    @property
    def num_episodes(self) -> int:
        return int(self.group.shape[0])

    @property
    def num_steps(self) -> int:
        return int(self.episode.shape[0])

    @property
    def lengths(self) -> np.ndarray:
        """[E] int: T_i for each episode."""
        return np.bincount(self.episode, minlength=self.num_episodes)


def intern_keys(keys: Sequence[Hashable]) -> np.ndarray:
    """[N] int64 codes: equal keys (Python `==`) get equal codes >= 0; a `None` key gets -1 ("unknown").

    A key's code is the position of its first occurrence. One pass through one dict in C
    (`map(dict.setdefault, ...)`), about 0.1 s per million keys: the only per-key Python-level work in
    credit assignment, done once per batch.
    """
    table: dict[Hashable, int] = {}
    codes = np.fromiter(map(table.setdefault, keys, itertools.count()), dtype=np.int64, count=len(keys))
    if None in table:
        codes[codes == table[None]] = -1
    return codes


def copy_origins(
    lengths: np.ndarray, parent: np.ndarray | None, branch_step: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """([S] int, [S + E] int): for every step row and every state entry, the row (entry) it is a copy of,
    followed up the tree to the first original; identity for a flat batch.

    lengths [E] int T_i; parent [E] int (-1: none); branch_step [E] int b_i: steps t < b_i of episode i are
    copies of its parent's steps t, and its states t <= b_i copies of the parent's states t. Parents must
    form a forest with b_i <= min(T_i, T_parent) (`agentrl.credit.batch` checks this with clear errors).
    """
    steps, episodes = int(lengths.sum()), int(lengths.size)
    origin = np.arange(steps, dtype=np.int64)
    state_origin = np.arange(steps + episodes, dtype=np.int64)
    if parent is None or branch_step is None or not (parent >= 0).any():
        return origin, state_origin
    first_step = np.cumsum(lengths) - lengths
    first_state = first_step + np.arange(episodes)
    for child in _parents_first(parent):
        up, shared = int(parent[child]), int(branch_step[child])
        origin[first_step[child] : first_step[child] + shared] = origin[
            first_step[up] : first_step[up] + shared
        ]
        span = slice(first_state[up], first_state[up] + shared + 1)
        state_origin[first_state[child] : first_state[child] + shared + 1] = state_origin[span]
    return origin, state_origin


def _parents_first(parent: np.ndarray) -> list[int]:
    """The episodes that have a parent, each after its parent (a ValueError on a cycle)."""
    depth = np.full(parent.size, -1, dtype=np.int64)
    depth[parent < 0] = 0
    for _ in range(parent.size):
        pending = depth < 0
        if not pending.any():
            break
        ready = pending & (depth[np.maximum(parent, 0)] >= 0)
        depth[ready] = depth[parent[ready]] + 1
    if (depth < 0).any():
        raise ValueError("episode parent links form a cycle")
    children = np.flatnonzero(parent >= 0)
    return children[np.argsort(depth[children], kind="stable")].tolist()

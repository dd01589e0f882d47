"""`RolloutConfig` (`rollout.*`), `HarnessConfig` (`rollout.harness.*`), `TreeConfig` (`rollout.tree.*`) and
`ContextConfig` (`rollout.context.*`): the episode players' budgets, prompt, context policy and harness,
importable without torch, FastAPI or uvicorn.

What this is: frozen dataclasses, each default in one place, standard library only. Both players read
them: `agentrl.agent.rollout.run_episode` and `agentrl.harness.runner.HarnessPlayer`; the harness's config
lives here, not in `agentrl/harness/`, so that `agent/` never imports the harness package (the harness
imports `agent/`, never the other way round).

What this is not: the players, the harness (`agentrl.harness.runner`) or its endpoint
(`agentrl.harness.endpoint`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class HarnessConfig:
    """An external harness instead of agentrl's own episode loop (docs/harness.md).

    target:            "package.module:function", a harness called once per episode with a
                       `HarnessContext` (a plain function runs in a worker thread, an `async def` on the event
                       loop); empty: agentrl's own loop plays the episodes
    command:           argv of a harness run as a subprocess per episode instead (OPENAI_BASE_URL,
                       OPENAI_API_KEY and AGENTRL_HARNESS_URL in its environment); exclusive with `target`
    finish_tool:       a tool the runner calls with no arguments when the harness returns before the env
                       ended the episode (e.g. "submit" for SWE-bench, so the final workspace is graded);
                       empty: none
    timeout_s:         wall-clock limit of one harness run; then the episode stops (`max_turns`)
    honour_sampling:   use the request's temperature, top_p and seed; by default every call samples with the
                       run's `sampling` (the temperature the trainer's loss assumes)
    max_request_bytes: the largest request body the endpoint reads (413 above it)
    rate_per_s:        calls per second one episode may make (token bucket, burst `rate_burst`; 429 above)
    rate_burst:        the bucket's size
    max_concurrent:    calls of one episode in flight at once (429 above)
    served_name:       the model id `/v1/models` lists
    """

    target: str = ""
    command: tuple[str, ...] = ()
    finish_tool: str = ""
    timeout_s: float = 1800.0
    honour_sampling: bool = False
    max_request_bytes: int = 8 * 1024 * 1024
    rate_per_s: float = 50.0
    rate_burst: int = 20
    max_concurrent: int = 4
    served_name: str = "agentrl"

    def __post_init__(self) -> None:
        if self.target and self.command:
            raise ValueError("rollout.harness: set target or command, not both")
        if self.target and ":" not in self.target:
            raise ValueError(f"rollout.harness.target must be 'module:function', got {self.target!r}")
        if self.timeout_s <= 0 or self.rate_per_s <= 0 or self.rate_burst < 1 or self.max_concurrent < 1:
            raise ValueError(
                "rollout.harness: timeout_s and rate_per_s must be > 0, rate_burst and max_concurrent >= 1"
            )
        if self.max_request_bytes < 1024:
            raise ValueError("rollout.harness.max_request_bytes must be at least 1024")

    @property
    def enabled(self) -> bool:
        return bool(self.target or self.command)


BRANCH_ON = ("turns", "entropy", "parts")
LEVEL_NAMES = {
    "turns": "branch turn(s)",
    "entropy": "branch point(s) per path",
    "parts": "part boundary(ies)",
}
"""What `TreeConfig.width_for`'s error calls the levels, per `branch_on`."""


@dataclass(frozen=True)
class TreeConfig:
    """Tree rollouts (`rollout.tree.*`, `agentrl/agent/tree.py`): each task's group is `trees` trees of
    episodes that branch at forked env states instead of G independent episodes.

    enabled:           play trees; the group is the leaves of the task's trees, so `train.group_size` must
                       equal `trees * width ** levels` (levels: the branch points on every root-to-leaf path)
    branch_turns:      "turns" only: the turns at which every branch forks, ascending (1: after the first
                       turn, so siblings share turn 0 and its state); each must be below `rollout.max_turns`
    width:             branches at each branch point (the branch that goes on in the session, plus
                       width - 1 forks); 0 (the default): the one width that makes `train.group_size` leaves
    branch_on:         "turns": every branch forks at the fixed `branch_turns`; "entropy": each branch point
                       is chosen while the branch plays, at the first turn in its window whose first token's
                       entropy (`Completion.first_token_entropy`; the cached and hf engines report it)
                       exceeds the tree's turn-0 value by more than `entropy_threshold`, else at the window's
                       last turn (docs/tree_rollouts.md, "Branching on entropy"); "parts": every branch forks
                       at the start of an env part, after the `branch_parts`-th env boundary
                       (docs/tree_rollouts.md, "Branching at part boundaries")
    branch_points:     "entropy" only: branch points on every root-to-leaf path (the levels)
    min_turn:          "entropy" only: the earliest turn a branch point may be (>= 1: after a tool result)
    max_turn:          "entropy" only: the last turn a branch point may be; 0: `rollout.max_turns` - 1. With
                       several branch points, the k-th of L (from 1) must come by `max_turn - (L - k)` and
                       the next one's window opens the turn after it
    entropy_threshold: "entropy" only: nats by which a turn's first-token entropy must exceed the tree's
                       turn-0 value for a branch to fire there (0: any rise)
    trees:             independent trees per task (M in Ji et al. 2025), each from its own reset with its own
                       sampler seed; their leaves form one group, so the group term compares the trees and
                       the turns before the first branch point (each tree's root prefix) get credit. 1 (the
                       default): one tree, whose root prefix every leaf shares (group term 0 there)
    branch_parts:      "parts" only: the env part boundaries at which every branch forks, ascending, each
                       counted as the boundaries the branch has passed (turns whose info has
                       `context_reset` True): 1 (the default) forks at the first turn after the first
                       boundary, the start of the second part, so siblings share the whole first part and
                       its env state; each must be below `rollout.max_turns`
    """

    enabled: bool = False
    branch_turns: tuple[int, ...] = (1,)
    width: int = 0
    branch_on: str = "turns"
    branch_points: int = 1
    min_turn: int = 1
    max_turn: int = 0
    entropy_threshold: float = 0.0
    trees: int = 1
    branch_parts: tuple[int, ...] = (1,)

    def __post_init__(self) -> None:
        turns = tuple(self.branch_turns)
        if self.branch_on not in BRANCH_ON:
            raise ValueError(
                f"rollout.tree.branch_on={self.branch_on!r} is unknown; use one of {', '.join(BRANCH_ON)}"
            )
        if self.trees < 1:
            raise ValueError(f"rollout.tree.trees must be >= 1 (trees per task), got {self.trees}")
        if self.width == 1 or self.width < 0:
            raise ValueError(
                f"rollout.tree.width must be 0 (from train.group_size) or >= 2, got {self.width}"
            )
        if not turns or list(turns) != sorted(set(turns)) or turns[0] < 1:
            raise ValueError(f"rollout.tree.branch_turns must be distinct turns >= 1, ascending; got {turns}")
        parts = tuple(self.branch_parts)
        if not parts or list(parts) != sorted(set(parts)) or parts[0] < 1:
            raise ValueError(
                f"rollout.tree.branch_parts must be distinct part boundaries >= 1 (1: at the start of the "
                f"second part), strictly ascending, e.g. [1] or [1, 2]; got {parts}"
            )
        if self.branch_points < 1 or self.min_turn < 1:
            raise ValueError(
                f"rollout.tree.branch_points and rollout.tree.min_turn must be >= 1 (a branch point follows "
                f"a tool result), got {self.branch_points} and {self.min_turn}"
            )
        if self.max_turn and self.max_turn < self.min_turn + self.branch_points - 1:
            raise ValueError(
                f"rollout.tree: turns {self.min_turn}..{self.max_turn} (min_turn..max_turn) cannot hold "
                f"{self.branch_points} branch point(s) on a path; raise max_turn (0: rollout.max_turns - 1) "
                "or lower branch_points"
            )
        if not math.isfinite(self.entropy_threshold):
            raise ValueError(f"rollout.tree.entropy_threshold must be finite, got {self.entropy_threshold}")

    @property
    def levels(self) -> int:
        """Branch points on every root-to-leaf path (of an episode that runs long enough to reach them)."""
        if self.branch_on == "parts":
            return len(self.branch_parts)
        return len(self.branch_turns) if self.branch_on == "turns" else self.branch_points

    def last_turn(self, max_turns: int) -> int:
        """The last turn a branch point may be on entropy, with `rollout.max_turns` = `max_turns`."""
        return self.max_turn or max_turns - 1

    def width_for(self, group_size: int) -> int:
        """The branches at each branch point for groups of `group_size` leaves over `trees` trees;
        ValueError when no width gives exactly that many."""
        levels, trees = self.levels, self.trees
        per_tree = group_size // trees
        width = self.width or round(per_tree ** (1 / levels))
        if width < 2 or trees * width**levels != group_size:
            setting = LEVEL_NAMES[self.branch_on]
            examples = " or ".join(str(trees * w**levels) for w in (2, 3))
            raise ValueError(
                f"rollout.tree: {trees} tree(s) with {levels} {setting} of width {self.width or 'w'} cannot "
                f"make train.group_size={group_size} leaves; set train.group_size to trees * width ** "
                f"{levels} (e.g. {examples} with {trees} tree(s) and {levels} {setting}), or set "
                "rollout.tree.width or rollout.tree.trees"
            )
        return width


CONTEXT_POLICIES = ("full", "window", "mask", "summary")
SUMMARY_INSTRUCTION = (
    "Your context is about to be cleared. Write a short summary of your work on the task so far: what you "
    "found, what you changed, what failed, and what to do next. Write no tool call."
)


@dataclass(frozen=True)
class ContextConfig:
    """What each turn's prompt holds (`rollout.context.*`, `agentrl/agent/context.py`, docs/context.md).

    policy:              "full" (the default): one growing chat, each turn appended to the last; "window":
                         the first prompt (system message, few-shot examples, the task) and the last
                         `keep_turns` (assistant turn, observation) pairs, a fresh window at each env
                         boundary (`info["context_reset"]`) and the env's latest `info["state_text"]` after
                         the task; "mask": every turn, but the tool outputs of all but the last `keep_turns`
                         turns replaced by a one-line stub that says how many characters it dropped (a
                         boundary's observation, the next task, is never masked); "summary": one growing
                         chat until the next prompt would pass `summary_at_tokens`, then the policy writes a
                         summary (a sampled turn of its own, trained with the episode's credit) and the next
                         prompt is the first prompt around the task, that summary and the last tool result.
                         A prompt that is not the previous one plus the new turn starts a new token segment,
                         trained as its own sample
    keep_turns:          "window" and "mask": the (assistant turn, observation) pairs shown whole (>= 1)
    resets:              "window": start a fresh window at an env boundary (`info["context_reset"]`); off,
                         the window slides across boundaries
    summary_at_tokens:   "summary": summarise when the next turn's prompt plus `sampling.max_new_tokens`
                         would pass this many tokens; below `rollout.max_context_tokens`
    summary_max_tokens:  "summary": the longest summary sampled, in tokens
    summary_instruction: "summary": the user message that asks for the summary
    """

    policy: str = "full"
    keep_turns: int = 4
    resets: bool = True
    summary_at_tokens: int = 1536
    summary_max_tokens: int = 192
    summary_instruction: str = SUMMARY_INSTRUCTION

    def __post_init__(self) -> None:
        if self.policy not in CONTEXT_POLICIES:
            raise ValueError(
                f"rollout.context.policy={self.policy!r} is unknown; use one of {', '.join(CONTEXT_POLICIES)}"
            )
        if self.keep_turns < 1:
            raise ValueError(
                f"rollout.context.keep_turns must be >= 1 (the turns shown whole), got {self.keep_turns}"
            )
        if self.summary_at_tokens < 1 or self.summary_max_tokens < 1 or not self.summary_instruction.strip():
            raise ValueError(
                "rollout.context.summary_at_tokens and summary_max_tokens must be >= 1 and "
                "summary_instruction not empty"
            )


@dataclass(frozen=True)
class RolloutConfig:
    """The players' budgets and prompt.

    max_turns:          assistant turns per episode before it stops with `max_turns`
    max_context_tokens: an episode stops with `max_tokens` when the next turn (prompt so far plus
                        `max_new_tokens`) could exceed this
    instructions:       the system prompt's opening text; None uses `prompting.DEFAULT_INSTRUCTIONS`
    infra_attempts:     plays of an episode whose earlier plays ended in an infrastructure failure
                        (1 disables re-runs); in a tree, plays of each branch, of each branch point's fork
                        call and of the whole tree (agentrl/agent/tree.py, "Failures")
    seeded_sampling:    give every turn its own sampler seed, derived from (rollout seed, task, group
                        member, attempt, turn), so rollouts are reproducible whatever the batching (the HF
                        engine then samples each request alone: slower; for exact resume tests and
                        debugging)
    harness:            an external agent harness that plays the episodes instead of `run_episode`, through
                        an OpenAI-compatible endpoint that records every call (`agentrl/harness`,
                        docs/harness.md); off by default. `max_turns` then bounds its model calls and
                        `max_context_tokens` each call's prompt plus `max_tokens`
    tree:               tree rollouts from forked env states (`TreeConfig`); off by default; not with a
                        harness (a harness keeps its own state outside agentrl, which a fork cannot copy)
    context:            what each turn's prompt holds (`ContextConfig`): the whole episode by default; not
                        with a harness (a harness builds its own prompts; the recorder segments them)
    """

    max_turns: int = 4
    max_context_tokens: int = 2048
    instructions: str | None = None
    infra_attempts: int = 3
    seeded_sampling: bool = False
    harness: HarnessConfig = field(default_factory=HarnessConfig)
    tree: TreeConfig = field(default_factory=TreeConfig)
    context: ContextConfig = field(default_factory=ContextConfig)

    def __post_init__(self) -> None:
        context = self.context
        if context.policy == "summary" and context.summary_at_tokens >= self.max_context_tokens:
            raise ValueError(
                f"rollout.context.summary_at_tokens ({context.summary_at_tokens}) must be below "
                f"rollout.max_context_tokens ({self.max_context_tokens}): the summary is written before the "
                "context runs out; lower summary_at_tokens (e.g. to 3/4 of max_context_tokens)"
            )
        if context.policy == "summary" and self.tree.enabled:
            raise ValueError(
                "rollout.tree with rollout.context.policy=summary is not supported yet (a summary turn is no "
                "env step, which tree branch points and replays count); use window or mask with trees"
            )
        if self.context.policy != "full" and self.harness.enabled:
            raise ValueError(
                f"rollout.context.policy={self.context.policy} with rollout.harness: a harness builds its "
                "own prompts (the recorder trains each history it sends as a segment); set "
                "rollout.context.policy=full, or play the episodes with agentrl's own loop"
            )
        if self.tree.enabled and self.harness.enabled:
            raise ValueError(
                "rollout.tree with rollout.harness: a harness keeps its own state outside agentrl, which a "
                "fork cannot copy; turn one of them off"
            )
        tree = self.tree
        if tree.enabled and tree.branch_on == "turns" and tree.branch_turns[-1] >= self.max_turns:
            raise ValueError(
                f"rollout.tree.branch_turns {tree.branch_turns} must be below rollout.max_turns "
                f"({self.max_turns})"
            )
        if tree.enabled and tree.branch_on == "parts" and tree.branch_parts[-1] >= self.max_turns:
            raise ValueError(
                f"rollout.tree.branch_parts {tree.branch_parts} must be below rollout.max_turns "
                f"({self.max_turns}): passing k part boundaries takes at least k turns, and the branch "
                "needs a turn after them; raise rollout.max_turns or lower rollout.tree.branch_parts"
            )
        last = tree.last_turn(self.max_turns)
        if tree.enabled and tree.branch_on == "entropy" and not tree.min_turn + tree.levels - 1 <= last:
            raise ValueError(
                f"rollout.tree: turns {tree.min_turn}..{last} (min_turn..max_turn) cannot hold "
                f"{tree.levels} branch point(s); raise rollout.max_turns ({self.max_turns}), or lower "
                "rollout.tree.min_turn or rollout.tree.branch_points"
            )
        if tree.enabled and tree.branch_on == "entropy" and last >= self.max_turns:
            raise ValueError(
                f"rollout.tree.max_turn ({last}) must be below rollout.max_turns ({self.max_turns}); "
                "0 means rollout.max_turns - 1"
            )

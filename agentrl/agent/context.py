"""Context policies: the tokens each turn's prompt holds, built from the pieces the runner recorded.

What this is: `ContextState` (an episode's context so far: the head it starts from and one `Block` per turn
since), `advance` (the state after one more turn) and `next_prompt` (the prompt tokens of the next turn and
a `view` saying what they hold). Pure functions over token ids; the two renderings they need (a first
prompt around an observation, the tokens appended after a completion) come from a `Renderer`, which the
runner makes from the engine's tokenizer (`agentrl.agent.prompting`).

Token-in/token-out: a prompt is always the concatenation of pieces recorded once: the head (the first
prompt, or at an env boundary a first prompt around the boundary's observation), then per shown turn its
sampled completion ids as sampled and the observation tokens the runner rendered after it (or, masked, the
same rendering of a one-line stub). Nothing sampled is re-tokenised. When the next prompt is the previous
one plus the new turn the runner appends it; otherwise it starts a new token segment (`Turn.segment`), which
the trainer trains as its own sample (`agentrl.trainer.samples.episode_to_samples`).

Policies (`ContextConfig`, docs/context.md):
    full    not handled here: the runner appends every observation (`rollout.py`), as it always has.
    window  head + the last `keep_turns` turns. An env boundary (`info["context_reset"]`) makes the
            boundary's observation the task of a fresh head; the env's latest `info["state_text"]` is
            written after the task in the head.
    mask    head + every turn, the observations of all but the last `keep_turns` turns replaced by
            `stub_text`; a boundary's observation (the next task) is never masked.
    summary head + every turn until the next prompt would pass `summary_at_tokens` (`wants_summary`); then
            the runner has the policy write a summary turn, and the head becomes a first prompt around the
            task, the summary and the last tool result (`summarised`, `summary_observation`).

What this is not: the episode loop (`rollout.py`) or the chat template's rendering (`prompting.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from agentrl.agent.rollout_config import ContextConfig
from agentrl.env.core import INFO_CONTEXT_RESET, INFO_STATE_TEXT


class Renderer(Protocol):
    """The two renderings a policy needs, bound to one tokenizer and one episode's tools and examples."""

    def first(self, observation: str) -> list[int]:
        """The ids of a first prompt (system message, few-shot examples) around `observation`."""
        ...

    def delta(self, observation: str, completion_ended: bool) -> list[int]:
        """The ids appended after a completion: its end of turn (unless sampled), the observation, the
        next assistant header."""
        ...

    def request(self, observation: str, instruction: str, completion_ended: bool) -> list[int]:
        """The ids appended after a completion: its end of turn (unless sampled), the observation, then
        `instruction` as a user message and the next assistant header."""
        ...


@dataclass(frozen=True)
class Block:
    """One turn since the head: its sampled ids and the tokens rendered after it (`delta`); under mask,
    the same rendering of the stub (`stub`; None where the observation is never masked)."""

    turn: int
    completion: tuple[int, ...]
    delta: tuple[int, ...]
    stub: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ContextState:
    """An episode's context after its turns so far.

    head:       the ids every prompt of the current window starts with (a first prompt)
    task:       the observation the head was rendered around (the episode's first, or a boundary's)
    task_turn:  None when `task` is the episode's first observation, else the turn whose observation it is
    state_text: the env's latest `info["state_text"]` (window only: written after the task in the head)
    blocks:     the turns since the head, in order
    observation: the latest observation, and `ended`, whether the latest completion sampled its end of
                turn (summary: what the summary request shows and the next head repeats)
    summary_turn: summary: the turn that wrote the summary in the head, None before the first
    """

    head: tuple[int, ...]
    task: str
    task_turn: int | None = None
    state_text: str | None = None
    blocks: tuple[Block, ...] = ()
    observation: str = ""
    ended: bool = True
    summary_turn: int | None = None


def start_state(first_prompt: Sequence[int], observation: str) -> ContextState:
    """The state before turn 0: the head is the rendered first prompt around the reset's observation."""
    return ContextState(tuple(first_prompt), observation)


def stub_text(observation: str) -> str:
    """What a masked observation becomes: one line that says how much was dropped."""
    return f"[output of an earlier call omitted: {len(observation)} characters]"


def summary_observation(task: str, summary: str, last_observation: str) -> str:
    """What the head after a summary is rendered around: the task, the policy's summary, the last result."""
    return (
        f"{task}\n\nYour summary of the work so far:\n{summary.strip()}\n\n"
        f"The last tool result:\n{last_observation}"
    )


def head_observation(task: str, state_text: str | None) -> str:
    """The observation a window's head is rendered around: the task, then the env's state line."""
    return task if not state_text else f"{task}\n\n{state_text}"


def advance(
    state: ContextState,
    config: ContextConfig,
    renderer: Renderer,
    turn: int,
    completion: Sequence[int],
    completion_ended: bool,
    observation: str,
    info: Mapping[str, Any],
) -> ContextState:
    """The state after turn `turn` (its sampled ids `completion`, the env's `observation` and `info`)."""
    boundary = bool(info.get(INFO_CONTEXT_RESET, False))
    state_text = info.get(INFO_STATE_TEXT)
    state_text = str(state_text) if state_text is not None else None
    if config.policy == "window" and boundary and config.resets:
        return ContextState(
            tuple(renderer.first(head_observation(observation, state_text))), observation, turn, state_text
        )
    delta = tuple(renderer.delta(observation, completion_ended))
    masks = config.policy == "mask" and not boundary
    stub = tuple(renderer.delta(stub_text(observation), completion_ended)) if masks else None
    blocks = (*state.blocks, Block(turn, tuple(completion), delta, stub))
    state = replace(state, blocks=blocks, observation=observation, ended=completion_ended)
    if config.policy == "window" and state_text != state.state_text:
        head = tuple(renderer.first(head_observation(state.task, state_text)))
        return replace(state, head=head, state_text=state_text)
    return state


def wants_summary(
    state: ContextState, config: ContextConfig, prompt_tokens: int, max_new_tokens: int
) -> bool:
    """Summary: whether the next turn (its `prompt_tokens` plus `max_new_tokens`) would pass
    `summary_at_tokens` with a turn since the head to summarise (never twice in a row: a head that is itself
    too long is left to the context budget)."""
    return (
        config.policy == "summary"
        and bool(state.blocks)
        and prompt_tokens + max_new_tokens > config.summary_at_tokens
    )


def summary_request(state: ContextState, config: ContextConfig, renderer: Renderer) -> list[int]:
    """The ids to append to the current segment to ask for a summary: the latest observation, then the
    instruction as a user message."""
    return renderer.request(state.observation, config.summary_instruction, state.ended)


def summarised(state: ContextState, renderer: Renderer, summary: str, turn: int) -> ContextState:
    """The state after turn `turn` wrote `summary`: a head around the task, the summary and the last tool
    result, and no turns since."""
    head = renderer.first(summary_observation(state.task, summary, state.observation))
    return replace(state, head=tuple(head), blocks=(), summary_turn=turn)


def next_prompt(state: ContextState, config: ContextConfig) -> tuple[list[int], dict[str, Any]]:
    """The next turn's prompt ids under `config`'s policy, and its view: what the prompt holds, as the
    store and the viewer keep it (`policy`, `task_turn`, the `shown` turns, the `masked` ones, and the
    `state_text` when there is one)."""
    keep = config.keep_turns
    if config.policy == "window":
        shown = state.blocks[-keep:]
        masked: tuple[Block, ...] = ()
    else:
        shown = state.blocks
        masked = tuple(block for block in state.blocks[:-keep] if block.stub is not None)
    hidden = {block.turn for block in masked}
    ids = list(state.head)
    for block in shown:
        ids.extend(block.completion)
        ids.extend(block.stub if block.turn in hidden and block.stub is not None else block.delta)
    view: dict[str, Any] = {
        "policy": config.policy,
        "task_turn": state.task_turn,
        "shown": [block.turn for block in shown],
        "masked": sorted(hidden),
    }
    if state.state_text:
        view["state_text"] = state.state_text
    if config.policy == "summary":
        view["summary_turn"] = state.summary_turn
    return ids, view


def continues(context: Sequence[int], prompt: Sequence[int]) -> bool:
    """Whether `prompt` is `context` plus more tokens (the same segment), not a new one."""
    return len(prompt) > len(context) and list(prompt[: len(context)]) == list(context)

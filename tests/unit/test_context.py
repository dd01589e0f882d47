"""Context policies (`rollout.context`): window, mask, env boundaries, and how their segments train.

The episode loop runs with a scripted engine and an in-memory session client (pure logic, no model, no
server); the tokenizer is real (a byte-level ChatML tokenizer built in memory), so prompts go through the
same rendering code as in training. The invariant every test leans on: the trainer's sample of a segment
holds, up to each turn, exactly the tokens the engine was fed for it (token-in/token-out).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import torch
from tiny_tokenizers import byte_tokenizer

from agentrl.agent.context import stub_text, summary_observation
from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.parsing import format_tool_call
from agentrl.agent.prompting import render_first_prompt
from agentrl.agent.rollout import Walk, first_walk, run_episode
from agentrl.agent.rollout_config import (
    SUMMARY_INSTRUCTION,
    ContextConfig,
    HarnessConfig,
    RolloutConfig,
    TreeConfig,
)
from agentrl.env.core import StepResult, tool_spec
from agentrl.errors import ConfigError
from agentrl.trainer.samples import env_steps_of, episode_to_samples, segment_turns
from agentrl.typed import build
from agentrl.types import Action, Episode, SessionStart, ToolCall

SAMPLING = SamplingParams(max_new_tokens=32)
TOKENIZER = byte_tokenizer(pad=False)
IM_END = TOKENIZER.convert_tokens_to_ids("<|im_end|>")
TOOLS = [tool_spec("add", "Add n.", {"n": {"type": "integer"}}), tool_spec("submit", "Finish.", {})]


def add(n: int) -> str:
    return format_tool_call(ToolCall("add", {"n": n}))


class ScriptedEngine:
    """Replies with scripted texts and records every prompt it was fed."""

    def __init__(self, replies: Sequence[str]) -> None:
        self.tokenizer = TOKENIZER
        self.replies = list(replies)
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        self.prompts.append(list(prompt_ids))
        if SUMMARY_INSTRUCTION in TOKENIZER.decode(list(prompt_ids[-300:])):
            text = f"Summary {len(self.prompts)}: I added numbers."
        else:
            text = self.replies.pop(0) if self.replies else add(1)
        ids = TOKENIZER.encode(text, add_special_tokens=False) + [IM_END]
        return Completion(tuple(ids), tuple(-0.5 for _ in ids), text, "stop", True)


@dataclass
class PartsClient:
    """An in-memory env: each `add(n)` answers "total=T" (a long output when `verbose`); every
    `part_length` steps a part ends (`context_reset`, the next part's question as the observation); the
    episode ends after `steps` steps. `state_text` on every step when `remember`."""

    steps: int = 6
    part_length: int = 0
    verbose: bool = False
    remember: bool = False
    taken: int = 0
    totals: dict[str, int] = field(default_factory=dict)

    async def create_session(self, env_id: str, task: Mapping[str, Any], seed: int) -> SessionStart:
        self.totals["s"] = 0
        return SessionStart("s", "Part 1: reach 9.", {"state_key": "0"}, TOOLS, [])

    async def step(self, session_id: str, action: Action) -> StepResult:
        self.taken += 1
        self.totals[session_id] += int(action.tool_calls[0].arguments["n"]) if action.tool_calls else 0
        total = self.totals[session_id]
        info: dict[str, Any] = {"state_key": str(total)}
        observation = f"total={total}" + (" and some long output" * 5 if self.verbose else "")
        if self.part_length and self.taken % self.part_length == 0:
            observation = f"Part {self.taken // self.part_length + 1}: reach {total + 9}."
            info["context_reset"] = True
        if self.remember:
            info["state_text"] = f"Steps taken: {self.taken}."
        return StepResult(observation, 1.0, self.taken >= self.steps, False, info)

    async def close_session(self, session_id: str) -> None:
        pass


def play(
    config: ContextConfig, client: PartsClient, replies: int = 8, max_turns: int = 20
) -> tuple[Episode, ScriptedEngine]:
    engine = ScriptedEngine([add(n) for n in range(1, replies + 1)])
    rollout = RolloutConfig(max_turns=max_turns, max_context_tokens=100_000, context=config)
    episode = asyncio.run(
        run_episode(client, engine, "test/Parts-v0", {"id": "t"}, 0, "g", SAMPLING, rollout)
    )
    return episode, engine


def engine_inputs_from_turns(episode: Episode) -> list[list[int]]:
    """What the engine must have been fed for each turn, rebuilt from the recorded turns alone: the
    turns of its segment so far (prompt and completion), then its own prompt."""
    inputs, segment, context = [], None, []
    for turn in episode.turns:
        if turn.segment != segment:
            segment, context = turn.segment, []
        inputs.append([*context, *turn.prompt_ids])
        context = [*context, *turn.prompt_ids, *turn.completion_ids]
    return inputs


def test_window_wider_than_the_episode_gives_full_samples_exactly() -> None:
    """The golden equality: a window that never drops a turn is the full context, token for token."""
    full, full_engine = play(ContextConfig(), PartsClient(steps=6))
    window, window_engine = play(ContextConfig(policy="window", keep_turns=6), PartsClient(steps=6))
    assert window_engine.prompts == full_engine.prompts
    assert [t.segment for t in window.turns] == [0] * 6
    advantages = [0.5, -0.25, 1.0, 0.0, 2.0, -1.0]
    (full_sample,) = episode_to_samples(full, advantages, 100_000)
    (window_sample,) = episode_to_samples(window, advantages, 100_000)
    for name in ("input_ids", "loss_mask", "old_logprobs", "advantages"):
        assert torch.equal(getattr(full_sample, name), getattr(window_sample, name)), name
    assert all(t.prompt_view is None for t in full.turns)
    assert window.turns[-1].prompt_view == {
        "policy": "window",
        "task_turn": None,
        "shown": [0, 1, 2, 3, 4],
        "masked": [],
    }


def test_window_keeps_the_last_turns_and_each_segment_trains_what_the_engine_saw() -> None:
    episode, engine = play(ContextConfig(policy="window", keep_turns=2), PartsClient(steps=6))
    assert engine_inputs_from_turns(episode) == engine.prompts
    # turns 0-2 extend one sequence; from turn 3 on the window drops a turn each time: a new segment each
    assert [t.segment for t in episode.turns] == [0, 0, 0, 1, 2, 3]
    first = render_first_prompt(TOKENIZER, TOOLS, [], "Part 1: reach 9.")
    for turn, prompt in zip(episode.turns[3:], engine.prompts[3:], strict=True):
        assert prompt[: len(first)] == first and turn.prompt_ids == tuple(prompt)
        assert turn.prompt_view is not None and turn.prompt_view["shown"] == [turn.index - 2, turn.index - 1]
    # the sampled ids of the shown turns are in the prompt as sampled, not re-tokenised
    last = engine.prompts[-1]
    shown = [*episode.turns[3].completion_ids]
    assert any(last[i : i + len(shown)] == shown for i in range(len(last)))
    samples = episode_to_samples(episode, [1.0] * 6, 100_000)
    assert [s.num_sampled_tokens for s in samples] == [
        sum(len(t.completion_ids) for t in episode.turns[:3]),
        *(len(t.completion_ids) for t in episode.turns[3:]),
    ]
    for sample, positions in zip(samples, segment_turns(episode), strict=True):
        last_turn = episode.turns[positions[-1]]
        expected = [*engine.prompts[positions[-1]], *last_turn.completion_ids]
        assert sample.input_ids.tolist() == expected


def test_window_starts_fresh_at_an_env_boundary() -> None:
    episode, engine = play(ContextConfig(policy="window", keep_turns=4), PartsClient(steps=6, part_length=2))
    assert engine_inputs_from_turns(episode) == engine.prompts
    assert [t.segment for t in episode.turns] == [0, 0, 1, 1, 2, 2]
    # the turn after a boundary sees a first prompt around the boundary's observation, nothing before it
    assert engine.prompts[2] == render_first_prompt(TOKENIZER, TOOLS, [], "Part 2: reach 12.")
    assert episode.turns[2].prompt_view == {"policy": "window", "task_turn": 1, "shown": [], "masked": []}
    assert episode.turns[3].prompt_view is not None and episode.turns[3].prompt_view["shown"] == [2]
    # resets off: the same env, one sliding window across the boundaries
    sliding, _ = play(
        ContextConfig(policy="window", keep_turns=6, resets=False), PartsClient(steps=6, part_length=2)
    )
    assert [t.segment for t in sliding.turns] == [0] * 6


def test_window_writes_the_env_state_line_after_the_task() -> None:
    episode, engine = play(ContextConfig(policy="window", keep_turns=1), PartsClient(steps=3, remember=True))
    assert engine_inputs_from_turns(episode) == engine.prompts
    text = TOKENIZER.decode(engine.prompts[2])
    assert "Part 1: reach 9.\n\nSteps taken: 2." in text and "Steps taken: 1." not in text
    assert episode.turns[2].prompt_view is not None
    assert episode.turns[2].prompt_view["state_text"] == "Steps taken: 2."


def test_mask_stubs_old_outputs_and_keeps_every_turn_and_every_boundary() -> None:
    client = PartsClient(steps=6, part_length=3, verbose=True)
    episode, engine = play(ContextConfig(policy="mask", keep_turns=2), client)
    assert engine_inputs_from_turns(episode) == engine.prompts
    last = TOKENIZER.decode(engine.prompts[-1])
    long_output = "total=1" + " and some long output" * 5
    assert stub_text(long_output) in last and long_output not in last  # turn 0's output, masked
    assert "Part 2: reach 15." in last  # turn 2's observation starts a part: never masked
    for turn in episode.turns[:-1]:  # every assistant turn is still there
        assert TOKENIZER.decode(list(turn.completion_ids)).replace("<|im_end|>", "") in last
    assert episode.turns[-1].prompt_view is not None
    assert episode.turns[-1].prompt_view["masked"] == [0, 1]  # 2 is a boundary; 3 and 4 the last two
    assert episode.turns[-1].prompt_view["shown"] == [0, 1, 2, 3, 4]
    # a new segment each time an output ages out and is masked; turn 2's boundary never is
    assert [t.segment for t in episode.turns] == [0, 0, 0, 1, 2, 2]


def test_a_tree_branch_copied_prefix_stays_untrained_in_a_later_segment() -> None:
    episode, _ = play(ContextConfig(policy="window", keep_turns=1), PartsClient(steps=4))
    assert [t.segment for t in episode.turns] == [0, 0, 1, 2]
    branch = replace(episode, parent_id="root", branch_turn=3)  # turns 0-2 copied from the parent
    assert segment_turns(branch) == [(3,)]  # the segments of copies alone train nothing: left out
    partial = replace(episode, parent_id="root", branch_turn=1)
    samples = episode_to_samples(partial, [1.0] * 4, 100_000)
    first_completion = len(episode.turns[0].completion_ids)
    assert samples[0].num_sampled_tokens == len(episode.turns[1].completion_ids)
    assert samples[0].loss_mask[: len(episode.turns[0].prompt_ids) + first_completion].sum() == 0


def test_a_branch_keeps_its_context_pieces_and_segment() -> None:
    start = SessionStart("s", "Part 1: reach 9.", {"state_key": "0"}, TOOLS, [])
    config = RolloutConfig(context=ContextConfig(policy="window", keep_turns=1))
    walk = first_walk(ScriptedEngine([]), start, config)
    walk.segment = 2
    branch = walk.branch("fork")
    assert isinstance(branch, Walk) and branch.window is walk.window and branch.segment == 2
    assert branch.parent_id == walk.episode_id and branch.episode_id != walk.episode_id
    assert branch.pending == walk.pending and branch.pending is not walk.pending


def test_summary_writes_a_turn_then_starts_from_the_task_the_summary_and_the_last_result() -> None:
    first = render_first_prompt(TOKENIZER, TOOLS, [], "Part 1: reach 9.")
    at = len(first) + 2 * 40 + SAMPLING.max_new_tokens  # about two turns past the first prompt
    config = ContextConfig(policy="summary", summary_at_tokens=at, summary_max_tokens=24)
    client = PartsClient(steps=5)
    episode, engine = play(config, client, max_turns=5)
    assert engine_inputs_from_turns(episode) == engine.prompts
    summaries = [turn for turn in episode.turns if turn.is_summary]
    assert summaries, "the prompt passed summary_at_tokens: a summary turn was due"
    played = [turn for turn in episode.turns if not turn.is_summary]
    assert len(played) == client.taken == 5 and episode.stop_reason == "terminated"
    assert env_steps_of([episode]) == 5  # a summary turn is no env step
    first_summary = summaries[0]
    before = episode.turns[first_summary.index - 1]
    assert first_summary.reward == 0.0 and first_summary.observation == "" and not first_summary.invalid
    assert first_summary.state_key == before.state_key  # written in the state the last step left
    assert SUMMARY_INSTRUCTION in TOKENIZER.decode(engine.prompts[first_summary.index])
    after = episode.turns[first_summary.index + 1]
    assert after.segment == first_summary.segment + 1
    expected = summary_observation("Part 1: reach 9.", first_summary.text, before.observation)
    assert engine.prompts[after.index] == render_first_prompt(TOKENIZER, TOOLS, [], expected)
    assert after.prompt_view is not None and after.prompt_view["summary_turn"] == first_summary.index
    # the summary turn trains in the segment that asked for it, with its own advantage
    advantages = [float(turn.index) for turn in episode.turns]
    samples = episode_to_samples(episode, advantages, 100_000)
    positions = segment_turns(episode)
    holding = next(i for i, p in enumerate(positions) if first_summary.index in p)
    assert float(first_summary.index) in samples[holding].advantages.tolist()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"context": {"policy": "last_k"}}, "rollout.context.policy='last_k' is unknown"),
        ({"context": {"policy": "window", "keep_turns": 0}}, "keep_turns must be >= 1"),
        ({"context": {"keep": 2}}, "unknown key(s) ['keep']"),
        (
            {"max_context_tokens": 2048, "context": {"policy": "summary", "summary_at_tokens": 2048}},
            "summary_at_tokens (2048) must be below rollout.max_context_tokens (2048)",
        ),
        ({"context": {"policy": "summary", "summary_max_tokens": 0}}, "summary_max_tokens must be >= 1"),
    ],
)
def test_context_config_errors_name_the_fix(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build(RolloutConfig, data, "rollout")
    assert message in str(caught.value)


def test_a_harness_builds_its_own_prompts_and_trees_do_not_take_summaries() -> None:
    with pytest.raises(ValueError, match="set rollout.context.policy=full"):
        RolloutConfig(context=ContextConfig(policy="mask"), harness=HarnessConfig(target="m:f"))
    with pytest.raises(ValueError, match="use window or mask with trees"):
        RolloutConfig(context=ContextConfig(policy="summary"), tree=TreeConfig(enabled=True))

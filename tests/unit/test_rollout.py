"""The episode loop with a scripted engine and an in-memory session client (pure logic, no model, no server).

The tokenizer is real (a byte-level ChatML tokenizer built in memory), so prompts go through the same
rendering code as in training.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from tiny_tokenizers import byte_tokenizer

from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.parsing import format_tool_call
from agentrl.agent.rollout import collect_rollouts, episode_seed, run_episode
from agentrl.agent.rollout_config import RolloutConfig
from agentrl.env.core import StepResult, tool_spec
from agentrl.errors import ModelError, ServiceUnavailable
from agentrl.types import Action, ToolCall

SAMPLING = SamplingParams(max_new_tokens=64)


TOKENIZER = byte_tokenizer(pad=False)
IM_END = TOKENIZER.convert_tokens_to_ids("<|im_end|>")


def call(name: str, **arguments: Any) -> str:
    return format_tool_call(ToolCall(name, arguments))


class ScriptedEngine:
    """Replies with scripted texts; a reply ending in "…" is cut off (no end-of-turn token)."""

    def __init__(self, replies: Sequence[str]) -> None:
        self.tokenizer = TOKENIZER
        self.replies = list(replies)
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        self.prompts.append(list(prompt_ids))
        text = self.replies.pop(0) if self.replies else "I give up."
        ended = not text.endswith("…")
        ids = TOKENIZER.encode(text, add_special_tokens=False) + ([IM_END] if ended else [])
        logprobs = tuple(-0.5 for _ in ids)
        return Completion(tuple(ids), logprobs, text, "stop" if ended else "length", ended)


@dataclass(frozen=True)
class Start:
    session_id: str
    observation: str
    info: Mapping[str, Any]
    tools: Sequence[Mapping[str, Any]]
    examples: Sequence[Mapping[str, Any]]


@dataclass
class CounterClient:
    """An in-memory "reach the target with add(n), then submit()" env behind the session interface."""

    fail_on_step: int | None = None
    fail_on_create: bool = False
    totals: dict[str, int] = field(default_factory=dict)
    targets: dict[str, int] = field(default_factory=dict)
    closed: list[str] = field(default_factory=list)
    created: list[tuple[str, int]] = field(default_factory=list)
    steps: int = 0

    async def create_session(self, env_id: str, task: Mapping[str, Any], seed: int) -> Start:
        if self.fail_on_create:
            raise ServiceUnavailable("env service down; start it with `agentrl serve`")
        session_id = f"s{len(self.created)}"
        self.created.append((str(task["id"]), seed))
        self.totals[session_id], self.targets[session_id] = 0, int(task["target"])
        tools = [tool_spec("add", "Add n.", {"n": {"type": "integer"}}), tool_spec("submit", "Finish.", {})]
        return Start(session_id, f"Reach {task['target']}.", {"state_key": "0"}, tools, [])

    async def step(self, session_id: str, action: Action) -> StepResult:
        self.steps += 1
        if self.steps == self.fail_on_step:
            raise ServiceUnavailable("sandbox container vanished")
        if not action.tool_calls:
            return StepResult("error: call a tool", 0.0, False, False, {"invalid": True, "state_key": "?"})
        tool = action.tool_calls[0]
        if tool.name == "submit":
            success = self.totals[session_id] == self.targets[session_id]
            return StepResult("done", float(success), True, False, {"success": success, "state_key": "end"})
        self.totals[session_id] += int(tool.arguments["n"])
        total = str(self.totals[session_id])
        return StepResult(f"total={total}", 0.0, False, False, {"state_key": total})

    async def close_session(self, session_id: str) -> None:
        self.closed.append(session_id)


def play(engine: ScriptedEngine, client: CounterClient, config: RolloutConfig | None = None, target: int = 5):
    task = {"id": "t1", "target": target}
    config = config or RolloutConfig()
    return asyncio.run(run_episode(client, engine, "test/Counter-v0", task, 7, "g1", SAMPLING, config))


def test_a_successful_episode_and_its_token_bookkeeping() -> None:
    engine = ScriptedEngine([call("add", n=2), "Adding " + call("add", n=3) + "…", call("submit")])
    client = CounterClient()
    episode = play(engine, client)

    assert episode.stop_reason == "terminated" and episode.success and episode.reward == 1.0
    assert [turn.state_key for turn in episode.turns] == ["2", "5", "end"]
    assert episode.initial_state_key == "0" and episode.error is None
    assert (episode.task_id, episode.group_id, episode.seed) == ("t1", "g1", 7)
    assert len(episode.episode_id) == 32 and client.closed == ["s0"]
    assert not any(turn.invalid for turn in episode.turns)
    # the training sequence is exactly what the engine was fed last, plus its last completion
    sequence = [token for turn in episode.turns for token in (*turn.prompt_ids, *turn.completion_ids)]
    assert sequence == engine.prompts[-1] + list(episode.turns[-1].completion_ids)
    assert all(len(t.completion_logprobs) == len(t.completion_ids) for t in episode.turns)
    # turn 1 was cut off without <|im_end|>: the runner closed the turn before the observation
    assert episode.turns[2].prompt_ids[0] == IM_END and episode.turns[1].prompt_ids[0] != IM_END
    assert [turn.finish_reason for turn in episode.turns] == ["stop", "length", "stop"]  # the engine's
    assert episode.prompt_inputs is not None and episode.prompt_inputs["examples"] == []
    assert [tool["function"]["name"] for tool in episode.prompt_inputs["tools"]] == ["add", "submit"]
    assert str(TOKENIZER.decode(episode.turns[1].prompt_ids)).endswith(
        "<|im_start|>tool\ntotal=2<|im_end|>\n<|im_start|>assistant\n"
    )


def test_invalid_turns_are_recorded_and_sent_to_the_env() -> None:
    replies = ["The answer is 5.", '<tool_call>{"name": "add", "arguments": [5]}</tool_call>', call("submit")]
    episode = play(ScriptedEngine(replies), CounterClient())
    assert [turn.invalid for turn in episode.turns] == [True, True, False]
    assert (
        episode.turns[0].action.parse_error is None and episode.turns[0].observation == "error: call a tool"
    )
    assert "must be a JSON object" in str(episode.turns[1].action.parse_error)
    assert episode.stop_reason == "terminated" and not episode.success


def test_env_flagged_invalid_turn_counts_as_invalid() -> None:
    class Rejecting(CounterClient):
        async def step(self, session_id: str, action: Action) -> StepResult:
            result = await super().step(session_id, action)
            return result._replace(info={**result.info, "invalid": True})

    episode = play(ScriptedEngine([call("add", n=1)]), Rejecting(), RolloutConfig(max_turns=1))
    assert episode.turns[0].invalid


def test_infra_error_ends_the_episode_with_the_turns_so_far() -> None:
    client = CounterClient(fail_on_step=2)
    episode = play(ScriptedEngine([call("add", n=2), call("add", n=3)]), client)
    assert episode.stop_reason == "infra_error" and episode.is_infra_failure
    assert episode.error == "sandbox container vanished"
    assert len(episode.turns) == 1 and client.closed == ["s0"]


def test_infra_error_when_opening_the_session() -> None:
    client = CounterClient(fail_on_create=True)
    episode = play(ScriptedEngine([]), client)
    assert episode.stop_reason == "infra_error" and episode.turns == () and client.closed == []
    assert "agentrl serve" in str(episode.error)


def test_other_errors_propagate_and_still_close_the_session() -> None:
    class Broken(ScriptedEngine):
        async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
            raise ModelError("out of memory")

    client = CounterClient()
    with pytest.raises(ModelError):
        play(Broken([]), client)
    assert client.closed == ["s0"]


def test_max_turns_stops_an_episode_that_never_ends() -> None:
    client = CounterClient()
    episode = play(ScriptedEngine([call("add", n=1)] * 10), client, RolloutConfig(max_turns=3))
    assert episode.stop_reason == "max_turns" and len(episode.turns) == 3 and not episode.success
    assert client.closed == ["s0"]


def test_context_budget_stops_before_a_turn_that_might_not_fit() -> None:
    probe = play(ScriptedEngine([call("add", n=1)] * 2), CounterClient(), RolloutConfig(max_turns=2))
    first, second = probe.turns
    # room for turn 0 and its observation, one token short of turn 1's worst case
    budget = first.num_tokens + len(second.prompt_ids) + SAMPLING.max_new_tokens - 1
    client = CounterClient()
    episode = play(
        ScriptedEngine([call("add", n=1)] * 10), client, RolloutConfig(10, max_context_tokens=budget)
    )
    assert episode.stop_reason == "max_tokens" and len(episode.turns) == 1 and client.closed == ["s0"]
    roomy = play(ScriptedEngine([call("add", n=1)] * 2), CounterClient(), RolloutConfig(2, budget + 1))
    assert roomy.stop_reason == "max_turns" and len(roomy.turns) == 2


def test_collect_rollouts_orders_groups_and_shares_seeds_within_a_group() -> None:
    tasks = [{"id": "a", "target": 1}, {"id": "b", "target": 2}]
    engine = ScriptedEngine([call("submit")] * 6)
    client = CounterClient()
    episodes = asyncio.run(
        collect_rollouts(client, engine, "test/Counter-v0", tasks, 3, SAMPLING, RolloutConfig(), seed=11)
    )
    assert [episode.task_id for episode in episodes] == ["a", "a", "a", "b", "b", "b"]
    assert len({episode.group_id for episode in episodes}) == 2
    assert episodes[0].group_id.startswith("a-") and episodes[3].group_id.startswith("b-")
    assert [episode.seed for episode in episodes] == [episode_seed(11, 0)] * 3 + [episode_seed(11, 1)] * 3
    assert episode_seed(11, 0) != episode_seed(12, 0)
    assert sorted(client.closed) == [f"s{i}" for i in range(6)]
    again = asyncio.run(
        collect_rollouts(
            client,
            ScriptedEngine([]),
            "test/Counter-v0",
            tasks[:1],
            1,
            SAMPLING,
            RolloutConfig(),
            seed=11,
            progress=False,
        )
    )
    assert again[0].group_id != episodes[0].group_id  # a fresh nonce per call


class SeedRecorder(ScriptedEngine):
    def __init__(self) -> None:
        super().__init__([])
        self.seeds: list[int | None] = []

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        self.seeds.append(params.seed)
        return await super().generate(prompt_ids, params)


def test_seeded_sampling_gives_each_turn_a_reproducible_seed_of_its_own() -> None:
    tasks = [{"id": "a", "target": 3}]
    config = RolloutConfig(max_turns=2, seeded_sampling=True)

    def seeds() -> list[int | None]:
        engine = SeedRecorder()
        asyncio.run(
            collect_rollouts(CounterClient(), engine, "test/Counter-v0", tasks, 2, SAMPLING, config, 5, False)
        )
        return sorted(engine.seeds, key=str)

    first = seeds()
    assert len(first) == 4 and None not in first and len(set(first)) == 4  # 2 members x 2 turns, all distinct
    assert seeds() == first  # the same in another run, whatever the scheduling
    engine = SeedRecorder()
    asyncio.run(
        collect_rollouts(
            CounterClient(), engine, "test/Counter-v0", tasks, 1, SAMPLING, RolloutConfig(), 5, False
        )
    )
    assert engine.seeds and set(engine.seeds) == {None}  # unseeded by default: the engine's own RNG

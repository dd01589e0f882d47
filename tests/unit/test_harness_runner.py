"""The harness endpoint and runner with a scripted engine and an in-memory env session (no model): the plain
`openai` client in a hand-written tool-calling loop, token bookkeeping and segments, callable, async and
subprocess harnesses, the trainer's samples, and the endpoint's bounds and OpenAI-style errors."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI, OpenAI
from tiny_tokenizers import byte_tokenizer

from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.parsing import format_tool_call
from agentrl.agent.rollout import collect_rollouts, run_episode
from agentrl.agent.rollout_config import HarnessConfig, RolloutConfig
from agentrl.config import RunConfig
from agentrl.env.core import StepResult, tool_spec
from agentrl.errors import ConfigError, ServiceUnavailable
from agentrl.harness.endpoint import ChatEndpoint, chat_format
from agentrl.harness.recorder import EpisodeRecorder
from agentrl.harness.runner import HarnessContext, choose_player, run_harness_episode
from agentrl.trainer.samples import episode_to_samples
from agentrl.trainer.step import compute_advantages, training_samples
from agentrl.types import Action, Episode, ToolCall

TOKENIZER = byte_tokenizer(pad=False)
IM_END = TOKENIZER.convert_tokens_to_ids("<|im_end|>")
SAMPLING = SamplingParams(max_new_tokens=64)
TASK = {"id": "t1", "target": 5}
SYSTEM = "Reach the target with add, then submit."


def call(name: str, **arguments: Any) -> str:
    return format_tool_call(ToolCall(name, arguments))


class ScriptedEngine:
    """Replies with scripted texts (a reply ending in "…" is cut off without the end-of-turn token)."""

    def __init__(self, replies: Sequence[str]) -> None:
        self.tokenizer = TOKENIZER
        self.replies = list(replies)
        self.prompts: list[list[int]] = []
        self.completions: list[Completion] = []

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        self.prompts.append(list(prompt_ids))
        text = self.replies.pop(0) if self.replies else "I give up."
        ended = not text.endswith("…")
        ids = TOKENIZER.encode(text, add_special_tokens=False) + ([IM_END] if ended else [])
        completion = Completion(tuple(ids), tuple(-0.25 for _ in ids), text, "stop", ended)
        self.completions.append(completion)
        return completion


@dataclass(frozen=True)
class Start:
    session_id: str
    observation: str
    info: dict[str, Any]
    tools: list[dict[str, Any]]
    examples: list[dict[str, Any]]


@dataclass
class CounterClient:
    """In memory: reach the target with add(n), then submit() (reward 1 when the total is right)."""

    totals: dict[str, int] = field(default_factory=dict)
    closed: list[str] = field(default_factory=list)
    fail_steps: bool = False

    async def create_session(self, env_id: str, task: Mapping[str, Any], seed: int) -> Start:
        session_id = f"s{len(self.totals)}"
        self.totals[session_id] = 0
        tools = [tool_spec("add", "Add n.", {"n": {"type": "integer"}}), tool_spec("submit", "Finish.", {})]
        return Start(session_id, f"Reach {task['target']}.", {"state_key": "0"}, tools, [])

    async def step(self, session_id: str, action: Action) -> StepResult:
        if self.fail_steps:
            raise ServiceUnavailable("sandbox container vanished")
        if not action.tool_calls:
            return StepResult("error: call a tool", 0.0, False, False, {"invalid": True, "state_key": "?"})
        tool = action.tool_calls[0]
        if tool.name == "submit":
            success = self.totals[session_id] == 5
            return StepResult("done", float(success), True, False, {"success": success, "state_key": "end"})
        self.totals[session_id] += int(tool.arguments["n"])
        total = str(self.totals[session_id])
        return StepResult(f"total={total}", 0.0, False, False, {"state_key": total})

    async def close_session(self, session_id: str) -> None:
        self.closed.append(session_id)


def openai_loop(ctx: HarnessContext) -> None:
    """A hand-written agent over the plain `openai` client: tool calls run in the env session, results go
    back as tool messages; with `ctx.task["summarise_after"]` it replaces its history by a summary then."""
    client = OpenAI(base_url=ctx.base_url, api_key=ctx.api_key, max_retries=0)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": ctx.observation},
    ]
    for number in range(1, 10):
        response = client.chat.completions.create(
            model=ctx.model, messages=messages, tools=ctx.tools, logprobs=True
        )  # type: ignore[arg-type]
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for tool_call in message.tool_calls or []:
            result = ctx.call_tool(tool_call.function.name, json.loads(tool_call.function.arguments))  # type: ignore[union-attr]
            if result.terminated or result.truncated:
                return
            messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": result.observation})
        if number == ctx.task.get("summarise_after"):
            summary = f"{ctx.observation} So far: {messages[-1]['content']}."
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": summary}]


async def async_loop(ctx: HarnessContext) -> None:
    """The same agent as a coroutine over `AsyncOpenAI` (it must not block the event loop)."""
    client = AsyncOpenAI(base_url=ctx.base_url, api_key=ctx.api_key, max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": ctx.observation}]
    for _ in range(5):
        response = await client.chat.completions.create(model=ctx.model, messages=messages, tools=ctx.tools)  # type: ignore[arg-type]
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for tool_call in message.tool_calls or []:
            arguments = json.loads(tool_call.function.arguments)  # type: ignore[union-attr]
            result = await ctx.astep(Action("", (ToolCall(tool_call.function.name, arguments),)))  # type: ignore[union-attr]
            if result.terminated:
                return
            messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": result.observation})


WINNING = [call("add", n=2), "Adding three. " + call("add", n=3) + "…", call("submit")]


def play(engine: ScriptedEngine, harness: Any, task: Mapping[str, Any] = TASK, **rollout: Any) -> Episode:
    config = RolloutConfig(**{"max_turns": 8, **rollout})
    client = CounterClient()
    episode = asyncio.run(
        run_harness_episode(
            client, engine, "test/Counter-v0", task, 7, "g1", SAMPLING, config, harness=harness
        )
    )
    assert client.closed == ["s0"]
    return episode


def sequence(turns: Sequence[Any]) -> list[int]:
    return [token for turn in turns for token in (*turn.prompt_ids, *turn.completion_ids)]


def test_the_openai_client_plays_a_recorded_token_in_token_out_episode() -> None:
    engine = ScriptedEngine(WINNING)
    episode = play(engine, openai_loop)

    assert episode.stop_reason == "terminated" and episode.success and episode.reward == 1.0
    assert [turn.state_key for turn in episode.turns] == [
        "2",
        "5",
        "end",
    ] and episode.initial_state_key == "0"
    assert [turn.action.tool_calls[0].name for turn in episode.turns] == ["add", "add", "submit"]
    assert [turn.segment for turn in episode.turns] == [0, 0, 0] and not any(t.invalid for t in episode.turns)
    # one sequence: exactly what the engine was fed last, plus its last completion; nothing re-tokenised
    assert sequence(episode.turns) == engine.prompts[-1] + list(episode.turns[-1].completion_ids)
    assert [turn.completion_ids for turn in episode.turns] == [c.token_ids for c in engine.completions]
    assert all(turn.completion_logprobs == (-0.25,) * len(turn.completion_ids) for turn in episode.turns)
    # the cut-off turn 1 had no <|im_end|>: the endpoint closed it before the tool message, as the runner does
    assert episode.turns[2].prompt_ids[0] == IM_END and episode.turns[1].prompt_ids[0] != IM_END
    assert str(TOKENIZER.decode(episode.turns[1].prompt_ids)).endswith(
        "<|im_start|>tool\ntotal=2<|im_end|>\n<|im_start|>assistant\n"
    )
    assert [turn.info["continued"] for turn in episode.turns] == [False, True, True]


def test_a_rewritten_history_starts_a_new_segment_and_each_segment_is_a_sample() -> None:
    engine = ScriptedEngine(WINNING)
    episode = play(engine, openai_loop, {**TASK, "summarise_after": 1})

    assert episode.stop_reason == "terminated" and episode.success
    assert [turn.segment for turn in episode.turns] == [0, 1, 1]
    # the new segment's first turn holds its whole prompt, rendered from the harness's summary
    assert list(episode.turns[1].prompt_ids) == engine.prompts[1]
    assert "So far: total=2." in str(TOKENIZER.decode(episode.turns[1].prompt_ids))
    samples = episode_to_samples(episode, [1.0, 0.5, -1.0], 10_000)
    assert [s.input_ids.tolist() for s in samples] == [
        engine.prompts[0] + list(engine.completions[0].token_ids),
        engine.prompts[2] + list(engine.completions[2].token_ids),
    ]
    for sample, advantages in zip(samples, [[1.0], [0.5, -1.0]], strict=True):
        sampled = sample.loss_mask.bool()
        assert sorted(set(sample.advantages[sampled].tolist())) == sorted(set(advantages))
        assert sample.old_logprobs[sampled].tolist() == [-0.25] * int(sampled.sum())
        assert not sample.advantages[~sampled].any() and sample.group_key == "g1"


def test_the_trainer_samples_every_segment_with_the_episode_advantage() -> None:
    def episodes() -> list[Episode]:
        return [play(ScriptedEngine(WINNING), openai_loop, {**TASK, "summarise_after": 1}),
                play(ScriptedEngine([call("submit")]), openai_loop)]  # fmt: skip

    played = episodes()
    assert [e.reward for e in played] == [1.0, 0.0]
    advantages, _ = compute_advantages(played, RunConfig())
    samples = training_samples(played, advantages, 10_000)
    assert len(samples) == 3  # two segments of the winner, one of the loser
    assert [float(s.advantages[s.loss_mask.bool()].mean()) for s in samples] == pytest.approx(
        [1 / 2**0.5] * 2 + [-(1 / 2**0.5)], rel=1e-4
    )


def test_an_async_harness_and_collect_rollouts_with_the_player_the_config_names() -> None:
    episode = play(ScriptedEngine(WINNING), async_loop)
    assert episode.stop_reason == "terminated" and episode.success and len(episode.turns) == 3

    config = RolloutConfig(max_turns=8, harness=HarnessConfig(target="test_harness_runner:openai_loop"))
    engine = ScriptedEngine(WINNING + [call("submit")])
    client = CounterClient()
    played = asyncio.run(
        collect_rollouts(
            client,
            engine,
            "test/Counter-v0",
            [TASK],
            2,
            SAMPLING,
            config,
            seed=0,
            progress=False,
            player=choose_player(config),
        )  # fmt: skip
    )
    # the two members share the scripted replies: four turns between them, each episode submitted
    assert sum(len(e.turns) for e in played) == 4 and {e.stop_reason for e in played} == {"terminated"}
    assert len({e.group_id for e in played}) == 1
    assert sorted(client.closed) == ["s0", "s1"]


def test_a_subprocess_harness_acts_through_the_endpoint() -> None:
    script = (
        "import json, os, urllib.request\n"
        "from openai import OpenAI\n"
        "url, key = os.environ['AGENTRL_HARNESS_URL'], os.environ['OPENAI_API_KEY']\n"
        "def agentrl(path, body=None):\n"
        "    data = None if body is None else json.dumps(body).encode()\n"
        "    request = urllib.request.Request(url + path, data, {'Authorization': 'Bearer ' + key,"
        " 'Content-Type': 'application/json'})\n"
        "    return json.load(urllib.request.urlopen(request))\n"
        "session = agentrl('/agentrl/session')\n"
        "client = OpenAI(max_retries=0)\n"
        "messages = [{'role': 'user', 'content': session['observation']}]\n"
        "while True:\n"
        "    message = client.chat.completions.create(model=os.environ['AGENTRL_MODEL'], messages=messages,"
        " tools=session['tools']).choices[0].message\n"
        "    messages.append(message.model_dump(exclude_none=True))\n"
        "    for call in message.tool_calls:\n"
        "        result = agentrl('/agentrl/step', {'tool_calls': [call.model_dump()]})\n"
        "        if result['terminated']:\n"
        "            raise SystemExit(0)\n"
        "        messages.append({'role': 'tool', 'tool_call_id': call.id,"
        " 'content': result['observation']})\n"
    )
    config = RolloutConfig(max_turns=8, harness=HarnessConfig(command=(sys.executable, "-c", script)))
    engine = ScriptedEngine(WINNING)
    episode = asyncio.run(run_harness_episode(CounterClient(), engine, "e", TASK, 7, "g1", SAMPLING, config))
    assert episode.stop_reason == "terminated" and episode.success, episode.error
    assert sequence(episode.turns) == engine.prompts[-1] + list(episode.turns[-1].completion_ids)

    failing = RolloutConfig(harness=HarnessConfig(command=(sys.executable, "-c", "raise SystemExit('boom')")))
    failed = asyncio.run(run_harness_episode(CounterClient(), engine, "e", TASK, 7, "g1", SAMPLING, failing))
    assert failed.stop_reason == "infra_error" and "boom" in str(failed.error)


def test_stop_reasons_finish_tool_and_failures() -> None:
    def one_call(ctx: HarnessContext) -> None:
        OpenAI(base_url=ctx.base_url, api_key=ctx.api_key, max_retries=0).chat.completions.create(
            model=ctx.model,
            messages=[{"role": "user", "content": ctx.observation}],
            tools=ctx.tools,  # type: ignore[arg-type]
        )

    stopped = play(ScriptedEngine(["Thinking."]), one_call)
    assert stopped.stop_reason == "stopped" and len(stopped.turns) == 1 and stopped.reward == 0.0
    # with a finish tool the runner submits for the harness; the grade lands on the last turn
    config = RolloutConfig(harness=HarnessConfig(finish_tool="submit"))
    client = CounterClient()
    engine = ScriptedEngine(["Thinking."])
    graded = asyncio.run(
        run_harness_episode(client, engine, "e", TASK, 7, "g", SAMPLING, config, harness=one_call)
    )
    assert graded.stop_reason == "terminated" and graded.turns[-1].observation == "done"

    # over the call budget: the harness fails on the endpoint's refusal, and the episode stops with the budget
    over = play(ScriptedEngine([call("add", n=1)] * 5), openai_loop, max_turns=2)
    assert over.stop_reason == "max_turns" and len(over.turns) == 2 and over.error is None
    # a harness that raises is a failed episode (never trained on)
    crashed = play(ScriptedEngine([]), lambda ctx: 1 / 0)
    assert crashed.stop_reason == "infra_error" and "ZeroDivisionError" in str(crashed.error)
    # an infrastructure failure of the env under the harness
    broken = asyncio.run(
        run_harness_episode(
            CounterClient(fail_steps=True),
            ScriptedEngine(WINNING),
            "e",
            TASK,
            7,
            "g",
            SAMPLING,
            RolloutConfig(),
            harness=openai_loop,
        )  # fmt: skip
    )
    assert broken.stop_reason == "infra_error" and "vanished" in str(broken.error)


# ---- the endpoint's bounds and errors -----------------------------------------------------------------


async def recorder(engine: ScriptedEngine, rollout: RolloutConfig, harness: HarnessConfig) -> EpisodeRecorder:
    client = CounterClient()
    start = await client.create_session("e", TASK, 0)
    return EpisodeRecorder(engine, chat_format(TOKENIZER), client, start, TASK, SAMPLING, rollout, harness)


def with_endpoint(
    test: Any, rollout: RolloutConfig | None = None, harness: HarnessConfig | None = None
) -> None:
    async def main() -> None:
        settings = harness or HarnessConfig()
        async with ChatEndpoint(settings) as endpoint:
            a = await recorder(ScriptedEngine(["A says hi."] * 4), rollout or RolloutConfig(), settings)
            b = await recorder(ScriptedEngine(["B says hi."] * 4), rollout or RolloutConfig(), settings)
            keys = endpoint.register(a), endpoint.register(b)
            async with httpx.AsyncClient(base_url=endpoint.url, trust_env=False) as http:
                await test(endpoint, http, keys, (a, b))

    asyncio.run(main())


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


CHAT = {"model": "agentrl", "messages": [{"role": "user", "content": "hello"}]}


def assert_openai_error(response: httpx.Response, status: int, kind: str, code: str | None) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["type"], error["code"]) == (kind, code) and error["message"]


def test_keys_bind_requests_to_their_own_episode() -> None:
    async def test(endpoint: ChatEndpoint, http: httpx.AsyncClient, keys: Any, recorders: Any) -> None:
        assert endpoint.url.startswith("http://127.0.0.1:")
        a, b = recorders
        answer = await http.post("/v1/chat/completions", json=CHAT, headers=auth(keys[0]))
        assert answer.json()["choices"][0]["message"]["content"] == "A says hi."
        assert [len(a.calls), len(b.calls)] == [1, 0]
        own = (await http.get("/agentrl/record", headers=auth(keys[1]))).json()
        assert own["calls"] == []  # b's key sees b's record only
        for headers in [{}, auth("ep-guessed"), {"authorization": keys[0]}]:
            assert_openai_error(
                await http.post("/v1/chat/completions", json=CHAT, headers=headers),
                401,
                "invalid_request_error",
                "invalid_api_key",
            )
            assert_openai_error(
                await http.get("/agentrl/record", headers=headers),
                401,
                "invalid_request_error",
                "invalid_api_key",
            )
        models = (await http.get("/v1/models", headers=auth(keys[0]))).json()
        assert [m["id"] for m in models["data"]] == ["agentrl"]
        endpoint.unregister(keys[0])  # the episode is over: its key is dead
        assert (await http.post("/v1/chat/completions", json=CHAT, headers=auth(keys[0]))).status_code == 401

    with_endpoint(test)


def test_bad_requests_get_openai_errors() -> None:
    async def test(endpoint: ChatEndpoint, http: httpx.AsyncClient, keys: Any, recorders: Any) -> None:
        headers = auth(keys[0])
        post = http.post
        assert_openai_error(
            await post("/v1/chat/completions", content=b"{nope", headers=headers),
            400,
            "invalid_request_error",
            None,
        )
        assert_openai_error(
            await post("/v1/chat/completions", json={"messages": []}, headers=headers),
            400,
            "invalid_request_error",
            None,
        )
        assert_openai_error(
            await post("/v1/chat/completions", json={**CHAT, "stream": True}, headers=headers),
            400,
            "invalid_request_error",
            "unsupported_parameter",
        )
        big = {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
        assert_openai_error(
            await post("/v1/chat/completions", json=big, headers=headers),
            413,
            "invalid_request_error",
            "request_too_large",
        )
        assert_openai_error(await http.get("/v1/nothing", headers=headers), 404, "not_found_error", None)
        assert_openai_error(
            await post("/agentrl/step", json={"tool_calls": [{"name": 3}]}, headers=headers),
            400,
            "invalid_request_error",
            None,
        )
        assert recorders[0].calls == []

    with_endpoint(test, harness=HarnessConfig(max_request_bytes=4096))


def test_a_step_after_the_episode_closed_is_its_409_not_an_env_error() -> None:
    async def test(endpoint: ChatEndpoint, http: httpx.AsyncClient, keys: Any, recorders: Any) -> None:
        recorders[0].closed = True  # the harness's time is up: the recorder refuses with EpisodeClosed
        step = {"tool_calls": [{"name": "increment", "arguments": {}}]}
        response = await http.post("/agentrl/step", json=step, headers=auth(keys[0]))
        assert_openai_error(response, 409, "invalid_request_error", "episode_over")
        assert recorders[0].steps == []

    with_endpoint(test)


def test_rate_call_budget_and_context_are_bounded() -> None:
    async def test(endpoint: ChatEndpoint, http: httpx.AsyncClient, keys: Any, recorders: Any) -> None:
        first = await http.post("/v1/chat/completions", json=CHAT, headers=auth(keys[0]))
        assert first.status_code == 200
        limited = await http.post("/v1/chat/completions", json=CHAT, headers=auth(keys[0]))
        assert_openai_error(limited, 429, "rate_limit_error", "rate_limit_exceeded")
        assert limited.headers["retry-after"] == "1"
        await asyncio.sleep(1.05)
        assert (await http.post("/v1/chat/completions", json=CHAT, headers=auth(keys[0]))).status_code == 200
        await asyncio.sleep(1.05)
        spent = await http.post("/v1/chat/completions", json=CHAT, headers=auth(keys[0]))
        assert_openai_error(spent, 400, "invalid_request_error", "call_budget_exhausted")
        assert recorders[0].stop_reason() == "max_turns"
        long = {**CHAT, "max_tokens": 200}
        assert_openai_error(
            await http.post("/v1/chat/completions", json=long, headers=auth(keys[1])),
            400,
            "invalid_request_error",
            "context_length_exceeded",
        )
        assert recorders[1].stop_reason() == "max_tokens" and recorders[1].calls == []

    with_endpoint(
        test, RolloutConfig(max_turns=2, max_context_tokens=150), HarnessConfig(rate_per_s=1, rate_burst=1)
    )


def test_logprobs_and_usage_in_the_response() -> None:
    async def test(endpoint: ChatEndpoint, http: httpx.AsyncClient, keys: Any, recorders: Any) -> None:
        body = (
            await http.post("/v1/chat/completions", json={**CHAT, "logprobs": True}, headers=auth(keys[0]))
        ).json()
        call = recorders[0].calls[0]
        content = body["choices"][0]["logprobs"]["content"]
        assert [entry["logprob"] for entry in content] == list(call.completion.logprobs)
        assert body["usage"]["prompt_tokens"] == len(call.prompt_ids) == len(recorders[0].engine.prompts[0])
        assert body["usage"]["completion_tokens"] == len(call.completion.token_ids)
        assert body["agentrl"] == {
            "call": 0,
            "segment": 0,
            "continued": False,
            "appended_prompt_tokens": len(call.prompt_ids),
        }

    with_endpoint(test)


# ---- mini-swe-agent through the endpoint (its own agent loop and model client; a fake bash env) ---------


@dataclass
class BashClient(CounterClient):
    """An in-memory stand-in for the SWE-bench env: `bash` echoes like a shell, `submit` grades (reward 1)."""

    commands: list[str] = field(default_factory=list)

    async def create_session(self, env_id: str, task: Mapping[str, Any], seed: int) -> Start:
        tools = [
            tool_spec("bash", "Run a command.", {"command": {"type": "string"}}),
            tool_spec("submit", "Grade.", {}),
        ]
        observation = "<issue>\nfix add()\n</issue>\nThe repository is in /work (your working directory); ..."
        return Start(f"s{len(self.closed)}", observation, {"state_key": "w0"}, tools, [])

    async def step(self, session_id: str, action: Action) -> StepResult:
        tool = action.tool_calls[0]
        if tool.name == "submit":
            return StepResult("Submitted; graded.", 1.0, True, False, {"success": True, "state_key": "w1"})
        command = str(tool.arguments["command"])
        self.commands.append(command)
        output = (
            command.removeprefix("echo ").replace(" && ", "\n") + "\n"
            if command.startswith("echo ")
            else "calc.py\n"
        )
        return StepResult(
            f"<returncode>0</returncode>\n<output>\n{output}</output>", 0.0, False, False, {"state_key": "w0"}
        )


def test_mini_swe_agent_plays_through_the_endpoint_and_submits() -> None:
    pytest.importorskip("minisweagent")
    from agentrl.harness.minisweagent import parse_observation, run

    observation = "<returncode>2</returncode>\n<warning>timed out</warning>\n<output>\nx\n</output>"
    assert parse_observation(observation) == {"output": "x\n", "returncode": 2, "exception_info": "timed out"}
    replies = [
        "Let me look around.\n" + call("bash", command="ls"),
        "Done.\n" + call("bash", command="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
    ]
    engine = ScriptedEngine(replies)
    client = BashClient()
    config = RolloutConfig(
        max_turns=6, max_context_tokens=32_768, harness=HarnessConfig(finish_tool="submit")
    )
    episode = asyncio.run(
        run_harness_episode(
            client,
            engine,
            "swe",
            {"id": "t", "problem_statement": "fix add()"},
            0,
            "g",
            SAMPLING,
            config,
            harness=run,
        )
    )
    assert client.commands == ["ls", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    assert episode.stop_reason == "terminated" and episode.success and episode.reward == 1.0, episode.error
    assert [turn.segment for turn in episode.turns] == [0, 0]  # mini-swe-agent only appends to its history
    assert "fix add()" in str(TOKENIZER.decode(episode.turns[0].prompt_ids))
    assert "/work" in str(TOKENIZER.decode(episode.turns[0].prompt_ids)) and "/testbed" not in str(
        TOKENIZER.decode(episode.turns[0].prompt_ids)
    )
    assert sequence(episode.turns) == engine.prompts[-1] + list(episode.turns[-1].completion_ids)

    # a model that never calls a tool: mini-swe-agent stops after its format errors, the runner submits
    engine = ScriptedEngine(["I am not sure."] * 6)
    quitter = asyncio.run(
        run_harness_episode(BashClient(), engine, "swe", {"id": "t"}, 0, "g", SAMPLING, config, harness=run)
    )
    assert quitter.stop_reason == "terminated" and len(quitter.turns) == 3 and quitter.error is None
    assert quitter.turns[-1].observation == "Submitted; graded."


def test_the_harness_is_configured_with_dotted_overrides() -> None:
    from agentrl.config import load_config, to_dict
    from agentrl.errors import ConfigError
    from agentrl.harness.runner import CommandHarness, load_harness

    config = load_config(
        "calc",
        ["rollout.harness.target=test_harness_runner:openai_loop", "rollout.harness.finish_tool=submit"],
    )
    assert config.rollout.harness.enabled and config.rollout.harness.finish_tool == "submit"
    assert load_harness(config.rollout.harness) is openai_loop
    assert to_dict(config)["rollout"]["harness"]["target"] == "test_harness_runner:openai_loop"
    command = load_config("calc", ["rollout.harness.command=[python, -m, my_agent]"]).rollout.harness
    assert load_harness(command) == CommandHarness(("python", "-m", "my_agent"))
    assert not load_config("calc").rollout.harness.enabled
    for bad in ["rollout.harness.target=no_colon", "rollout.harness.timeout_s=0"]:
        with pytest.raises(ConfigError):
            load_config("calc", [bad])
    with pytest.raises(ConfigError, match="cannot be loaded"):
        load_harness(HarnessConfig(target="no_such_module_here:play"))


def test_concurrent_calls_of_one_episode_are_bounded() -> None:
    class Held(ScriptedEngine):
        async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
            await self.release.wait()
            return await super().generate(prompt_ids, params)

    async def main() -> None:
        settings = HarnessConfig(max_concurrent=1)
        engine = Held(["one", "two"])
        engine.release = asyncio.Event()  # type: ignore[attr-defined]
        async with ChatEndpoint(settings) as endpoint:
            held = await recorder(engine, RolloutConfig(), settings)
            key = endpoint.register(held)
            async with httpx.AsyncClient(base_url=endpoint.url, trust_env=False) as http:
                first = asyncio.create_task(http.post("/v1/chat/completions", json=CHAT, headers=auth(key)))
                while held._in_flight == 0:  # the first call is being sampled
                    await asyncio.sleep(0.01)
                second = await http.post("/v1/chat/completions", json=CHAT, headers=auth(key))
                assert_openai_error(second, 429, "rate_limit_error", "rate_limit_exceeded")
                engine.release.set()  # type: ignore[attr-defined]
                assert (await first).status_code == 200 and len(held.calls) == 1

    asyncio.run(main())


def test_the_built_in_player_refuses_a_harness_config_instead_of_ignoring_it() -> None:
    config = RolloutConfig(harness=HarnessConfig(target="test_harness_runner:openai_loop"))
    with pytest.raises(ConfigError, match="choose_player"):
        asyncio.run(
            collect_rollouts(
                CounterClient(),
                ScriptedEngine(WINNING),
                "test/Counter-v0",
                [TASK],
                1,
                SAMPLING,
                config,
                seed=0,
                progress=False,
            )  # fmt: skip
        )
    assert choose_player(RolloutConfig()) is run_episode

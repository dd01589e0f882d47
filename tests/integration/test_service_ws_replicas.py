"""The WebSocket wire between processes: two real env service replicas (EmbeddedService, uvicorn on loopback
ports, a bearer token) behind one `EnvClient(transport="ws")`. One replica is stopped mid-run: the sessions
on its socket fail as infrastructure failures, new sessions fail over to the survivor, and the runner's
episode loop records the lost episode as `infra_error`, never as a reward."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
from fixtures_envs import GUESS_NUMBER_ID
from sandbox_leaks import assert_none_left, sandboxes_of_processes
from tiny_tokenizers import byte_tokenizer

from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.parsing import format_tool_call
from agentrl.agent.rollout import run_episode
from agentrl.agent.rollout_config import RolloutConfig
from agentrl.client import ClientConfig, EnvClient
from agentrl.errors import INFRA_ERRORS, ServiceUnavailable
from agentrl.service.embedded import EmbeddedService
from agentrl.types import Action, Episode, ToolCall

CONFIG = ClientConfig(transport="ws", retries=1, backoff_s=0.01)


def _guess(number: int) -> Action:
    return Action(text="", tool_calls=(ToolCall(name="guess", arguments={"number": number}),))


def _live_sessions(service: EmbeddedService) -> int:
    sessions: int = httpx.get(f"{service.url}/healthz", trust_env=False).json()["sessions"]
    return sessions


async def _run(a: EmbeddedService, b: EmbeddedService) -> None:
    async with EnvClient([a.url, b.url], config=CONFIG) as client:  # token from the environment
        on_a = [await client.create_session(GUESS_NUMBER_ID, {"target": 3}, seed=0) for _ in range(2)]
        on_b = [await client.create_session(GUESS_NUMBER_ID, {"target": 3}, seed=0) for _ in range(2)]
        on_a, on_b = [on_a[0], on_b[0]], [on_a[1], on_b[1]]  # round robin: a, b, a, b
        assert (_live_sessions(a), _live_sessions(b)) == (2, 2)
        steps = await asyncio.gather(*(client.step(s.session_id, _guess(2)) for s in on_a + on_b))
        assert [step.observation for step in steps] == ["higher"] * 4

        a.stop()  # replica a dies mid-episode, with two sessions on its socket
        for start in on_a:
            with pytest.raises(ServiceUnavailable) as caught:
                await client.step(start.session_id, _guess(3))
            assert isinstance(caught.value, INFRA_ERRORS)  # the runner records stop_reason="infra_error"
            with contextlib.suppress(*INFRA_ERRORS):  # as the runner does
                await client.close_session(start.session_id)

        replacements = [await client.create_session(GUESS_NUMBER_ID, {"target": 3}, seed=0) for _ in range(3)]
        assert _live_sessions(b) == 5  # every new session failed over to b
        for start in replacements + on_b:
            assert (await client.step(start.session_id, _guess(3))).reward == 1.0
            await client.close_session(start.session_id)
        assert _live_sessions(b) == 0


def test_a_stopped_replica_fails_its_socket_sessions_and_new_ones_fail_over(
    tmp_path: Path, token_replicas: tuple[EmbeddedService, EmbeddedService]
) -> None:
    asyncio.run(_run(*token_replicas))
    assert "/v1/ws" in (tmp_path / "b.log").read_text()


class StoppingEngine:
    """Guesses 2, 4, 3, ...; stops the service right before its second guess is stepped."""

    def __init__(self, service: EmbeddedService) -> None:
        self.tokenizer = byte_tokenizer(pad=False)
        self.service = service
        self.calls = 0

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        self.calls += 1
        if self.calls == 2:
            self.service.stop()
        text = format_tool_call(ToolCall("guess", {"number": (2, 4, 3)[self.calls - 1]}))
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        ids = (*self.tokenizer.encode(text, add_special_tokens=False), end)
        return Completion(ids, tuple(-0.5 for _ in ids), text, "stop", True)


def test_the_runner_records_a_lost_socket_as_an_infra_error(tmp_path: Path) -> None:
    async def play(service: EmbeddedService) -> Episode:
        async with EnvClient(service.url, config=CONFIG) as client:
            return await run_episode(
                client,
                StoppingEngine(service),
                GUESS_NUMBER_ID,
                {"id": "t", "target": 3},
                0,
                "g",
                SamplingParams(max_new_tokens=32),
                RolloutConfig(max_turns=4, max_context_tokens=100_000),
            )

    with EmbeddedService(tmp_path / "service.log", preload=["fixtures_envs"]) as service:
        pid = service.pid
        episode = asyncio.run(play(service))
    assert_none_left(sandboxes_of_processes([pid]), "the service")
    assert episode.stop_reason == "infra_error" and episode.is_infra_failure
    assert len(episode.turns) == 1 and episode.turns[0].observation == "higher"
    assert episode.error is not None and "was lost" in episode.error

"""Two real env service replicas (EmbeddedService, uvicorn on loopback ports) behind one EnvClient, with a
bearer token: one replica is stopped mid-run; its session's next step is an infrastructure failure and new
sessions fail over to the survivor; the runner re-plays such an episode there."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import httpx
import pytest
from fixtures_envs import GUESS_NUMBER_ID
from service_harness import GuessingEngine

from agentrl.agent.engines.base import SamplingParams
from agentrl.agent.rollout import play_member
from agentrl.agent.rollout_config import RolloutConfig
from agentrl.client import ClientConfig, EnvClient
from agentrl.errors import INFRA_ERRORS, ServiceUnavailable
from agentrl.service.embedded import EmbeddedService
from agentrl.types import Action, ToolCall

TOKEN = "integration-token"


def _guess(number: int) -> Action:
    return Action(text="", tool_calls=(ToolCall(name="guess", arguments={"number": number}),))


async def _run(a: EmbeddedService, b: EmbeddedService) -> None:
    config = ClientConfig(retries=1, backoff_s=0.01)
    async with EnvClient([a.url, b.url], config=config) as client:  # token from the environment
        anonymous = httpx.get(f"{a.url}/v1/envs", headers={"authorization": ""}, trust_env=False)
        assert anonymous.status_code == 401
        on_a = await client.create_session(GUESS_NUMBER_ID, {"target": 3}, seed=0)
        on_b = await client.create_session(GUESS_NUMBER_ID, {"target": 3}, seed=0)
        assert (await client.step(on_a.session_id, _guess(2))).observation == "higher"
        assert (await client.step(on_b.session_id, _guess(2))).observation == "higher"

        a.stop()  # replica a dies mid-episode
        with pytest.raises(ServiceUnavailable, match=f"127.0.0.1:{a.port} unreachable") as caught:
            await client.step(on_a.session_id, _guess(3))
        assert isinstance(caught.value, INFRA_ERRORS)  # the runner records stop_reason="infra_error"
        with contextlib.suppress(*INFRA_ERRORS):  # as the runner does
            await client.close_session(on_a.session_id)

        replacement = await client.create_session(GUESS_NUMBER_ID, {"target": 3}, seed=0)
        assert (await client.step(replacement.session_id, _guess(3))).reward == 1.0
        assert (await client.step(on_b.session_id, _guess(3))).reward == 1.0
        health = httpx.get(f"{b.url}/healthz", trust_env=False).json()
        assert health["sessions"] == 2
        metrics = httpx.get(
            f"{b.url}/metrics", headers={"authorization": f"Bearer {TOKEN}"}, trust_env=False
        ).text
        assert "agentrl_service_sessions_created_total 2" in metrics
        assert "agentrl_service_step_seconds_count 3" in metrics


def test_a_stopped_replica_fails_its_episode_and_sessions_fail_over(
    tmp_path: Path, token_replicas: tuple[EmbeddedService, EmbeddedService]
) -> None:
    asyncio.run(_run(*token_replicas))
    assert " 401 " in (tmp_path / "a.log").read_text()


@pytest.mark.parametrize("wire", ["http", "ws"])
def test_an_episode_whose_replica_dies_is_re_played_on_the_survivor(
    wire: str, tmp_path: Path, token_replicas: tuple[EmbeddedService, EmbeddedService]
) -> None:
    a, b = token_replicas
    stopped: list[int] = []

    def stop_a_once() -> None:  # after the first session was created on a, before its first step
        if not stopped:
            stopped.append(a.port)
            a.stop()

    engine = GuessingEngine(3, before_generate=stop_a_once)
    rollout = RolloutConfig(max_turns=2, infra_attempts=3)

    async def main() -> None:
        config = ClientConfig(retries=1, backoff_s=0.01, transport=wire)  # type: ignore[arg-type]
        async with EnvClient([a.url, b.url], config=config) as client:  # token from the environment
            episode = await play_member(
                client,
                lambda: engine,
                GUESS_NUMBER_ID,
                {"target": 3},
                0,
                "g",
                SamplingParams(16),
                rollout,
                (0,),
            )
        assert stopped and episode.attempts == 2  # the first play hit the dead replica: re-played once
        assert episode.stop_reason == "terminated" and episode.reward == 1.0

    asyncio.run(main())
    metrics = httpx.get(
        f"{b.url}/metrics", headers={"authorization": f"Bearer {TOKEN}"}, trust_env=False
    ).text
    assert "agentrl_service_sessions_created_total 1" in metrics  # the re-play ran on b

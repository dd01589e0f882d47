"""A real uvicorn server (EmbeddedService, a child process on a loopback port) serving the test env."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fixtures_envs import GUESS_NUMBER_ID

from agentrl.client import EnvClient
from agentrl.errors import ServiceUnavailable
from agentrl.service.embedded import EmbeddedService
from agentrl.types import Action, ToolCall


async def _play(url: str) -> list[str]:
    async with EnvClient(url) as client:
        assert await client.health()
        start = await client.create_session(GUESS_NUMBER_ID, {"target": 3}, seed=0)
        observations = [start.observation]
        for number in (2, 4, 3):
            action = Action(text="", tool_calls=(ToolCall(name="guess", arguments={"number": number}),))
            result = await client.step(start.session_id, action)
            observations.append(result.observation)
        assert result.terminated and result.reward == 1.0
        await client.close_session(start.session_id)
        return observations


def test_embedded_service_serves_a_whole_episode(tmp_path: Path) -> None:
    log_path = tmp_path / "service.log"
    with EmbeddedService(
        log_path, preload=["fixtures_envs"], env_kwargs={GUESS_NUMBER_ID: {"high": 5}}
    ) as service:
        assert service.url.startswith("http://127.0.0.1:")
        observations = asyncio.run(_play(service.url))
        url = service.url
    assert observations == ["Guess a number between 1 and 5.", "higher", "lower", "correct"]
    assert "/v1/sessions" in log_path.read_text()
    assert not asyncio.run(EnvClient(url).health())


def test_a_service_that_dies_at_startup_reports_its_log(tmp_path: Path) -> None:
    with pytest.raises(
        ServiceUnavailable, match="(?s)exited with code 2.*preloading 'agentrl_no_such_module' failed"
    ):
        with EmbeddedService(tmp_path / "service.log", preload=["agentrl_no_such_module"]):
            pass


def test_a_stopped_service_is_an_infrastructure_failure(tmp_path: Path) -> None:
    async def step_after_stop(service: EmbeddedService) -> None:
        async with EnvClient(service.url) as client:
            start = await client.create_session(GUESS_NUMBER_ID, {}, seed=0)
            service.stop()
            with pytest.raises(ServiceUnavailable, match="unreachable"):
                await client.step(start.session_id, Action(text=""))

    with EmbeddedService(tmp_path / "service.log", preload=["fixtures_envs"]) as service:
        asyncio.run(step_after_stop(service))


def test_embedded_service_exits_when_its_parent_is_killed(tmp_path: Path) -> None:
    """A trainer killed with SIGKILL cannot stop its service; the service notices and exits by itself."""
    import signal
    import subprocess
    import sys
    import time

    from agentrl.service.embedded import _answers

    script = (
        "import sys, time\n"
        "from agentrl.service.embedded import EmbeddedService\n"
        f"service = EmbeddedService({str(tmp_path / 'service.log')!r})\n"
        "service.start()\n"
        "print(service.url, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        url = parent.stdout.readline().strip() + "/healthz"
        assert url.startswith("http://127.0.0.1:") and _answers(url)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 15
        while _answers(url) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _answers(url), "the orphaned service is still answering"
    finally:
        parent.kill()

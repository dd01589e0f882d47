"""The env service app in-process (httpx.ASGITransport) driven by the real EnvClient; its error mapping."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fixtures_envs import GUESS_NUMBER_ID, LOST_SANDBOX_ID

from agentrl.client import EnvClient
from agentrl.errors import (
    ConfigError,
    EnvNotFound,
    EpisodeOver,
    InvalidTask,
    ServiceUnavailable,
    SessionNotFound,
)
from agentrl.service import ServiceSettings, create_app
from agentrl.service.server import parse_settings
from agentrl.service.sessions import SessionManager
from agentrl.types import Action, ToolCall

BASE_URL = "http://env-service.test"


def _guess(number: int) -> Action:
    return Action(text="", tool_calls=(ToolCall(name="guess", arguments={"number": number}),))


@contextlib.asynccontextmanager
async def _served(settings: ServiceSettings) -> AsyncIterator[tuple[FastAPI, EnvClient]]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        async with EnvClient(BASE_URL, transport=httpx.ASGITransport(app=app)) as client:
            yield app, client


def _run(
    test: Callable[[FastAPI, EnvClient], Awaitable[None]], settings: ServiceSettings | None = None
) -> None:
    async def main() -> None:
        async with _served(settings or ServiceSettings()) as (app, client):
            await test(app, client)

    asyncio.run(main())


async def _binary_search(client: EnvClient, session_id: str, high: int) -> list[Any]:
    low, results = 1, []
    while True:
        guess = (low + high) // 2
        result = await client.step(session_id, _guess(guess))
        results.append(result)
        if result.terminated or result.truncated:
            return results
        low, high = (guess + 1, high) if result.observation == "higher" else (low, guess - 1)


def test_a_whole_episode_through_the_client() -> None:
    async def test(app: FastAPI, client: EnvClient) -> None:
        assert await client.health()
        start = await client.create_session(GUESS_NUMBER_ID, {"target": 37}, seed=0)
        assert start.observation == "Guess a number between 1 and 100."
        assert start.info["state_key"] == "1-100"
        assert [spec["function"]["name"] for spec in start.tools] == ["guess"]
        assert start.examples[0]["role"] == "user"
        results = await _binary_search(client, start.session_id, 100)
        assert results[-1].observation == "correct" and results[-1].reward == 1.0
        assert [r.info["state_key"] for r in results[:2]] == ["1-49", "26-49"]
        with pytest.raises(EpisodeOver, match="409"):
            await client.step(start.session_id, _guess(1))
        await client.close_session(start.session_id)
        await client.close_session(start.session_id)  # already gone: fine
        with pytest.raises(SessionNotFound):
            await client.step(start.session_id, _guess(1))

    _run(test)


def test_env_kwargs_from_settings_reach_the_constructor() -> None:
    async def test(app: FastAPI, client: EnvClient) -> None:
        start = await client.create_session(GUESS_NUMBER_ID, {}, seed=3)
        assert start.observation == "Guess a number between 1 and 10."

    _run(test, ServiceSettings(env_kwargs={GUESS_NUMBER_ID: {"high": 10}}))


def test_list_envs_shows_the_test_envs_with_tools() -> None:
    async def test(app: FastAPI, client: EnvClient) -> None:
        envs = {env["id"]: env for env in await client.list_envs()}
        assert envs[GUESS_NUMBER_ID]["tools"][0]["function"]["name"] == "guess"

    _run(test)


def test_errors_map_to_the_client_exceptions() -> None:
    async def test(app: FastAPI, client: EnvClient) -> None:
        with pytest.raises(EnvNotFound, match="Did you mean 'test/GuessNumber-v0'"):
            await client.create_session("test/GuessNumbr-v0", {}, seed=0)
        with pytest.raises(InvalidTask, match="422.*target must be an integer"):
            await client.create_session(GUESS_NUMBER_ID, {"target": "seven"}, seed=0)
        with pytest.raises(SessionNotFound, match="create a new session"):
            await client.step("no-such-session", _guess(1))
        lost = await client.create_session(LOST_SANDBOX_ID, {}, seed=0)
        with pytest.raises(ServiceUnavailable, match="503.*SandboxLost.*exited unexpectedly"):
            await client.step(lost.session_id, _guess(1))

    _run(test)


def test_a_full_service_answers_429_with_retry_after() -> None:
    async def test(app: FastAPI, client: EnvClient) -> None:
        await client.create_session(GUESS_NUMBER_ID, {}, seed=0)
        body = {"env_id": GUESS_NUMBER_ID, "task": {}, "seed": 1}
        response = await client._http.post("/v1/sessions", json=body)
        assert response.status_code == 429
        assert response.headers["retry-after"] == "7"
        assert response.json()["error"]["type"] == "SessionLimitReached"
        with pytest.raises(ServiceUnavailable, match="429"):
            await client.create_session(GUESS_NUMBER_ID, {}, seed=2)

    _run(test, ServiceSettings(max_sessions=1, retry_after_s=7))


@pytest.mark.parametrize(
    ("method", "path", "content", "status", "error_type", "words"),
    [
        (
            "POST",
            "/v1/sessions",
            '{"env_id": "x", "task": {}, "seed": 0, "sede": 1}',
            422,
            "InvalidRequest",
            "sede",
        ),
        ("POST", "/v1/sessions", '{"env_id": "x", "task": {', 422, "InvalidRequest", "JSON"),
        ("POST", "/v1/sessions", '{"env_id": "x", "task": {}}', 422, "InvalidRequest", "seed"),
        ("POST", "/v1/sessions/abc/step", '{"action": {"txt": ""}}', 422, "InvalidRequest", "text"),
        ("POST", "/v1/sessions/abc/step", '{"action": {"text": ""}}', 404, "SessionNotFound", "abc"),
        ("DELETE", "/v1/sessions/abc", None, 404, "SessionNotFound", "abc"),
        ("GET", "/v1/nothing", None, 404, "HTTPError", "Not Found"),
        ("GET", "/v1/sessions", None, 405, "HTTPError", "Method Not Allowed"),
    ],
)
def test_bad_requests_get_a_clear_4xx(
    method: str, path: str, content: str | None, status: int, error_type: str, words: str
) -> None:
    async def test(app: FastAPI, client: EnvClient) -> None:
        headers = {"content-type": "application/json"}
        response = await client._http.request(method, path, content=content, headers=headers)
        assert response.status_code == status
        error = response.json()["error"]
        assert error["type"] == error_type
        assert words in error["message"]

    _run(test)


def test_idle_sessions_expire_and_shutdown_closes_the_rest() -> None:
    async def main() -> None:
        settings = ServiceSettings(idle_timeout_s=0.05, reap_interval_s=0.02)
        async with _served(settings) as (app, client):
            manager: SessionManager = app.state.sessions
            start = await client.create_session(GUESS_NUMBER_ID, {}, seed=0)
            assert len(manager) == 1
            await asyncio.sleep(0.2)
            assert len(manager) == 0
            with pytest.raises(SessionNotFound, match="expired"):
                await client.step(start.session_id, _guess(1))
            await client.create_session(GUESS_NUMBER_ID, {}, seed=0)
        assert len(manager) == 0

    asyncio.run(main())


def test_parse_settings_refuses_a_non_loopback_host() -> None:
    with pytest.raises(ConfigError, match="loopback"):
        parse_settings(["--host", "0.0.0.0"])
    settings = parse_settings(
        ["--port", "9000", "--preload", "a", "--preload", "b", "--env-kwargs", '{"x": {}}']
    )
    assert (settings.host, settings.port, settings.preload, settings.env_kwargs) == (
        "127.0.0.1",
        9000,
        ("a", "b"),
        {"x": {}},
    )

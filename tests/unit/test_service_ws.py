"""The WebSocket wire (/v1/ws) against a real uvicorn server on a loopback port (in a thread of this process,
so the tests can look at the service's sessions): create/step/close, the same errors as HTTP, many sessions
over one socket, sessions closed with their socket, and the frame protocol itself."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fixtures_envs import GUESS_NUMBER_ID, LOST_SANDBOX_ID
from service_harness import serving
from websockets.asyncio.client import connect

from agentrl.client import ClientConfig, EnvClient, error_for, ws_url
from agentrl.errors import (
    AuthError,
    EnvNotFound,
    EpisodeOver,
    InvalidTask,
    ServiceUnavailable,
    SessionNotFound,
)
from agentrl.service import ServiceSettings
from agentrl.types import Action, ToolCall
from agentrl.wire import pack_frames

WS = ClientConfig(transport="ws")
HTTP = ClientConfig(transport="http")


@pytest.fixture
def service() -> Iterator[tuple[str, FastAPI]]:
    with serving(ServiceSettings(env_kwargs={GUESS_NUMBER_ID: {"high": 5}})) as running:
        yield running


def _guess(number: int) -> Action:
    return Action(text="", tool_calls=(ToolCall(name="guess", arguments={"number": number}),))


def _wait_for(predicate: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)
    assert predicate(), "condition not reached in time"  # type: ignore[operator]


def test_a_whole_episode_over_the_socket(service: tuple[str, FastAPI]) -> None:
    url, app = service

    async def main() -> list[str]:
        async with EnvClient(url, config=WS) as client:
            start = await client.create_session(GUESS_NUMBER_ID, {"target": 3}, seed=0)
            assert start.tools[0]["function"]["name"] == "guess" and start.examples
            assert len(app.state.sessions) == 1
            observations = [start.observation]
            for number in (2, 4, 3):
                result = await client.step(start.session_id, _guess(number))
                observations.append(result.observation)
            assert result.terminated and result.reward == 1.0 and result.info["state_key"] == "3-3"
            await client.close_session(start.session_id)
            assert len(app.state.sessions) == 0
            await client.close_session(start.session_id)  # already gone: fine
            return observations

    assert asyncio.run(main()) == ["Guess a number between 1 and 5.", "higher", "lower", "correct"]


async def _error_of(url: str, config: ClientConfig, case: str) -> BaseException:
    async with EnvClient(url, config=config) as client:
        try:
            if case == "unknown env":
                await client.create_session("test/GuessNumbr-v0", {}, seed=0)
            elif case == "invalid task":
                await client.create_session(GUESS_NUMBER_ID, {"target": 99}, seed=0)
            elif case == "unknown session":
                await client.step("no-such-session", _guess(1))
            elif case == "episode over":
                start = await client.create_session(GUESS_NUMBER_ID, {"target": 1}, seed=0)
                await client.step(start.session_id, _guess(1))
                await client.step(start.session_id, _guess(1))
            elif case == "sandbox lost":
                start = await client.create_session(LOST_SANDBOX_ID, {}, seed=0)
                await client.step(start.session_id, _guess(1))
        except Exception as exc:
            return exc
    raise AssertionError(f"{case}: no error")


@pytest.mark.parametrize(
    ("case", "error", "text"),
    [
        ("unknown env", EnvNotFound, "GuessNumber-v0"),  # the "did you mean" suggestion
        ("invalid task", InvalidTask, "422 InvalidTask"),
        ("unknown session", SessionNotFound, "no session 'no-such-session'"),
        ("episode over", EpisodeOver, "409 EpisodeOver"),
        ("sandbox lost", ServiceUnavailable, "503.*SandboxLost"),
    ],
)
def test_errors_reach_the_client_as_over_http(
    service: tuple[str, FastAPI], case: str, error: type[Exception], text: str
) -> None:
    url, _ = service
    over_ws = asyncio.run(_error_of(url, WS, case))
    over_http = asyncio.run(_error_of(url, HTTP, case))
    assert type(over_ws) is type(over_http) is error
    assert re.search(text, str(over_ws)) and re.search(text, str(over_http)), (over_ws, over_http)


def test_many_sessions_share_one_socket(service: tuple[str, FastAPI]) -> None:
    url, app = service

    async def episode(client: EnvClient, target: int) -> float:
        start = await client.create_session(GUESS_NUMBER_ID, {"target": target}, seed=0)
        total = 0.0
        for number in range(1, 6):
            result = await client.step(start.session_id, _guess(number))
            total += result.reward
            if result.terminated:
                break
        await client.close_session(start.session_id)
        return total

    async def main() -> list[float]:
        async with EnvClient(url, config=WS) as client:
            rewards = await asyncio.gather(*(episode(client, 1 + i % 5) for i in range(100)))
            assert len(client._sockets) == 1
            return list(rewards)

    assert asyncio.run(main()) == [1.0] * 100
    assert len(app.state.sessions) == 0


def test_sessions_close_with_their_socket(service: tuple[str, FastAPI]) -> None:
    url, app = service

    async def main() -> None:
        client = EnvClient(url, config=WS)
        for _ in range(3):
            await client.create_session(GUESS_NUMBER_ID, {}, seed=0)
        assert len(app.state.sessions) == 3
        await client.aclose()

    asyncio.run(main())
    _wait_for(lambda: len(app.state.sessions) == 0)


def test_a_lost_socket_fails_its_sessions_and_the_next_create_reconnects(
    service: tuple[str, FastAPI],
) -> None:
    url, app = service

    async def main() -> None:
        async with EnvClient(url, config=WS) as client:
            start = await client.create_session(GUESS_NUMBER_ID, {"target": 2}, seed=0)
            socket = client._sockets[url]
            await socket.socket.close()  # the connection drops under the session
            await asyncio.sleep(0.05)
            with pytest.raises(ServiceUnavailable, match="connection .* was lost"):
                await client.step(start.session_id, _guess(2))
            await client.close_session(start.session_id)  # gone with its socket: a no-op
            replacement = await client.create_session(GUESS_NUMBER_ID, {"target": 2}, seed=0)
            assert (await client.step(replacement.session_id, _guess(2))).reward == 1.0
            assert client._sockets[url] is not socket
            await client.close_session(replacement.session_id)

    asyncio.run(main())
    _wait_for(lambda: len(app.state.sessions) == 0)


def test_a_full_service_answers_429_with_retry_after_and_is_marked_down() -> None:
    with serving(ServiceSettings(max_sessions=1, retry_after_s=30)) as (url, app):

        async def main() -> None:
            async with EnvClient(url, config=WS) as client:
                await client.create_session(GUESS_NUMBER_ID, {}, seed=0)
                with pytest.raises(ServiceUnavailable, match="429.*SessionLimitReached"):
                    await client.create_session(GUESS_NUMBER_ID, {}, seed=0)
                assert client.replicas[0].down_until > time.monotonic() + 25  # Retry-After honoured

        asyncio.run(main())
        assert app.state.metrics.errors[("SessionLimitReached", 429)] == 1


def test_the_token_is_checked_at_the_handshake() -> None:
    with serving(ServiceSettings(token="secret")) as (url, app):

        async def main() -> None:
            async with EnvClient(url, config=WS, token="wrong") as client:
                with pytest.raises(AuthError, match="401.*AGENTRL_SERVICE_TOKEN") as caught:
                    await client.create_session(GUESS_NUMBER_ID, {}, seed=0)
                assert not isinstance(caught.value, ServiceUnavailable)  # as over HTTP: not an infra failure
            async with EnvClient(url, config=WS, token="secret") as client:
                start = await client.create_session(GUESS_NUMBER_ID, {"target": 1}, seed=0)
                assert (await client.step(start.session_id, _guess(1))).reward == 1.0

        asyncio.run(main())
        assert app.state.metrics.errors[("AuthError", 401)] == 1


def test_the_frame_protocol(service: tuple[str, FastAPI]) -> None:
    url, app = service

    async def exchange(frame: str | bytes) -> list[dict]:
        async with connect(ws_url(url), compression=None) as socket:
            await socket.send(frame)
            replies: list[dict] = []
            while len(replies) < max(1, frame.count(b'"id"' if isinstance(frame, bytes) else '"id"')):
                replies += json.loads(await socket.recv())
            return sorted(replies, key=lambda reply: str(reply["id"]))

    not_json = asyncio.run(exchange("{oops"))
    assert not_json[0]["id"] is None and not_json[0]["status"] == 422
    assert asyncio.run(exchange("{}"))[0]["error"]["message"] == "invalid request: a frame is a JSON list"
    bad = asyncio.run(
        exchange(
            json.dumps(
                [
                    {"id": 1, "op": "jump"},
                    {"id": 2, "op": "step", "body": {"action": {"text": ""}}},
                    {"id": 3, "op": "create", "body": {"env_id": GUESS_NUMBER_ID, "task": {}, "seed": -1}},
                    {"id": 4, "op": "close", "session_id": "nope"},
                ]
            ).encode()  # binary frames are read too
        )
    )
    assert [(r["id"], r["status"], r["error"]["type"]) for r in bad] == [
        (1, 422, "InvalidRequest"),
        (2, 422, "InvalidRequest"),
        (3, 422, "InvalidRequest"),
        (4, 404, "SessionNotFound"),
    ]
    assert "needs a session_id" in bad[1]["error"]["message"] and "seed" in bad[2]["error"]["message"]
    padding = "x" * app.state.settings.max_body_bytes
    huge = asyncio.run(exchange(json.dumps([{"id": 5, "op": "close", "session_id": padding}])))
    assert (huge[0]["id"], huge[0]["status"], huge[0]["error"]["type"]) == (5, 413, "RequestTooLarge")


def test_pack_frames_keeps_order_and_size() -> None:
    messages = [json.dumps({"id": i, "pad": "x" * 30}) for i in range(10)]
    frames = pack_frames(messages, 110)  # 52 characters each: two per frame
    assert len(frames) == 5 and all(len(frame) <= 110 for frame in frames)
    assert [item["id"] for frame in frames for item in json.loads(frame)] == list(range(10))
    assert pack_frames(["x" * 500], 100) == ["[" + "x" * 500 + "]"] and pack_frames([], 100) == []


def test_error_for_and_ws_url() -> None:
    assert isinstance(error_for(503, "SandboxLost", "gone", "step"), ServiceUnavailable)
    assert isinstance(error_for(429, "SessionLimitReached", "full", "create"), ServiceUnavailable)
    assert type(error_for(404, "SessionNotFound", "no", "step")) is SessionNotFound
    assert type(error_for(404, "EnvNotFound", "no", "create")) is EnvNotFound
    assert "AGENTRL_SERVICE_TOKEN" in str(error_for(401, "AuthError", "no", "create"))
    assert type(error_for(401, "Unauthorized", "no", "create")) is AuthError  # an older service's name
    assert ws_url("http://127.0.0.1:8/") == "ws://127.0.0.1:8/v1/ws"
    assert ws_url("https://envs.example/base") == "wss://envs.example/base/v1/ws"

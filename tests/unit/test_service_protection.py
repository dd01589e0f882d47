"""Protection of the env service, in-process (httpx.ASGITransport): token, limits, timeouts, bad requests,
idle expiry, and the Prometheus metrics that count them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fixtures_envs import GUESS_NUMBER_ID, GuessNumberEnv

from agentrl.client import EnvClient
from agentrl.env import StepResult, register
from agentrl.errors import AuthError, ConfigError, ServiceUnavailable, SessionNotFound
from agentrl.service import ServiceSettings, create_app
from agentrl.service.metrics import Histogram, ServiceMetrics
from agentrl.service.server import parse_settings
from agentrl.types import Action, ToolCall
from agentrl.wire import TOKEN_ENV

BASE_URL = "http://env-service.test"
SLOW_ID = "test/SlowGuess-v0"
TOKEN = "s3cret-token"
CLOSED: list[str] = []  # ids of SlowGuess envs whose close() ran


class SlowGuessEnv(GuessNumberEnv):
    """GuessNumber whose steps take `delay_s`; records its close() in CLOSED."""

    def __init__(self, delay_s: float = 0.0, high: int = 100) -> None:
        super().__init__(high=high)
        self.delay_s = delay_s

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        if ((options or {}).get("task") or {}).get("explode"):
            raise RuntimeError("this task makes reset crash")
        return super().reset(seed=seed, options=options)

    def step(self, action: Action) -> StepResult:
        time.sleep(self.delay_s)
        return super().step(action)

    def close(self) -> None:
        CLOSED.append(str(id(self)))
        super().close()


register(SLOW_ID, entry_point=SlowGuessEnv)


def _guess(number: int) -> Action:
    return Action(text="", tool_calls=(ToolCall(name="guess", arguments={"number": number}),))


@contextlib.asynccontextmanager
async def _served(settings: ServiceSettings, token: str | None = None) -> AsyncIterator[tuple[FastAPI, Any]]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with EnvClient(BASE_URL, transport=transport, token=token) as client:
            yield app, client


def _create_body(env_id: str, task: dict[str, Any], seed: int) -> str:
    return json.dumps({"env_id": env_id, "task": task, "seed": seed})


def _metric(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} not in metrics:\n{text}")


# --- bearer token ---------------------------------------------------------------------------------------


def test_a_token_is_required_everywhere_but_healthz() -> None:
    async def main() -> None:
        async with _served(ServiceSettings(token=TOKEN), token="") as (app, anonymous):
            response = await anonymous._http.get("/v1/envs")
            assert response.status_code == 401
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.json()["error"]["type"] == "AuthError"
            wrong = await anonymous._http.get("/v1/envs", headers={"authorization": "Bearer nope"})
            assert wrong.status_code == 401
            assert (await anonymous._http.get("/healthz")).status_code == 200
            with pytest.raises(AuthError, match=f"401.*{TOKEN_ENV}"):
                await anonymous.create_session(GUESS_NUMBER_ID, {}, seed=0)
            metrics = await anonymous._http.get("/metrics")
            assert metrics.status_code == 401
            async with EnvClient(BASE_URL, transport=httpx.ASGITransport(app=app), token=TOKEN) as client:
                start = await client.create_session(GUESS_NUMBER_ID, {"target": 50}, seed=0)
                assert (await client.step(start.session_id, _guess(50))).reward == 1.0
                text = (await client._http.get("/metrics")).text
                assert _metric(text, 'agentrl_service_errors_total{type="AuthError",status="401"}') == 4

    asyncio.run(main())


def test_the_client_reads_the_token_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)

    async def main() -> None:
        async with _served(ServiceSettings(token=TOKEN)) as (app, client):
            assert [env for env in await client.list_envs() if env["id"] == GUESS_NUMBER_ID]

    asyncio.run(main())


def test_a_non_loopback_host_needs_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(ConfigError, match=f"without authentication.*{TOKEN_ENV}"):
        parse_settings(["--host", "0.0.0.0"])
    assert parse_settings(["--host", "::1"]).token is None
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    settings = parse_settings(["--host", "0.0.0.0", "--step-timeout", "3", "--max-body-bytes", "100"])
    assert (settings.host, settings.token, settings.step_timeout_s, settings.max_body_bytes) == (
        "0.0.0.0",
        TOKEN,
        3.0,
        100,
    )
    assert TOKEN not in repr(settings)


# --- limits ---------------------------------------------------------------------------------------------


def test_bodies_over_the_limit_get_413_with_or_without_a_length() -> None:
    async def main() -> None:
        async with _served(ServiceSettings(max_body_bytes=200)) as (app, client):
            big = _create_body(GUESS_NUMBER_ID, {"pad": "x" * 300}, 0)
            headers = {"content-type": "application/json"}
            response = await client._http.post("/v1/sessions", content=big, headers=headers)
            assert response.status_code == 413
            assert response.json()["error"]["type"] == "RequestTooLarge"
            assert "200 bytes" in response.json()["error"]["message"]

            async def chunks() -> AsyncIterator[bytes]:
                for start in range(0, len(big), 50):
                    yield big[start : start + 50].encode()

            chunked = await client._http.post("/v1/sessions", content=chunks(), headers=headers)
            assert chunked.status_code == 413
            assert chunked.json()["error"]["type"] == "RequestTooLarge"
            start = await client.create_session(GUESS_NUMBER_ID, {"pad": "x" * 50}, seed=0)
            assert start.session_id
            text = (await client._http.get("/metrics")).text
            assert _metric(text, 'agentrl_service_errors_total{type="RequestTooLarge",status="413"}') == 2

    asyncio.run(main())


def test_a_full_service_sends_retry_after_and_the_client_tries_the_next_replica() -> None:
    async def main() -> None:
        async with _served(ServiceSettings(max_sessions=1, retry_after_s=3)) as (app, client):
            await client.create_session(GUESS_NUMBER_ID, {}, seed=0)
            response = await client._http.post(
                "/v1/sessions", json={"env_id": GUESS_NUMBER_ID, "task": {}, "seed": 1}
            )
            assert (response.status_code, response.headers["retry-after"]) == (429, "3")
            with pytest.raises(ServiceUnavailable, match="429.*SessionLimitReached"):
                await client.create_session(GUESS_NUMBER_ID, {}, seed=2)

    asyncio.run(main())


def test_a_step_over_the_timeout_gets_504_and_its_session_is_closed_after() -> None:
    async def main() -> None:
        settings = ServiceSettings(step_timeout_s=0.05, env_kwargs={SLOW_ID: {"delay_s": 0.3}})
        async with _served(settings) as (app, client):
            start = await client.create_session(SLOW_ID, {"target": 5}, seed=0)
            closed_before = len(CLOSED)
            response = await client._http.post(
                f"/v1/sessions/{start.session_id}/step", json={"action": {"text": "hi"}}
            )
            assert response.status_code == 504
            error = response.json()["error"]
            assert error["type"] == "StepTimedOut" and "step_timeout_s" in error["message"]
            assert len(app.state.sessions) == 0
            with pytest.raises(SessionNotFound):
                await client.step(start.session_id, _guess(5))
            second = await client.create_session(SLOW_ID, {"target": 5}, seed=0)
            with pytest.raises(ServiceUnavailable, match="504"):
                await client.step(second.session_id, _guess(5))
            await asyncio.sleep(0.5)  # the stuck steps return; their envs are closed then
            assert len(CLOSED) == closed_before + 2
            text = (await client._http.get("/metrics")).text
            assert _metric(text, 'agentrl_service_sessions_closed_total{reason="timeout"}') == 2
            assert _metric(text, 'agentrl_service_errors_total{type="StepTimedOut",status="504"}') == 2

    asyncio.run(main())


def test_idle_sessions_expire_and_their_env_is_closed() -> None:
    async def main() -> None:
        settings = ServiceSettings(idle_timeout_s=0.05, reap_interval_s=0.02)
        async with _served(settings) as (app, client):
            closed_before = len(CLOSED)
            await client.create_session(SLOW_ID, {}, seed=0)
            await asyncio.sleep(0.2)
            assert len(app.state.sessions) == 0 and len(CLOSED) == closed_before + 1
            text = (await client._http.get("/metrics")).text
            assert _metric(text, 'agentrl_service_sessions_closed_total{reason="idle"}') == 1

    asyncio.run(main())


# --- bad requests: a clear JSON error, never a 500 --------------------------------------------------------

GOOD_CREATE = _create_body(GUESS_NUMBER_ID, {}, 0)
BAD_REQUESTS = [
    ("POST", "/v1/sessions", "{not json", 422, "InvalidRequest"),
    ("POST", "/v1/sessions", "", 422, "InvalidRequest"),
    ("POST", "/v1/sessions", "[1, 2]", 422, "InvalidRequest"),
    ("POST", "/v1/sessions", "null", 422, "InvalidRequest"),
    ("POST", "/v1/sessions", '{"env_id": 5, "task": {}, "seed": 0}', 422, "InvalidRequest"),
    ("POST", "/v1/sessions", '{"env_id": "x", "task": [], "seed": 0}', 422, "InvalidRequest"),
    ("POST", "/v1/sessions", '{"env_id": "x", "task": {}, "seed": "zero"}', 422, "InvalidRequest"),
    ("POST", "/v1/sessions", '{"env_id": "x", "task": {}, "seed": 1.5}', 422, "InvalidRequest"),
    ("POST", "/v1/sessions", '{"env_id": "x", "task": {}, "seed": -1}', 422, "InvalidRequest"),
    ("POST", "/v1/sessions", '{"env_id": "x", "task": {}, "seed": 1e400}', 422, "InvalidRequest"),
    ("POST", "/v1/sessions", _create_body("x", {}, 2**70), 422, "InvalidRequest"),
    ("POST", "/v1/sessions", '{"env_id": "no/Such-v0", "task": {}, "seed": 0}', 404, "EnvNotFound"),
    ("POST", "/v1/sessions", '{"env_id": "", "task": {}, "seed": 0}', 404, "EnvNotFound"),
    (
        "POST",
        "/v1/sessions",
        _create_body(GUESS_NUMBER_ID, {"target": [1]}, 0),
        422,
        "InvalidTask",
    ),  # fmt: skip
    ("POST", "/v1/sessions", _create_body(SLOW_ID, {"explode": True}, 0), 422, "InvalidTask"),
    ("POST", "/v1/sessions/nope/step", '{"action": {"text": 3}}', 422, "InvalidRequest"),
    (
        "POST",
        "/v1/sessions/nope/step",
        '{"action": {"text": "", "tool_calls": [{"name": 1}]}}',
        422,
        "InvalidRequest",
    ),  # fmt: skip
    ("POST", "/v1/sessions/nope/step", '{"action": "guess 5"}', 422, "InvalidRequest"),
    ("POST", "/v1/sessions/nope/step", '{"action": {"text": ""}}', 404, "SessionNotFound"),
    ("POST", "/v1/sessions/%00%ff/step", '{"action": {"text": ""}}', 404, "SessionNotFound"),
    ("DELETE", "/v1/sessions/nope", None, 404, "SessionNotFound"),
    ("PUT", "/v1/sessions", GOOD_CREATE, 405, "HTTPError"),
    ("GET", "/v1/sessions/nope/step", None, 405, "HTTPError"),
    ("GET", "/nothing/here", None, 404, "HTTPError"),
]


@pytest.mark.parametrize(("method", "path", "content", "status", "error_type"), BAD_REQUESTS)
def test_bad_requests_get_a_clear_json_error(
    method: str, path: str, content: str | None, status: int, error_type: str
) -> None:
    async def main() -> None:
        async with _served(ServiceSettings()) as (app, client):
            headers = {"content-type": "application/json"}
            response = await client._http.request(method, path, content=content, headers=headers)
            assert (response.status_code, response.json()["error"]["type"]) == (status, error_type)
            assert len(response.json()["error"]["message"]) > 5

    asyncio.run(main())


def test_wrong_content_type_and_steps_after_the_end_are_4xx() -> None:
    async def main() -> None:
        async with _served(ServiceSettings()) as (app, client):
            plain = await client._http.post(
                "/v1/sessions", content=GOOD_CREATE, headers={"content-type": "text/plain"}
            )
            assert plain.status_code in (415, 422) and "error" in plain.json()
            start = await client.create_session(GUESS_NUMBER_ID, {"target": 9}, seed=0)
            await client.step(start.session_id, _guess(9))
            for _ in range(2):
                after = await client._http.post(
                    f"/v1/sessions/{start.session_id}/step", json={"action": {"text": ""}}
                )
                assert after.status_code == 409
                assert after.json()["error"]["type"] == "EpisodeOver"
                assert "create a new session" in after.json()["error"]["message"]
            text = (await client._http.get("/metrics")).text
            assert 'status="500"' not in text

    asyncio.run(main())


# --- metrics --------------------------------------------------------------------------------------------


def test_metrics_count_sessions_steps_and_errors() -> None:
    async def main() -> None:
        async with _served(ServiceSettings()) as (app, client):
            first = await client.create_session(GUESS_NUMBER_ID, {"target": 2}, seed=0)
            second = await client.create_session(GUESS_NUMBER_ID, {"target": 2}, seed=0)
            for number in (1, 3, 2):
                await client.step(first.session_id, _guess(number))
            await client.close_session(second.session_id)
            with pytest.raises(SessionNotFound):
                await client.step("missing", _guess(1))
            response = await client._http.get("/metrics")
            assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
            text = response.text
            assert _metric(text, "agentrl_service_sessions_live") == 1
            assert _metric(text, "agentrl_service_sessions_created_total") == 2
            assert _metric(text, 'agentrl_service_sessions_closed_total{reason="client"}') == 1
            assert _metric(text, "agentrl_service_step_seconds_count") == 3
            assert _metric(text, 'agentrl_service_step_seconds_bucket{le="+Inf"}') == 3
            assert _metric(text, 'agentrl_service_errors_total{type="SessionNotFound",status="404"}') == 1
            assert "# TYPE agentrl_service_step_seconds histogram" in text

    asyncio.run(main())


def test_histogram_buckets_are_cumulative_and_inclusive() -> None:
    histogram = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 2.0):
        histogram.observe(value)
    assert histogram.cumulative() == [2, 3] and histogram.count == 4
    text = ServiceMetrics(step_seconds=histogram).render(live_sessions=0)
    assert 'agentrl_service_step_seconds_bucket{le="0.1"} 2' in text
    assert 'agentrl_service_step_seconds_bucket{le="+Inf"} 4' in text
    assert "agentrl_service_step_seconds_sum 2.65" in text

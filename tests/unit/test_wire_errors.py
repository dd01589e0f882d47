"""Errors keep their meaning across the wire: each status and type the real service sends becomes the same
agentrl error class in the client over "http" and "ws"; only infrastructure failures are re-played by the
runner, and a caller error (a wrong token, a task the env rejects) surfaces unwrapped from
`collect_rollouts`. Also: the client imports no server code, and the wire helpers themselves."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from fixtures_envs import GUESS_NUMBER_ID, LOST_SANDBOX_ID, GuessNumberEnv
from service_harness import GuessingEngine, serving

from agentrl.agent.engines.base import SamplingParams
from agentrl.agent.rollout import collect_rollouts, play_member, run_concurrently
from agentrl.agent.rollout_config import RolloutConfig
from agentrl.client import ClientConfig, EnvClient
from agentrl.env import StepResult, register
from agentrl.errors import (
    INFRA_ERRORS,
    AgentRLError,
    AuthError,
    EnvNotFound,
    EpisodeOver,
    InvalidRequest,
    InvalidTask,
    RequestRejected,
    SandboxError,
    SandboxLost,
    ServiceError,
    ServiceUnavailable,
    SessionLimitReached,
    SessionNotFound,
    StepTimedOut,
)
from agentrl.service import ServiceSettings
from agentrl.types import Action, ToolCall
from agentrl.wire import (
    STATUS_OF_ERROR,
    WireError,
    action_from_json,
    action_to_json,
    error_class,
    parse_error_body,
    status_of,
)

SLOW_ID = "test/WireSlowStep-v0"
CRASH_ID = "test/WireCrashingStep-v0"
TOKEN = "wire-secret"
SAMPLING = SamplingParams(max_new_tokens=16)
WIRES = ["http", "ws"]


class SlowStepEnv(GuessNumberEnv):
    def step(self, action: Action) -> StepResult:
        time.sleep(0.6)
        return super().step(action)


class CrashingStepEnv(GuessNumberEnv):
    def step(self, action: Action) -> StepResult:
        raise RuntimeError("a bug in the env's step")


register(SLOW_ID, entry_point=SlowStepEnv)
register(CRASH_ID, entry_point=CrashingStepEnv)

SETTINGS = ServiceSettings(
    token=TOKEN,
    max_sessions=1,
    max_body_bytes=4096,
    step_timeout_s=0.2,
    env_kwargs={GUESS_NUMBER_ID: {"high": 5}},
)


def _guess(number: int) -> Action:
    return Action(text="", tool_calls=(ToolCall(name="guess", arguments={"number": number}),))


def _client(url: str, wire: str, token: str = TOKEN) -> EnvClient:
    return EnvClient(url, token=token, config=ClientConfig(transport=wire, retries=0))  # type: ignore[arg-type]


async def _episode_over(client: EnvClient) -> None:
    start = await client.create_session(GUESS_NUMBER_ID, {"target": 1}, seed=0)
    await client.step(start.session_id, _guess(1))
    await client.step(start.session_id, _guess(1))


async def _full(client: EnvClient) -> None:
    await client.create_session(GUESS_NUMBER_ID, {}, seed=0)
    await client.create_session(GUESS_NUMBER_ID, {}, seed=0)


async def _step_on(client: EnvClient, env_id: str) -> None:
    start = await client.create_session(env_id, {}, seed=0)
    await client.step(start.session_id, _guess(1))


Case = Callable[[EnvClient], Awaitable[Any]]
CASES: dict[str, tuple[Case, type[AgentRLError], str]] = {
    # name: (what the client does, the exact class it gets, a regex on the message)
    "wrong token": (
        lambda c: c.create_session(GUESS_NUMBER_ID, {}, seed=0),
        AuthError,
        "401 AuthError.*missing or wrong bearer token.*set AGENTRL_SERVICE_TOKEN",
    ),
    "unknown env": (lambda c: c.create_session("test/GuessNumbr-v0", {}, 0), EnvNotFound, "GuessNumber-v0"),
    "unknown session": (lambda c: c.step("no-such-session", _guess(1)), SessionNotFound, "no-such-session"),
    "episode over": (_episode_over, EpisodeOver, "409 EpisodeOver.*create a new session"),
    "invalid task": (
        lambda c: c.create_session(GUESS_NUMBER_ID, {"target": 99}, seed=0),
        InvalidTask,
        "422 InvalidTask.*target must be an integer",
    ),
    "task a plugin rejects": (
        lambda c: c.create_session("agentrl/Calc-v0", {"id": "calc-x"}, seed=0),
        InvalidTask,
        "422 InvalidTask.*missing 'question'",
    ),
    "invalid request": (
        lambda c: c.create_session(GUESS_NUMBER_ID, {}, seed=-1),
        InvalidRequest,
        "422 InvalidRequest.*seed",
    ),
    "too large": (
        lambda c: c.create_session(GUESS_NUMBER_ID, {"pad": "x" * 8192}, seed=0),
        RequestRejected,
        "413 RequestTooLarge.*max_body_bytes",
    ),
    "full": (_full, ServiceUnavailable, "429 .*SessionLimitReached"),
    "step timeout": (lambda c: _step_on(c, SLOW_ID), StepTimedOut, "504 .*step_timeout_s"),
    "sandbox lost": (lambda c: _step_on(c, LOST_SANDBOX_ID), ServiceUnavailable, "503 .*SandboxLost"),
    "env bug": (lambda c: _step_on(c, CRASH_ID), ServiceUnavailable, "500 .*InternalError.*a bug in the env"),
}


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("case", list(CASES))
def test_each_error_reaches_the_client_as_its_class(case: str, wire: str) -> None:
    act, expected, words = CASES[case]

    async def main(url: str) -> BaseException:
        async with _client(url, wire, token="wrong" if case == "wrong token" else TOKEN) as client:
            with pytest.raises(AgentRLError) as caught:
                await act(client)
            return caught.value

    with serving(SETTINGS) as (url, _):
        error = asyncio.run(main(url))
    assert type(error) is expected, repr(error)
    assert re.search(words, str(error)), str(error)
    assert isinstance(error, INFRA_ERRORS) == issubclass(expected, ServiceUnavailable)


def test_only_sandbox_and_unavailable_service_errors_are_infrastructure() -> None:
    infra = [ServiceUnavailable, SessionLimitReached, StepTimedOut, SandboxError, SandboxLost]
    caller = [
        AuthError,
        SessionNotFound,
        EpisodeOver,
        InvalidTask,
        InvalidRequest,
        RequestRejected,
        EnvNotFound,
    ]
    assert all(issubclass(cls, INFRA_ERRORS) for cls in infra)
    assert not any(issubclass(cls, INFRA_ERRORS) for cls in caller)
    assert all(issubclass(cls, RequestRejected) for cls in caller[:-1]) and issubclass(
        RequestRejected, ServiceError
    )


@pytest.mark.parametrize(
    ("status", "error_type", "expected"),
    [
        (401, "AuthError", AuthError),
        (401, "Unauthorized", AuthError),  # an older service, or a proxy
        (404, "SessionNotFound", SessionNotFound),
        (404, "EnvNotFound", EnvNotFound),
        (404, "HTTPError", RequestRejected),
        (409, "EpisodeOver", EpisodeOver),
        (422, "InvalidTask", InvalidTask),
        (422, "InvalidRequest", InvalidRequest),
        (422, "Whatever", InvalidRequest),
        (413, "RequestTooLarge", RequestRejected),
        (400, "RequestRejected", RequestRejected),
        (418, "HTTPError", RequestRejected),
        (429, "SessionLimitReached", SessionLimitReached),
        (429, "HTTPError", ServiceUnavailable),
        (504, "StepTimedOut", StepTimedOut),
        (503, "SandboxLost", ServiceUnavailable),
        (503, "SandboxError", ServiceUnavailable),  # never a client-side SandboxError
        (500, "InternalError", ServiceUnavailable),
        (502, "HTTPError", ServiceUnavailable),
        (500, "AuthError", ServiceUnavailable),  # the status decides when type and status disagree
    ],
)
def test_error_class_of_status_and_type(status: int, error_type: str, expected: type[AgentRLError]) -> None:
    assert error_class(status, error_type) is expected


def test_status_of_and_error_class_are_inverse() -> None:
    for cls, status in STATUS_OF_ERROR.items():
        assert status_of(cls("x")) == status
        if not issubclass(cls, SandboxError):
            assert error_class(status, cls.__name__) is cls
    assert status_of(SandboxLost("x")) == 503 and status_of(AgentRLError("x")) == 500


def test_action_json_round_trip_and_error_bodies() -> None:
    action = Action("hi", (ToolCall("guess", {"number": 3}), ToolCall("submit")), parse_error=None)
    assert action_from_json(json.loads(json.dumps(action_to_json(action)))) == action
    assert parse_error_body(b'{"error": {"type": "AuthError", "message": "no"}}') == WireError(
        "AuthError", "no"
    )
    assert parse_error_body(b"<html>bad gateway</html>") == WireError("HTTPError", "<html>bad gateway</html>")
    assert parse_error_body(b"", "Bad Gateway") == WireError("HTTPError", "Bad Gateway")


def test_the_client_imports_no_server_code() -> None:
    code = (
        "import agentrl.client, sys\n"
        "server = [m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette')"
        " or m == 'agentrl.service' or m.startswith('agentrl.service.')]\n"
        "print(server)\n"
        "sys.exit(1 if server else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


# --- the runner: caller errors stop the run at once, infrastructure failures are re-played ----------------

ROLLOUT = RolloutConfig(max_turns=2, infra_attempts=3)


def _collect(client: EnvClient, engine: GuessingEngine, env_id: str, tasks: list[dict[str, Any]], group: int):
    return collect_rollouts(client, engine, env_id, tasks, group, SAMPLING, ROLLOUT, seed=0, progress=False)


@pytest.mark.parametrize("wire", WIRES)
def test_a_wrong_token_stops_collect_rollouts_unwrapped_and_unreplayed(wire: str) -> None:
    engine = GuessingEngine(3)

    async def main(url: str) -> None:
        async with _client(url, wire, token="wrong") as client:
            with pytest.raises(AuthError, match="401.*AGENTRL_SERVICE_TOKEN"):
                await _collect(client, engine, GUESS_NUMBER_ID, [{"id": "t", "target": 3}], group=2)
            with pytest.raises(AuthError, match="401"):
                await play_member(
                    client, lambda: engine, GUESS_NUMBER_ID, {"target": 3}, 0, "g", SAMPLING, ROLLOUT, (0,)
                )

    with serving(ServiceSettings(token=TOKEN)) as (url, app):
        asyncio.run(main(url))
        refused = app.state.metrics.errors[("AuthError", 401)]
    assert 2 <= refused <= 3  # at most one per member, then one for play_member: never re-played
    assert engine.calls == 0


@pytest.mark.parametrize("wire", WIRES)
def test_a_task_the_env_rejects_stops_collect_rollouts_with_the_422_message(wire: str) -> None:
    async def main(url: str) -> None:
        async with _client(url, wire) as client:
            tasks = [{"id": "good", "target": 3}, {"id": "bad", "target": "seven"}]
            with pytest.raises(InvalidTask, match="422 InvalidTask.*target must be an integer.*'seven'"):
                await _collect(client, GuessingEngine(3), GUESS_NUMBER_ID, tasks, group=1)

    # The good member closes its session when it is cancelled; but if the cancel caught its create in
    # flight (likely on a loaded machine), the service made a session the client never heard of, and only
    # the idle reaper can close it: a short idle timeout lets the test see that nothing is left either way.
    settings = ServiceSettings(token=TOKEN, idle_timeout_s=2.0, reap_interval_s=0.5)
    with serving(settings) as (url, app):
        asyncio.run(main(url))
        assert app.state.metrics.errors[("InvalidTask", 422)] == 1
        deadline = time.monotonic() + 20
        while len(app.state.sessions) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(app.state.sessions) == 0


@pytest.mark.parametrize("wire", WIRES)
def test_an_infrastructure_failure_is_re_played_and_kept_as_data(wire: str) -> None:
    async def main(url: str) -> list[Any]:
        async with _client(url, wire) as client:
            return await _collect(client, GuessingEngine(3), LOST_SANDBOX_ID, [{"id": "t"}], group=1)

    with serving(ServiceSettings(token=TOKEN)) as (url, app):
        [episode] = asyncio.run(main(url))
        created = app.state.metrics.sessions_created
    assert episode.stop_reason == "infra_error" and episode.attempts == ROLLOUT.infra_attempts == created
    assert "503" in str(episode.error) and "SandboxLost" in str(episode.error)


# --- run_concurrently ------------------------------------------------------------------------------------


def test_run_concurrently_returns_results_in_order() -> None:
    async def after(delay: float, value: int) -> int:
        await asyncio.sleep(delay)
        return value

    assert asyncio.run(run_concurrently(after(0.03 - 0.01 * i, i) for i in range(3))) == [0, 1, 2]
    assert asyncio.run(run_concurrently([])) == []


def test_run_concurrently_raises_the_first_error_unwrapped_after_cancelling_the_rest() -> None:
    cleaned: list[str] = []

    async def rejected() -> None:
        await asyncio.sleep(0.01)
        raise AuthError("401: wrong token")

    async def long_episode() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            cleaned.append("closed its session")

    async def fails_while_closing() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            raise SessionNotFound("gone")

    async def main() -> None:
        with pytest.raises(AuthError, match="wrong token") as caught:
            await run_concurrently([long_episode(), rejected(), fails_while_closing()])
        assert not isinstance(caught.value, BaseExceptionGroup)
        assert caught.value.__notes__ == ["another concurrent task failed too: SessionNotFound: gone"]

    started = time.monotonic()
    asyncio.run(main())
    assert cleaned == ["closed its session"] and time.monotonic() - started < 5

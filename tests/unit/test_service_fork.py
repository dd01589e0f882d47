"""Fork on the wire: `POST /v1/sessions/{id}/fork` in-process (httpx.ASGITransport) and the ws op `fork` on a
real uvicorn server: forks step like their parent and independently, limits, errors, replica routing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from fastapi import FastAPI
from fixtures_envs import GUESS_NUMBER_ID, GuessNumberEnv
from service_harness import serving

from agentrl.client import ClientConfig, EnvClient
from agentrl.env import register
from agentrl.errors import (
    AuthError,
    EpisodeOver,
    ForkUnsupported,
    InvalidRequest,
    ServiceUnavailable,
    SessionLimitReached,
    SessionNotFound,
)
from agentrl.service import ServiceSettings, create_app
from agentrl.service.routers.sessions import TREE_SESSIONS_HEADER
from agentrl.types import Action, ToolCall

BASE_URL = "http://env-service.test"
NO_FORK_ID = "test/NoForkGuess-v0"


class NoForkGuessEnv(GuessNumberEnv):
    fork_capability = "none"


register(NO_FORK_ID, entry_point=NoForkGuessEnv)


def _guess(number: int) -> Action:
    return Action(text="", tool_calls=(ToolCall(name="guess", arguments={"number": number}),))


@contextlib.asynccontextmanager
async def _served(settings: ServiceSettings) -> AsyncIterator[tuple[FastAPI, EnvClient]]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        async with EnvClient(BASE_URL, transport=httpx.ASGITransport(app=app)) as client:
            yield app, client


def _run(test: Callable[[FastAPI, EnvClient], Awaitable[None]], settings: ServiceSettings) -> None:
    async def main() -> None:
        async with _served(settings) as (app, client):
            await test(app, client)

    asyncio.run(main())


def test_forks_step_like_their_parent_and_independently() -> None:
    async def test(app: FastAPI, client: EnvClient) -> None:
        start = await client.create_session(GUESS_NUMBER_ID, {"target": 37}, seed=0)
        await client.step(start.session_id, _guess(50))
        forks = await client.fork_session(start.session_id, 2)
        assert [(f.state_key, f.turn_index) for f in forks] == [("1-49", 1)] * 2
        assert len(app.state.sessions) == 3 and len({f.session_id for f in forks}) == 2
        assert all(f.session_id.startswith(start.session_id + ".") for f in forks)
        parent = await client.step(start.session_id, _guess(25))
        forked = await client.step(forks[0].session_id, _guess(25))
        assert forked == parent
        assert (await client.step(forks[1].session_id, _guess(37))).terminated  # the fork ends alone
        assert (await client.step(start.session_id, _guess(40))).observation == "lower"
        grandchild = (await client.fork_session(forks[0].session_id))[0]
        assert grandchild.turn_index == 2 and grandchild.session_id.startswith(start.session_id + ".")
        await client.close_session(start.session_id)  # the forks outlive their parent
        assert (await client.step(forks[0].session_id, _guess(37))).reward == 1.0

    _run(test, ServiceSettings())


def test_delete_tells_the_balancer_how_many_of_the_tree_are_left() -> None:
    async def main() -> None:
        async with _served(ServiceSettings()) as (app, client):
            start = await client.create_session(GUESS_NUMBER_ID, {"target": 3}, seed=0)
            forks = await client.fork_session(start.session_id, 2)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL) as raw:
                answer = await raw.delete(f"/v1/sessions/{start.session_id}")
                assert answer.status_code == 204 and answer.headers[TREE_SESSIONS_HEADER] == "2"
                for fork, left in zip(forks, ("1", "0"), strict=True):
                    answer = await raw.delete(f"/v1/sessions/{fork.session_id}")
                    assert answer.headers[TREE_SESSIONS_HEADER] == left

    asyncio.run(main())


def test_an_env_that_cannot_fork_is_a_409() -> None:
    async def test(app: FastAPI, client: EnvClient) -> None:
        start = await client.create_session(NO_FORK_ID, {"target": 3}, seed=0)
        with pytest.raises(ForkUnsupported, match="409 ForkUnsupported.*cannot fork"):
            await client.fork_session(start.session_id, 1)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL) as raw:
            answer = await raw.post(f"/v1/sessions/{start.session_id}/fork", json={"n": 1})
        assert answer.status_code == 409 and answer.json()["error"]["type"] == "ForkUnsupported"
        assert len(app.state.sessions) == 1

    _run(test, ServiceSettings())


def test_fork_limits_and_errors() -> None:
    async def test(app: FastAPI, client: EnvClient) -> None:
        start = await client.create_session(GUESS_NUMBER_ID, {"target": 3}, seed=0)
        other = await client.create_session(GUESS_NUMBER_ID, {"target": 3}, seed=0)
        with pytest.raises(InvalidRequest, match="max_forks"):
            await client.fork_session(start.session_id, 3)
        with pytest.raises(InvalidRequest):
            await client.fork_session(start.session_id, 0)
        with pytest.raises(SessionLimitReached):  # 2 + 2 > max_sessions
            await client.fork_session(start.session_id, 2)
        await client.close_session(other.session_id)
        forks = await client.fork_session(start.session_id, 2)
        with pytest.raises(ServiceUnavailable, match="SessionLimitReached"):  # full: create is refused alike
            await client.create_session(GUESS_NUMBER_ID, {"target": 3}, seed=0)
        with pytest.raises(SessionLimitReached):
            await client.fork_session(start.session_id, 1)
        with pytest.raises(SessionNotFound):
            await client.fork_session("no-such-session", 1)
        await client.step(start.session_id, _guess(3))
        await client.close_session(forks[0].session_id)
        with pytest.raises(EpisodeOver):
            await client.fork_session(start.session_id, 1)

    _run(test, ServiceSettings(max_sessions=3, max_forks=2))


def test_a_forked_maze_session_steps_like_its_parent() -> None:
    levels = pytest.importorskip("agentrl_maze.levels")
    task = next(t for t in (levels.make_task(4, 1, index) for index in range(100)) if t is not None)
    moves = ["down", "right", "left", "up", "right", "down"]

    async def test(app: FastAPI, client: EnvClient) -> None:
        start = await client.create_session("agentrl/Maze-v0", task, seed=4)
        move = [Action(text="", tool_calls=(ToolCall("move", {"direction": d}),)) for d in moves]
        first = await client.step(start.session_id, move[0])
        (fork,) = await client.fork_session(start.session_id)
        assert fork.state_key == first.info["state_key"] and fork.turn_index == 1
        for action in move[1:]:
            parent, forked = (
                await client.step(start.session_id, action),
                await client.step(fork.session_id, action),
            )
            assert forked == parent
            if parent.terminated or parent.truncated:
                break

    _run(test, ServiceSettings())


def test_fork_over_the_socket_and_closed_with_it() -> None:
    with serving(ServiceSettings()) as (url, app):

        async def main() -> None:
            async with EnvClient(url, config=ClientConfig(transport="ws")) as client:
                start = await client.create_session(GUESS_NUMBER_ID, {"target": 37}, seed=0)
                await client.step(start.session_id, _guess(50))
                forks = await client.fork_session(start.session_id, 2)
                assert [f.turn_index for f in forks] == [1, 1]
                parent = await client.step(start.session_id, _guess(25))
                assert await client.step(forks[1].session_id, _guess(25)) == parent
                with pytest.raises(SessionNotFound):
                    await client.fork_session("no-such-session", 1)
                assert len(app.state.sessions) == 3
            # the socket closed: every session it carried, forks included, is closed
            for _ in range(200):
                if not len(app.state.sessions):
                    break
                await asyncio.sleep(0.01)
            assert len(app.state.sessions) == 0

        asyncio.run(main())


@pytest.mark.parametrize("transport", ["http", "ws"])
def test_a_fork_lives_on_its_parents_replica(transport: str) -> None:
    with serving(ServiceSettings()) as (url_a, app_a), serving(ServiceSettings()) as (url_b, app_b):

        async def main() -> None:
            config = ClientConfig(transport=transport)  # type: ignore[arg-type]
            async with EnvClient([url_a, url_b], config=config) as client:
                first = await client.create_session(GUESS_NUMBER_ID, {"target": 9}, seed=0)
                second = await client.create_session(GUESS_NUMBER_ID, {"target": 9}, seed=0)
                for start in (first, second):
                    app = app_a if start.session_id in app_a.state.sessions._sessions else app_b
                    (fork,) = await client.fork_session(start.session_id)
                    assert fork.session_id in app.state.sessions._sessions
                    assert (await client.step(fork.session_id, _guess(9))).terminated

        asyncio.run(main())


def test_a_fork_on_a_lost_replica_is_an_infrastructure_failure() -> None:
    running = serving(ServiceSettings())
    url, _ = running.__enter__()

    async def main() -> None:
        async with EnvClient(url, config=ClientConfig(retries=0)) as client:
            start = await client.create_session(GUESS_NUMBER_ID, {"target": 9}, seed=0)
            running.__exit__(None, None, None)  # the replica holding the session is gone
            with pytest.raises(ServiceUnavailable):
                await client.fork_session(start.session_id, 1)

    asyncio.run(main())


def test_a_forked_calc_session_steps_like_its_parent() -> None:
    pytest.importorskip("agentrl_calc")
    task = {"id": "calc-fork", "question": "What is 6 * 7?", "answer": "42"}
    submit = [Action(text="", tool_calls=(ToolCall("submit", {"answer": a}),)) for a in ("41", "42")]

    async def test(app: FastAPI, client: EnvClient) -> None:
        start = await client.create_session("agentrl/Calc-v0", task, seed=0)
        await client.step(start.session_id, Action(text="no call"))  # an invalid turn: no sandbox yet
        wrong, right = await client.fork_session(start.session_id, 2)
        assert wrong.turn_index == right.turn_index == 1
        assert (await client.step(wrong.session_id, submit[0])).reward == 0.0
        parent, forked = (
            await client.step(start.session_id, submit[1]),
            await client.step(right.session_id, submit[1]),
        )
        assert forked == parent and parent.reward == 1.0

    _run(test, ServiceSettings(env_kwargs={"agentrl/Calc-v0": {"pool_size": 0}}))


def test_a_fork_needs_the_token_like_every_session_request() -> None:
    async def main() -> None:
        app = create_app(ServiceSettings(token="secret"))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with EnvClient(BASE_URL, transport=transport, token="secret") as client:
                start = await client.create_session(GUESS_NUMBER_ID, {"target": 3}, seed=0)
            async with EnvClient(BASE_URL, transport=transport, token="wrong") as stranger:
                with pytest.raises(AuthError):
                    await stranger.fork_session(start.session_id, 1)
            assert len(app.state.sessions) == 1

    asyncio.run(main())

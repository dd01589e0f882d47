"""Live env sessions of the service: create, step, close, expire.

What this is: `SessionManager`, a dict of env instances by uuid session id. Env calls block (a sandboxed
env talks to Docker), so each runs in the thread pool; a per-session `asyncio.Lock` keeps the steps of one
session from overlapping while different sessions run concurrently. A background reaper closes sessions
idle for longer than `idle_timeout_s`; shutdown closes them all. A step running longer than
`step_timeout_s` raises `StepTimedOut` at once; its thread cannot be interrupted, so the session is retired
(unknown to new requests) and its env is closed when the step finally returns. Counts go to
`ServiceMetrics`.

What this is not: HTTP. Handlers translate; the errors raised here (all from `agentrl.errors`) are mapped
to status codes in one place (`agentrl.wire.STATUS_OF_ERROR`, applied by `agentrl/service/app.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.concurrency import run_in_threadpool

from agentrl.env import Env, StepResult, make
from agentrl.errors import (
    INFRA_ERRORS,
    EpisodeOver,
    InvalidTask,
    SessionLimitReached,
    SessionNotFound,
    StepTimedOut,
)
from agentrl.service.metrics import ServiceMetrics
from agentrl.service.settings import ServiceSettings
from agentrl.types import Action, SessionStart

log = logging.getLogger(__name__)


@dataclass
class Session:
    session_id: str
    env_id: str
    env: Env
    last_used: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    done: bool = False
    closed: bool = False


class SessionManager:
    """Holds the live sessions of one service process. Use from a single event loop."""

    def __init__(
        self,
        settings: ServiceSettings,
        metrics: ServiceMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.metrics = metrics or ServiceMetrics()
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._reserved = 0  # sessions being created: counted against max_sessions before they exist
        self._retiring: set[asyncio.Task[None]] = set()  # timed-out sessions waiting for their step

    def __len__(self) -> int:
        return len(self._sessions)

    async def create(self, env_id: str, task: Mapping[str, Any], seed: int) -> SessionStart:
        if len(self._sessions) + self._reserved >= self.settings.max_sessions:
            raise SessionLimitReached(
                f"the env service holds its maximum of {self.settings.max_sessions} sessions; "
                "retry later, close finished sessions, or raise max_sessions"
            )
        self._reserved += 1
        try:
            kwargs = dict(self.settings.env_kwargs.get(env_id, {}))
            env, observation, info = await run_in_threadpool(_open_env, env_id, kwargs, dict(task), seed)
        finally:
            self._reserved -= 1
        session = Session(session_id=uuid.uuid4().hex, env_id=env_id, env=env, last_used=self._clock())
        self._sessions[session.session_id] = session
        self.metrics.sessions_created += 1
        return SessionStart(session.session_id, observation, info, _tools(env), _examples(env))

    async def step(self, session_id: str, action: Action) -> StepResult:
        session = self._get(session_id)
        async with session.lock:
            if session.closed:
                raise SessionNotFound(f"session {session_id} was closed while this step waited")
            if session.done:
                raise EpisodeOver(f"the episode of session {session_id} has ended; create a new session")
            result = await self._timed_step(session, action)
            session.done = bool(result.terminated or result.truncated)
            session.last_used = self._clock()
        return result

    async def _timed_step(self, session: Session, action: Action) -> StepResult:
        started = time.perf_counter()
        if not getattr(session.env, "blocking", True):  # microseconds, no I/O: no thread hand-off
            try:
                return StepResult(*session.env.step(action))
            finally:
                self.metrics.step_seconds.observe(time.perf_counter() - started)
        running = asyncio.ensure_future(run_in_threadpool(session.env.step, action))
        try:
            raw = await asyncio.wait_for(asyncio.shield(running), self.settings.step_timeout_s)
        except TimeoutError:
            self._retire(session, running)
            raise StepTimedOut(
                f"the step of session {session.session_id} ({session.env_id}) ran longer than "
                f"{self.settings.step_timeout_s:g} s (step_timeout_s); the session is closed; "
                "create a new one"
            ) from None
        except asyncio.CancelledError:  # the step goes on in its thread: never let the next one overlap it
            self._retire(session, running)
            raise
        finally:
            self.metrics.step_seconds.observe(time.perf_counter() - started)
        return StepResult(*raw)

    def _retire(self, session: Session, running: asyncio.Future[Any]) -> None:
        """Forget a session whose step is stuck; close its env once that step returns."""
        self._sessions.pop(session.session_id, None)
        session.closed = True  # the caller holds the lock; later waiters see a closed session
        self.metrics.sessions_closed["timeout"] += 1  # or cancelled: the step never answered either way

        async def close_when_done() -> None:
            with contextlib.suppress(Exception):
                await running
            await _close_env(session)

        task = asyncio.create_task(close_when_done())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def close(self, session_id: str) -> None:
        session = self._get(session_id)
        del self._sessions[session_id]
        self.metrics.sessions_closed["client"] += 1
        await _close_session(session)

    async def close_idle(self) -> int:
        """Close sessions idle for longer than `idle_timeout_s` (a step in flight counts as activity)."""
        deadline = self._clock() - self.settings.idle_timeout_s
        idle = [s for s in self._sessions.values() if s.last_used < deadline and not s.lock.locked()]
        for session in idle:
            self._sessions.pop(session.session_id, None)
            self.metrics.sessions_closed["idle"] += 1
            log.info("closing idle session %s (%s)", session.session_id, session.env_id)
            await _close_session(session)
        return len(idle)

    async def close_all(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        self.metrics.sessions_closed["shutdown"] += len(sessions)
        await asyncio.gather(*(_close_session(session) for session in sessions))
        if self._retiring:  # stuck steps get one more step timeout to return
            await asyncio.wait(set(self._retiring), timeout=self.settings.step_timeout_s)

    async def reap_forever(self) -> None:
        """The background reaper; cancel it to stop."""
        while True:
            await asyncio.sleep(self.settings.reap_interval_s)
            await self.close_idle()

    def _get(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionNotFound(
                f"no session {session_id!r}: it was closed, expired after "
                f"{self.settings.idle_timeout_s:g} s idle, or the service restarted; create a new session"
            )
        return session


def _open_env(env_id: str, kwargs: dict[str, Any], task: dict[str, Any], seed: int) -> tuple[Env, str, dict]:
    env = make(env_id, **kwargs)
    try:
        observation, info = env.reset(seed=seed, options={"task": task})
    except INFRA_ERRORS:  # e.g. a sandbox failure: keeps its own status (503)
        env.close()
        raise
    except Exception as exc:  # the task is the caller's data: whatever else reset raises on it (a plugin's
        # EnvError from validating the task included) is a 422, not a 500 that would be re-played as infra
        env.close()
        raise InvalidTask(f"{env_id} rejected the task (seed {seed}): {exc!r}") from exc
    except BaseException:
        env.close()
        raise
    return env, observation, dict(info)


async def _close_session(session: Session) -> None:
    async with session.lock:
        if session.closed:
            return
        session.closed = True
        await _close_env(session)


async def _close_env(session: Session) -> None:
    try:
        await run_in_threadpool(session.env.close)
    except Exception:
        log.exception("closing session %s (%s) failed", session.session_id, session.env_id)


def _tools(env: Env) -> list[dict[str, Any]]:
    return [dict(spec) for spec in env.tools]


def _examples(env: Env) -> list[dict[str, Any]]:
    return [dict(message) for message in env.examples]

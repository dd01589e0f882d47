"""Live env sessions of the service: create, step, close, expire.

What this is: `SessionManager`, a dict of env instances by uuid session id. Env calls block (a sandboxed
env talks to Docker), so each runs in the thread pool; a per-session `asyncio.Lock` keeps the steps of one
session from overlapping while different sessions run concurrently. A background reaper closes sessions
idle for longer than `idle_timeout_s`; shutdown closes them all.

What this is not: HTTP. Handlers translate; errors raised here are mapped to status codes in one place
(`agentrl/service/app.py`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.concurrency import run_in_threadpool

from agentrl.env import Env, StepResult, make
from agentrl.errors import EnvError, ServiceError, SessionNotFound
from agentrl.service.settings import ServiceSettings
from agentrl.types import Action

log = logging.getLogger(__name__)


class SessionLimitReached(ServiceError):
    """The service holds `max_sessions` live sessions; retry later or on another replica (HTTP 429)."""


class InvalidTask(EnvError):
    """The env rejected the task or seed at reset (HTTP 422)."""


class EpisodeOver(ServiceError):
    """A step was sent to a session whose episode already ended (HTTP 409)."""


@dataclass
class Session:
    session_id: str
    env_id: str
    env: Env
    last_used: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    done: bool = False
    closed: bool = False


@dataclass(frozen=True)
class SessionStart:
    session_id: str
    observation: str
    info: dict[str, Any]
    tools: list[dict[str, Any]]
    examples: list[dict[str, Any]]


class SessionManager:
    """Holds the live sessions of one service process. Use from a single event loop."""

    def __init__(self, settings: ServiceSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._reserved = 0  # sessions being created: counted against max_sessions before they exist

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
        return SessionStart(session.session_id, observation, info, _tools(env), _examples(env))

    async def step(self, session_id: str, action: Action) -> StepResult:
        session = self._get(session_id)
        async with session.lock:
            if session.closed:
                raise SessionNotFound(f"session {session_id} was closed while this step waited")
            if session.done:
                raise EpisodeOver(f"the episode of session {session_id} has ended; create a new session")
            result = StepResult(*await run_in_threadpool(session.env.step, action))
            session.done = bool(result.terminated or result.truncated)
            session.last_used = self._clock()
        return result

    async def close(self, session_id: str) -> None:
        session = self._get(session_id)
        del self._sessions[session_id]
        await _close_session(session)

    async def close_idle(self) -> int:
        """Close sessions idle for longer than `idle_timeout_s` (a step in flight counts as activity)."""
        deadline = self._clock() - self.settings.idle_timeout_s
        idle = [s for s in self._sessions.values() if s.last_used < deadline and not s.lock.locked()]
        for session in idle:
            self._sessions.pop(session.session_id, None)
            log.info("closing idle session %s (%s)", session.session_id, session.env_id)
            await _close_session(session)
        return len(idle)

    async def close_all(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(_close_session(session) for session in sessions))

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
    except (ValueError, KeyError, TypeError) as exc:
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
        try:
            await run_in_threadpool(session.env.close)
        except Exception:
            log.exception("closing session %s (%s) failed", session.session_id, session.env_id)


def _tools(env: Env) -> list[dict[str, Any]]:
    return [dict(spec) for spec in env.tools]


def _examples(env: Env) -> list[dict[str, Any]]:
    return [dict(message) for message in getattr(env, "examples", ())]

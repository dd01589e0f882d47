"""Live env sessions of the service: create, step, fork, close, expire.

What this is: `SessionManager`, a dict of env instances by uuid session id. Env calls block (a sandboxed
env talks to Docker), so each runs in the thread pool; a per-session `asyncio.Lock` keeps the steps of one
session from overlapping while different sessions run concurrently. A background reaper closes sessions
idle for longer than `idle_timeout_s`; shutdown closes them all. A step running longer than
`step_timeout_s` raises `StepTimedOut` at once; its thread cannot be interrupted, so the session is retired
(unknown to new requests) and its env is closed when the step finally returns. Counts go to
`ServiceMetrics`.

Fork: `fork(session_id, n)` makes n new sessions from `Env.fork()` of the session's env (under its lock, in
the thread pool), counted against `max_sessions` like creates. A fork's id is `<root>.<uuid>`, where `<root>`
is the id of the created session its tree started from, so a balancer that routes a session by its id can
route a whole tree by the part before the dot (sandboxes/lb/haproxy.cfg.in); `tree_size` counts a tree's
live sessions.

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
    InvalidRequest,
    InvalidTask,
    SessionLimitReached,
    SessionNotFound,
    StepTimedOut,
)
from agentrl.service.metrics import ServiceMetrics
from agentrl.service.settings import ServiceSettings
from agentrl.types import Action, ForkedSession, SessionStart

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
    state_key: Any = None  # after the reset or the last step: what a fork starts from


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
        self._check_room(1)
        self._reserved += 1
        try:
            kwargs = dict(self.settings.env_kwargs.get(env_id, {}))
            env, observation, info = await run_in_threadpool(_open_env, env_id, kwargs, dict(task), seed)
        finally:
            self._reserved -= 1
        session = Session(uuid.uuid4().hex, env_id, env, self._clock(), state_key=info.get("state_key"))
        self._sessions[session.session_id] = session
        self.metrics.sessions_created += 1
        return SessionStart(session.session_id, observation, info, _tools(env), _examples(env))

    async def fork(self, session_id: str, n: int) -> list[ForkedSession]:
        """n new sessions, each in the state of `session_id`'s env (`Env.fork`)."""
        if not 1 <= n <= self.settings.max_forks:
            raise InvalidRequest(
                f"invalid request: n must be between 1 and {self.settings.max_forks} (max_forks)"
            )
        parent = self._get(session_id)
        self._check_room(n)
        self._reserved += n
        try:
            async with parent.lock:
                if parent.closed:
                    raise SessionNotFound(f"session {session_id} was closed while this fork waited")
                if parent.done:
                    raise EpisodeOver(
                        f"the episode of session {session_id} has ended; fork it before its end"
                    )
                envs = await run_in_threadpool(_fork_env, parent.env, n)
                parent.last_used = self._clock()
        finally:
            self._reserved -= n
        root = session_id.partition(".")[0]
        forks = [
            Session(
                f"{root}.{uuid.uuid4().hex}", parent.env_id, env, self._clock(), state_key=parent.state_key
            )
            for env in envs
        ]
        self._sessions.update((fork.session_id, fork) for fork in forks)
        self.metrics.sessions_created += n
        return [ForkedSession(f.session_id, f.state_key, f.env.turns_taken) for f in forks]

    def tree_size(self, session_id: str) -> int:
        """Live sessions of the tree `session_id` belongs to (its root and every fork of it)."""
        root = session_id.partition(".")[0]
        return sum(1 for other in self._sessions if other.partition(".")[0] == root)

    def _check_room(self, n: int) -> None:
        if len(self._sessions) + self._reserved + n > self.settings.max_sessions:
            raise SessionLimitReached(
                f"the env service holds its maximum of {self.settings.max_sessions} sessions; "
                "retry later, close finished sessions, or raise max_sessions"
            )

    async def step(self, session_id: str, action: Action) -> StepResult:
        session = self._get(session_id)
        async with session.lock:
            if session.closed:
                raise SessionNotFound(f"session {session_id} was closed while this step waited")
            if session.done:
                raise EpisodeOver(f"the episode of session {session_id} has ended; create a new session")
            result = await self._timed_step(session, action)
            session.done = bool(result.terminated or result.truncated)
            session.state_key = result.info.get("state_key")
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


def _fork_env(env: Env, n: int) -> list[Env]:
    """n forks of `env`; on a failure the forks made so far are closed."""
    forks: list[Env] = []
    try:
        for _ in range(n):
            forks.append(env.fork())
    except BaseException:
        for fork in forks:
            fork.close()
        raise
    return forks


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

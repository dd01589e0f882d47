"""`EnvClient`: the async client of the env service, spread over one or more replicas.

What this is: one client speaking the contract of docs/design.md over one of two wires, converting to and from
the core types (`Action` in, `StepResult` out). `ClientConfig.transport` picks the wire:
- "http" (the default): a pooled `httpx.AsyncClient`, one request per call. Its transport is injectable, so
  tests run the real app in-process with `httpx.ASGITransport(app)`.
- "ws": one WebSocket per replica (`/v1/ws`, see `agentrl.service.routers.ws`) multiplexing every session
  the client holds there; requests made while others are in flight leave together in one frame. It serves
  many times the steps per second of "http", most of all at high concurrency, where many httpx connections
  collapse (see docs/service.md, measured with `bench/service.py`). Health and env listing still go
  over HTTP.
The wire format itself (bodies, error types, frames) lives in `agentrl.wire`, shared with the service; this
module never imports the service.
Every request (and the WebSocket handshake) carries `Authorization: Bearer <token>` when a token is given
or set in AGENTRL_SERVICE_TOKEN.

Replicas: `EnvClient([url_a, url_b])`, or a fleet whose replicas come and go: `EnvClient(urls, discover=...)`
asks `discover` for the live ones every `ClientConfig.rediscover_s` and whenever none it knows can take a
session (`agentrl/service/ray_fleet.py`). `create_session` goes round robin to the next replica not recently
seen failing, and on an unreachable, full or failing replica tries the next one; a session then stays pinned
to the replica that created it, because only that replica holds its env; `fork_session` goes to the
parent's replica (and socket), where its forks then live, pinned like the parent. If that replica dies,
`step` (and `fork_session`) raises
`ServiceUnavailable` and the runner ends the episode as an infrastructure failure
(`stop_reason="infra_error"`); the next episode's `create_session` lands on a live replica. Over "ws" a
session is also pinned to its socket: the service closes a socket's sessions when it closes, so once a socket
is lost its sessions' steps raise `ServiceUnavailable` (never retried), closing them is a no-op, and the next
`create_session` on that replica opens a new socket.

Retries: only idempotent calls (`health`, `list_envs`, `close_session`) are retried, a bounded number of
times with exponential backoff, on connection errors and 429/502/503/504, waiting Retry-After when the
service sends it. `create_session` tries each replica once without waiting (a replica that refused, or
could not be reached, created nothing; one that died mid-request leaves an orphan its idle reaper closes).
`step` and `fork_session` are never retried: they are not idempotent.

Errors, by what the caller should do (the same for both wires; over "ws" the status travels in the reply).
Only `ServiceUnavailable` is an infrastructure failure (`agentrl.errors.INFRA_ERRORS`: the runner re-plays
the episode); every `RequestRejected` is the caller's mistake, never retried, and stops the run:
    connection error, lost WebSocket, 5xx                 -> ServiceUnavailable  (infra; retry elsewhere)
    429 the replica is full                               -> SessionLimitReached (a ServiceUnavailable)
    504 step over the service's step timeout              -> StepTimedOut        (a ServiceUnavailable)
    401 missing or wrong token                            -> AuthError           (set AGENTRL_SERVICE_TOKEN)
    404 for a session                                     -> SessionNotFound
    404 for an env id                                     -> EnvNotFound         (message has suggestions)
    409 a step after the episode ended                    -> EpisodeOver
    409 a fork of a session whose env cannot fork         -> ForkUnsupported
    422 the env rejected the task or seed at reset        -> InvalidTask
    422 malformed request body                            -> InvalidRequest
    413 and any other 4xx                                 -> RequestRejected     (with the server's message)
`create_session` tries the next replica only after a `ServiceUnavailable` (when every replica failed so, it
raises one `ServiceUnavailable` naming each failure); a caller error would be refused by every replica alike,
so it is raised at once. An `InvalidTask` names the task's id and, for a task read by
`agentrl.tasks.load_tasks`, its file and line (`describe_task`), so a refused task points at the line to fix.

What this is not: a load balancer with active health checks, or an episode re-runner (re-running an
infrastructure failure is the trainer's decision).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus, WebSocketException

from agentrl.env.core import StepResult
from agentrl.errors import (
    AgentRLError,
    AuthError,
    ConfigError,
    EnvNotFound,
    InvalidTask,
    ServiceError,
    ServiceUnavailable,
    SessionNotFound,
)
from agentrl.tasks import describe_task
from agentrl.types import Action, ForkedSession, SessionStart
from agentrl.wire import (
    FRAME_BYTES,
    HTTP_ERROR,
    TOKEN_ENV,
    action_to_json,
    encode,
    error_class,
    error_of_reply,
    pack_frames,
    parse_error_body,
)

RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
Transport = Literal["http", "ws"]


@dataclass(frozen=True)
class ClientConfig:
    """How the client pools, retries and fails over.

    timeout_s:          per request; above the service's `step_timeout_s` so a slow step is reported by it
    max_connections:    pooled connections over all replicas (keep-alive connections are kept up to this)
    retries:            extra attempts of an idempotent call after the first
    backoff_s:          wait before the first retry; doubles each retry, up to `max_backoff_s`
    max_backoff_s:      longest backoff wait
    max_retry_after_s:  longest wait honoured from a Retry-After header
    down_for_s:         a replica that failed is tried last by `create_session` for this long
    transport:          the wire for sessions: "http" (one request per call) or "ws" (one multiplexed
                        WebSocket per replica; much faster, see the module docstring)
    ws_max_message_bytes: largest frame of replies accepted over "ws"
    rediscover_s:       with a `discover` callable (a Ray fleet), ask it for the live replicas at most this
                        often, and at once when no known replica can take a session
    fleet_wait_s:       with `discover`, how long `create_session` keeps asking (with backoff) while no
                        replica can take a session, e.g. while the fleet restarts the replicas of a lost node
    """

    timeout_s: float = 120.0
    max_connections: int = 256
    retries: int = 3
    backoff_s: float = 0.1
    max_backoff_s: float = 5.0
    max_retry_after_s: float = 30.0
    down_for_s: float = 5.0
    transport: Transport = "http"
    ws_max_message_bytes: int = 64 * 1024 * 1024
    rediscover_s: float = 10.0
    fleet_wait_s: float = 300.0


Discover = Callable[[], Awaitable[Sequence[str]]]
"""Returns the URLs of the replicas alive now (`agentrl.service.ray_fleet.RayReplicas.discover`)."""


@dataclass
class Replica:
    url: str
    down_until: float = 0.0
    """Monotonic time before which `create_session` tries this replica only after the others."""


class EnvClient:
    """Async client of the env service. Use `async with EnvClient(url_or_urls) as client:` or `aclose()`."""

    def __init__(
        self,
        base_url: str | Sequence[str],
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_s: float | None = None,
        token: str | None = None,
        config: ClientConfig | None = None,
        discover: Discover | None = None,
    ) -> None:
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise ConfigError("EnvClient needs at least one env service URL; set service.url or pass one")
        self.config = config or ClientConfig()
        if self.config.transport not in ("http", "ws"):
            raise ConfigError(f"unknown client transport {self.config.transport!r}; use 'http' or 'ws'")
        self.replicas = [Replica(url.rstrip("/")) for url in urls]
        self.base_url = self.replicas[0].url
        token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        limits = httpx.Limits(
            max_connections=self.config.max_connections, max_keepalive_connections=self.config.max_connections
        )
        self._timeout_s = timeout_s if timeout_s is not None else self.config.timeout_s
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            transport=transport,
            timeout=self._timeout_s,
            headers=headers,
            limits=limits,
        )
        self._headers = headers
        self._pinned: dict[str, Replica] = {}
        self._next = 0
        self._sockets: dict[str, WsConnection] = {}  # by replica url, over "ws"
        self._socket_locks: dict[str, asyncio.Lock] = {}
        self._session_sockets: dict[str, WsConnection] = {}  # the socket each session was created on
        self._discover = discover
        self._discovered_at = time.monotonic()

    async def __aenter__(self) -> EnvClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        sockets, self._sockets = list(self._sockets.values()), {}
        for socket in sockets:
            await socket.aclose()
        await self._http.aclose()

    async def create_session(self, env_id: str, task: Mapping[str, Any], seed: int) -> SessionStart:
        body = {"env_id": env_id, "task": dict(task), "seed": seed}
        failures: list[str] = []
        if time.monotonic() - self._discovered_at >= self.config.rediscover_s:
            await self._rediscover(failures)
        deadline = time.monotonic() + self.config.fleet_wait_s
        for attempt in itertools.count():
            failures = failures[-len(self.replicas) - 1 :]  # this round's, and what the fleet last said
            for replica in self._rotation():
                try:
                    data = await self._create_on(replica, body)
                except ServiceUnavailable as exc:
                    failures.append(str(exc))
                    continue
                except InvalidTask as exc:
                    raise InvalidTask(f"{exc}; the refused {describe_task(task)}: fix or remove it") from exc
                start = SessionStart(**data)
                self._pinned[start.session_id] = replica
                return start
            if self._discover is None or time.monotonic() >= deadline:
                break
            if attempt:  # the fleet's own list was tried too: wait for it to bring a replica back
                await asyncio.sleep(retry_delay(attempt - 1, None, self.config))
            await self._rediscover(failures)
        raise ServiceUnavailable(
            f"no env service replica could create a session ({len(failures)} tried): " + " | ".join(failures)
        )

    async def _create_on(self, replica: Replica, body: dict[str, Any]) -> Any:
        if self.config.transport == "http":
            return await self._call(replica, "POST", "/v1/sessions", body)
        socket = await self._socket(replica)
        data = await self._ws_call(replica, socket, "create", None, body)
        self._session_sockets[data["session_id"]] = socket
        return data

    async def step(self, session_id: str, action: Action) -> StepResult:
        replica = self._pinned.get(session_id, self.replicas[0])
        body = {"action": action_to_json(action)}
        if self.config.transport == "ws":
            socket = self._session_sockets.get(session_id) or await self._socket(replica)
            data = await self._ws_call(replica, socket, "step", session_id, body)
        else:
            data = await self._call(replica, "POST", f"/v1/sessions/{session_id}/step", body)
        return StepResult(**data)

    async def fork_session(self, session_id: str, n: int = 1) -> list[ForkedSession]:
        """n new sessions in the state of `session_id` (`Env.fork` on its replica, where they stay)."""
        replica = self._pinned.get(session_id, self.replicas[0])
        body = {"n": n}
        socket = None
        if self.config.transport == "ws":
            socket = self._session_sockets.get(session_id) or await self._socket(replica)
            data = await self._ws_call(replica, socket, "fork", session_id, body)
        else:
            data = await self._call(replica, "POST", f"/v1/sessions/{session_id}/fork", body)
        forks = [ForkedSession(**fork) for fork in data["sessions"]]
        for fork in forks:
            self._pinned[fork.session_id] = replica
            if socket is not None:
                self._session_sockets[fork.session_id] = socket
        return forks

    async def close_session(self, session_id: str) -> None:
        """Close a session; one that is already gone (closed, expired, lost with its socket) is fine."""
        replica = self._pinned.pop(session_id, self.replicas[0])
        socket = self._session_sockets.pop(session_id, None)
        if socket is not None:  # over "ws": the service closes a socket's sessions when the socket goes
            with contextlib.suppress(SessionNotFound):
                try:
                    await self._ws_call(replica, socket, "close", session_id, None)
                except ServiceUnavailable:
                    if socket.lost is None:
                        raise
            return
        try:
            await self._retrying([replica], "DELETE", f"/v1/sessions/{session_id}")
        except SessionNotFound:
            pass

    async def list_envs(self) -> list[dict[str, Any]]:
        body = await self._retrying(self._rotation(), "GET", "/v1/envs")
        envs: list[dict[str, Any]] = body["envs"]
        return envs

    async def health(self) -> bool:
        """True when at least one replica answers /healthz."""
        for replica in self.replicas:
            try:
                await self._retrying([replica], "GET", "/healthz")
                return True
            except ServiceError:
                continue
        return False

    async def _rediscover(self, failures: list[str]) -> bool:
        """Ask `discover` for the live replicas and use them from now on (sessions stay on theirs); False
        when there is nothing to ask or it failed (the reason goes to `failures`)."""
        if self._discover is None:
            return False
        self._discovered_at = time.monotonic()
        try:
            urls = [url.rstrip("/") for url in await self._discover()]
        except ServiceUnavailable as exc:
            failures.append(str(exc))
            return False
        if not urls:
            return False
        known = {replica.url: replica for replica in self.replicas}
        self.replicas = [known.get(url) or Replica(url) for url in urls]
        self._next %= len(self.replicas)
        return True

    def _rotation(self) -> list[Replica]:
        """Every replica once, starting after the last one used; those seen failing recently go last."""
        start, self._next = self._next, (self._next + 1) % len(self.replicas)
        ordered = self.replicas[start:] + self.replicas[:start]
        now = time.monotonic()
        return sorted(ordered, key=lambda replica: replica.down_until > now)  # stable: keeps the rotation

    async def _retrying(self, replicas: Sequence[Replica], method: str, path: str) -> Any:
        """An idempotent call, retried over `replicas` in turn with backoff or Retry-After."""
        for attempt in range(self.config.retries + 1):
            replica = replicas[attempt % len(replicas)]
            try:
                response = await self._send(replica, method, path)
            except ServiceUnavailable:
                if attempt == self.config.retries:
                    raise
                await asyncio.sleep(retry_delay(attempt, None, self.config))
                continue
            if response.status_code in RETRYABLE_STATUSES and attempt < self.config.retries:
                retry_after = parse_retry_after(response.headers.get("retry-after"))
                await asyncio.sleep(retry_delay(attempt, retry_after, self.config))
                continue
            return self._body(replica, response)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _socket(self, replica: Replica) -> WsConnection:
        """The replica's socket, opened on first use and again after it was lost."""
        socket = self._sockets.get(replica.url)
        if socket is not None and socket.lost is None:
            return socket
        async with self._socket_locks.setdefault(replica.url, asyncio.Lock()):
            socket = self._sockets.get(replica.url)
            if socket is None or socket.lost is not None:
                try:
                    socket = await WsConnection.open(replica.url, self._headers, self.config, self._timeout_s)
                except ServiceUnavailable:
                    self._mark_down(replica, None)
                    raise
                self._sockets[replica.url] = socket
        return socket

    async def _ws_call(
        self, replica: Replica, socket: WsConnection, op: str, session_id: str | None, body: Any
    ) -> Any:
        try:
            reply = await socket.request(op, session_id, body, self._timeout_s)
        except ServiceUnavailable:
            self._mark_down(replica, None)
            raise
        status = int(reply["status"])
        if status == 429:
            self._mark_down(replica, reply.get("retry_after"))
        if status >= 400:
            error = error_of_reply(reply)
            raise error_for(status, error.type, error.message, f"{op} over {socket.url}")
        return reply.get("body")

    async def _call(self, replica: Replica, method: str, path: str, json: Any = None) -> Any:
        return self._body(replica, await self._send(replica, method, path, json))

    async def _send(self, replica: Replica, method: str, path: str, json: Any = None) -> httpx.Response:
        try:
            return await self._http.request(method, replica.url + path, json=json)
        except httpx.TransportError as exc:
            self._mark_down(replica, None)
            raise ServiceUnavailable(
                f"env service at {replica.url} unreachable ({type(exc).__name__}: {exc}); is it running?"
            ) from exc

    def _body(self, replica: Replica, response: httpx.Response) -> Any:
        if response.status_code == 429:
            self._mark_down(replica, parse_retry_after(response.headers.get("retry-after")))
        if response.status_code >= 400:
            raise error_from_response(response)
        return response.json() if response.content else None

    def _mark_down(self, replica: Replica, for_s: float | None) -> None:
        replica.down_until = time.monotonic() + (for_s if for_s is not None else self.config.down_for_s)


def retry_delay(attempt: int, retry_after_s: float | None, config: ClientConfig) -> float:
    """Seconds to wait before retry number `attempt + 1`: the server's Retry-After if it sent one, else
    exponential backoff (`backoff_s * 2**attempt`); each capped by its maximum."""
    if retry_after_s is not None:
        return min(retry_after_s, config.max_retry_after_s)
    return min(config.backoff_s * 2**attempt, config.max_backoff_s)


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After in seconds; None when absent or an HTTP date (which the service never sends)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return max(seconds, 0.0)


def error_from_response(response: httpx.Response) -> AgentRLError:
    """The agentrl error for an error response of the service (see the table in the module docstring)."""
    error = parse_error_body(response.content, response.reason_phrase)
    return error_for(
        response.status_code, error.type, error.message, f"{response.request.method} {response.request.url}"
    )


def error_for(status: int, error_type: str, message: str, where: str) -> AgentRLError:
    """The agentrl error for an error status of the service, whichever wire carried it; its class is
    `agentrl.wire.error_class(status, error_type)`, its message the service's, with what to do next."""
    cls = error_class(status, error_type)
    if issubclass(cls, ServiceUnavailable):
        return cls(f"env service answered {status} to {where}: {error_type}: {message}")
    if cls is AuthError:
        return AuthError(
            f"env service refused {where} (401 {error_type}): {message}; set {TOKEN_ENV} "
            "(or EnvClient's token=) to the service's token"
        )
    if cls in (SessionNotFound, EnvNotFound):  # their messages already say what to do
        return cls(message)
    return cls(f"env service refused {where} ({status} {error_type}): {message}")


class WsConnection:
    """One WebSocket to one replica, carrying many requests at once, matched to their replies by id.

    Requests made while the writer is busy leave together in one frame. When the socket fails or closes,
    `lost` says why, every waiting request raises `ServiceUnavailable`, and so does every later one.
    """

    def __init__(self, socket: ClientConnection, url: str) -> None:
        self.socket = socket
        self.url = url
        self.lost: str | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._outbox: list[str] = []
        self._wake = asyncio.Event()
        self._ids = itertools.count()
        self._tasks = [asyncio.create_task(self._read_forever()), asyncio.create_task(self._write_forever())]

    @classmethod
    async def open(
        cls, base_url: str, headers: Mapping[str, str], config: ClientConfig, timeout_s: float
    ) -> WsConnection:
        url = ws_url(base_url)
        try:
            socket = await connect(
                url,
                additional_headers=dict(headers),
                compression=None,  # deflate costs more CPU than loopback bandwidth saves
                max_size=config.ws_max_message_bytes,
                open_timeout=timeout_s,
                # no client pings: the service pings us (ServiceSettings.ws_ping_*), and a training process
                # that holds its event loop (an update, IGPO's measurement) must not drop its own sessions
                ping_interval=None,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            error = parse_error_body(bytes(exc.response.body or b""), exc.response.reason_phrase)
            message = error.message
            if status == 404 and error.type == HTTP_ERROR:
                message += "; this replica serves no /v1/ws (an older version?): use transport 'http'"
            raise error_for(status, error.type, message, f"websocket handshake with {url}") from exc
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise ServiceUnavailable(
                f"env service at {base_url} unreachable ({type(exc).__name__}: {exc}); is it running?"
            ) from exc
        return cls(socket, base_url)

    async def request(self, op: str, session_id: str | None, body: Any, timeout_s: float) -> dict[str, Any]:
        if self.lost is not None:
            raise ServiceUnavailable(self._lost_message())
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self._outbox.append(encode({"id": request_id, "op": op, "session_id": session_id, "body": body}))
        self._wake.set()
        try:
            async with asyncio.timeout(timeout_s):
                return await future
        except TimeoutError:
            raise ServiceUnavailable(
                f"env service at {self.url} sent no reply to {op} within {timeout_s:g} s"
            ) from None
        finally:
            self._pending.pop(request_id, None)

    async def aclose(self) -> None:
        self._fail("closed by the client")
        with contextlib.suppress(Exception):
            await self.socket.close()

    async def _read_forever(self) -> None:
        try:
            async for frame in self.socket:
                for reply in json.loads(frame):
                    future = self._pending.pop(reply.get("id"), None)
                    if future is not None and not future.done():
                        future.set_result(reply)
            reason = "the service closed the connection"
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
        self._fail(reason)

    async def _write_forever(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                requests, self._outbox = self._outbox, []
                for frame in pack_frames(requests, FRAME_BYTES):
                    await self.socket.send(frame)
        except Exception as exc:
            self._fail(f"{type(exc).__name__}: {exc}")

    def _fail(self, reason: str) -> None:
        if self.lost is not None:
            return
        self.lost = reason
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(ServiceUnavailable(self._lost_message()))
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()

    def _lost_message(self) -> str:
        return (
            f"the connection to the env service at {self.url} was lost ({self.lost}); "
            "the sessions it carried are gone"
        )


def ws_url(base_url: str) -> str:
    """The WebSocket URL of a replica's `/v1/ws` from its HTTP base URL."""
    scheme, rest = base_url.split("://", 1)
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest.rstrip('/')}/v1/ws"

"""`EnvClient`: the async HTTP client of the env service, spread over one or more replicas.

What this is: one pooled `httpx.AsyncClient` speaking the HTTP contract of DESIGN.md, converting to and from
the core types (`Action` in, `StepResult` out). The transport is injectable, so tests run the real app
in-process with `httpx.ASGITransport(app)`. Every request carries `Authorization: Bearer <token>` when a
token is given or set in AGENTRL_SERVICE_TOKEN.

Replicas: `EnvClient([url_a, url_b])`. `create_session` goes round robin to the next replica not recently
seen failing, and on an unreachable, full or failing replica tries the next one; a session then stays
pinned to the replica that created it, because only that replica holds its env. If that replica dies,
`step` raises `ServiceUnavailable` and the runner ends the episode as an infrastructure failure
(`stop_reason="infra_error"`); the next episode's `create_session` lands on a live replica.

Retries: only idempotent calls (`health`, `list_envs`, `close_session`) are retried, a bounded number of
times with exponential backoff, on connection errors and 429/502/503/504, waiting Retry-After when the
service sends it. `create_session` tries each replica once without waiting (a replica that refused, or
could not be reached, created nothing; one that died mid-request leaves an orphan its idle reaper closes).
`step` is never retried: it is not idempotent.

Errors, by what the caller should do:
    connection error, 5xx, 429 full (on every replica)    -> ServiceUnavailable  (infra; retry elsewhere)
    404 for a session                                     -> SessionNotFound
    404 for an env id                                     -> EnvNotFound         (message has suggestions)
    401 missing or wrong token                            -> ServiceError        (set AGENTRL_SERVICE_TOKEN)
    any other 4xx                                         -> ServiceError        (with the server's message)

What this is not: a load balancer with active health checks, or an episode re-runner (re-running an
infrastructure failure is the trainer's decision).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx

from agentrl.env.core import StepResult
from agentrl.errors import AgentRLError, EnvNotFound, ServiceError, ServiceUnavailable, SessionNotFound
from agentrl.service.settings import TOKEN_ENV
from agentrl.types import Action, SessionStart

RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})


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
    """

    timeout_s: float = 120.0
    max_connections: int = 256
    retries: int = 3
    backoff_s: float = 0.1
    max_backoff_s: float = 5.0
    max_retry_after_s: float = 30.0
    down_for_s: float = 5.0


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
    ) -> None:
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise ServiceError("EnvClient needs at least one env service URL")
        self.config = config or ClientConfig()
        self.replicas = [Replica(url.rstrip("/")) for url in urls]
        self.base_url = self.replicas[0].url
        token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        limits = httpx.Limits(
            max_connections=self.config.max_connections, max_keepalive_connections=self.config.max_connections
        )
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            transport=transport,
            timeout=timeout_s if timeout_s is not None else self.config.timeout_s,
            headers=headers,
            limits=limits,
        )
        self._pinned: dict[str, Replica] = {}
        self._next = 0

    async def __aenter__(self) -> EnvClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def create_session(self, env_id: str, task: Mapping[str, Any], seed: int) -> SessionStart:
        body = {"env_id": env_id, "task": dict(task), "seed": seed}
        failures: list[str] = []
        for replica in self._rotation():
            try:
                data = await self._call(replica, "POST", "/v1/sessions", body)
            except ServiceUnavailable as exc:
                failures.append(str(exc))
                continue
            start = SessionStart(**data)
            self._pinned[start.session_id] = replica
            return start
        raise ServiceUnavailable(
            f"no env service replica could create a session ({len(failures)} tried): " + " | ".join(failures)
        )

    async def step(self, session_id: str, action: Action) -> StepResult:
        replica = self._pinned.get(session_id, self.replicas[0])
        path = f"/v1/sessions/{session_id}/step"
        body = await self._call(replica, "POST", path, {"action": action_to_json(action)})
        return StepResult(**body)

    async def close_session(self, session_id: str) -> None:
        """Close a session; one that is already gone (closed, expired) is fine."""
        replica = self._pinned.pop(session_id, self.replicas[0])
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


def action_to_json(action: Action) -> dict[str, Any]:
    calls = [{"name": call.name, "arguments": dict(call.arguments)} for call in action.tool_calls]
    return {"text": action.text, "tool_calls": calls, "parse_error": action.parse_error}


def error_from_response(response: httpx.Response) -> AgentRLError:
    """The agentrl error for an error response of the service (see the table in the module docstring)."""
    error_type, message = _error_body(response)
    where = f"{response.request.method} {response.request.url}"
    status = response.status_code
    if status >= 500 or status == 429:
        return ServiceUnavailable(f"env service answered {status} to {where}: {error_type}: {message}")
    if status == 404 and error_type == "SessionNotFound":
        return SessionNotFound(message)
    if status == 404 and error_type == "EnvNotFound":
        return EnvNotFound(message)
    if status == 401:
        return ServiceError(
            f"env service refused {where} (401): {message}; set {TOKEN_ENV} to the service's token"
        )
    return ServiceError(f"env service refused {where} ({status} {error_type}): {message}")


def _error_body(response: httpx.Response) -> tuple[str, str]:
    try:
        error = response.json()["error"]
        return str(error["type"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        return "HTTPError", response.text[:500] or response.reason_phrase

"""`EnvClient`: the async HTTP client of the env service.

What this is: one `httpx.AsyncClient` speaking the HTTP contract of DESIGN.md, converting to and from the
core types (`Action` in, `StepResult` out). The transport is injectable, so tests run the real app
in-process with `httpx.ASGITransport(app)`.

Errors, by what the caller should do:
    connection error, 5xx, 503 sandbox failure, 429 full  -> ServiceUnavailable  (infra; retry elsewhere)
    404 for a session                                     -> SessionNotFound
    404 for an env id                                     -> EnvNotFound         (message has suggestions)
    any other 4xx                                         -> ServiceError        (with the server's message)

What this is not: resilient yet. There are no retries and no replica failover (a later issue adds them);
a step is never retried because it is not idempotent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx

from agentrl.env.core import StepResult
from agentrl.errors import AgentRLError, EnvNotFound, ServiceError, ServiceUnavailable, SessionNotFound
from agentrl.types import Action


@dataclass(frozen=True)
class SessionStart:
    """What creating a session returns: its id, the first observation and what to show the model."""

    session_id: str
    observation: str
    info: dict[str, Any]
    tools: list[dict[str, Any]]
    examples: list[dict[str, Any]]


class EnvClient:
    """Async client of one env service. Use `async with EnvClient(url) as client:` or call `aclose()`."""

    def __init__(
        self, base_url: str, *, transport: httpx.AsyncBaseTransport | None = None, timeout_s: float = 120.0
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.base_url, transport=transport, timeout=timeout_s)

    async def __aenter__(self) -> EnvClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def create_session(self, env_id: str, task: Mapping[str, Any], seed: int) -> SessionStart:
        body = await self._request(
            "POST", "/v1/sessions", json={"env_id": env_id, "task": dict(task), "seed": seed}
        )
        return SessionStart(**body)

    async def step(self, session_id: str, action: Action) -> StepResult:
        body = await self._request(
            "POST", f"/v1/sessions/{session_id}/step", json={"action": action_to_json(action)}
        )
        return StepResult(**body)

    async def close_session(self, session_id: str) -> None:
        """Close a session; one that is already gone (closed, expired) is fine."""
        try:
            await self._request("DELETE", f"/v1/sessions/{session_id}")
        except SessionNotFound:
            pass

    async def list_envs(self) -> list[dict[str, Any]]:
        body = await self._request("GET", "/v1/envs")
        envs: list[dict[str, Any]] = body["envs"]
        return envs

    async def health(self) -> bool:
        try:
            response = await self._http.get("/healthz")
        except httpx.TransportError:
            return False
        return response.status_code == 200

    async def _request(self, method: str, path: str, json: Any = None) -> Any:
        try:
            response = await self._http.request(method, path, json=json)
        except httpx.TransportError as exc:
            raise ServiceUnavailable(
                f"env service at {self.base_url} unreachable ({type(exc).__name__}: {exc}); is it running?"
            ) from exc
        if response.status_code >= 400:
            raise error_from_response(response)
        return response.json() if response.content else None


def action_to_json(action: Action) -> dict[str, Any]:
    calls = [{"name": call.name, "arguments": dict(call.arguments)} for call in action.tool_calls]
    return {"text": action.text, "tool_calls": calls, "parse_error": action.parse_error}


def error_from_response(response: httpx.Response) -> AgentRLError:
    """The agentrl error for an error response of the service (see the table in the module docstring)."""
    error_type, message = _error_body(response)
    where = f"{response.request.method} {response.request.url.path}"
    status = response.status_code
    if status >= 500 or status == 429:
        return ServiceUnavailable(f"env service answered {status} to {where}: {error_type}: {message}")
    if status == 404 and error_type == "SessionNotFound":
        return SessionNotFound(message)
    if status == 404 and error_type == "EnvNotFound":
        return EnvNotFound(message)
    return ServiceError(f"env service refused {where} ({status} {error_type}): {message}")


def _error_body(response: httpx.Response) -> tuple[str, str]:
    try:
        error = response.json()["error"]
        return str(error["type"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        return "HTTPError", response.text[:500] or response.reason_phrase

"""The wire format the env client and the env service share: what crosses the boundary, and how errors keep
their meaning on the way.

What this is: plain functions and constants that both `agentrl.client` and `agentrl.service` import, so the
two sides cannot drift apart:
- `action_to_json` / `action_from_json`: the agent's `Action` as the JSON body of a step;
- `error_body` / `parse_error_body` / `error_of_reply`: the one error body, `{"error": {"type", "message"}}`;
- `STATUS_OF_ERROR` and `status_of`: which HTTP status each agentrl error leaves the service with, and
  `error_class`: which agentrl error a status and type name become again in the client (the reverse);
- the WebSocket framing: `FRAME_BYTES`, `encode`, `pack_frames`;
- `TOKEN_ENV`: the environment variable holding the bearer token.

Error types on the wire are agentrl exception class names (`AuthError`, `SessionNotFound`, `InvalidTask`,
`SandboxLost`, ...), plus three that name no class: `REQUEST_TOO_LARGE` (413), `HTTP_ERROR` (a status the
framework answered, e.g. an unknown route) and `INTERNAL_ERROR` (500, a bug in the service).

What this is not: HTTP or WebSocket code. It imports neither FastAPI, pydantic, starlette nor anything under
`agentrl.service`, so importing the client never pulls in the server.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentrl.errors import (
    AgentRLError,
    AuthError,
    EnvNotFound,
    EpisodeOver,
    ForkUnsupported,
    InvalidRequest,
    InvalidTask,
    RequestRejected,
    SandboxError,
    ServiceUnavailable,
    SessionLimitReached,
    SessionNotFound,
    StepTimedOut,
)
from agentrl.types import Action, ToolCall

TOKEN_ENV = "AGENTRL_SERVICE_TOKEN"
"""The environment variable holding the bearer token, read by the service and by `agentrl.client`."""

FRAME_BYTES = 256 * 1024
"""WebSocket messages are packed into frames of about this size (a larger message gets a frame of its own)."""

STATUS_OF_ERROR: Mapping[type[AgentRLError], int] = {
    RequestRejected: 400,
    AuthError: 401,
    EnvNotFound: 404,
    SessionNotFound: 404,
    EpisodeOver: 409,
    ForkUnsupported: 409,
    InvalidTask: 422,
    InvalidRequest: 422,
    SessionLimitReached: 429,
    SandboxError: 503,
    ServiceUnavailable: 503,
    StepTimedOut: 504,
}
"""The status of each agentrl error the service sends on purpose (a subclass takes its nearest base's);
any other error is a bug and leaves as 500."""

REQUEST_TOO_LARGE = "RequestTooLarge"
"""The type of a 413: the body or WebSocket frame is over the service's `max_body_bytes`."""
HTTP_ERROR = "HTTPError"
"""The type of a status the web framework answered itself (an unknown route or method), or of a body that
is not ours (a proxy's page)."""
INTERNAL_ERROR = "InternalError"
"""The type of a 500: a bug in the service; its log has the traceback."""

RETRY_AFTER_STATUSES = frozenset({429, 503})
"""Statuses the service sends with a Retry-After (its `retry_after_s`)."""

_NAMED_BY_CLIENT: Mapping[str, type[AgentRLError]] = {
    cls.__name__: cls for cls in STATUS_OF_ERROR if not issubclass(cls, SandboxError)
}
"""Type names the client turns back into their own class; a sandbox failure is the service's, and reaches
the client as `ServiceUnavailable`."""

_CLASS_OF_STATUS: Mapping[int, type[AgentRLError]] = {401: AuthError, 409: EpisodeOver, 422: InvalidRequest}
"""The class of a status whose type name is not one of ours (a proxy's page, an older service)."""


@dataclass(frozen=True)
class WireError:
    """An error as it travels: the type name and the service's message."""

    type: str
    message: str


def action_to_json(action: Action) -> dict[str, Any]:
    calls = [{"name": call.name, "arguments": dict(call.arguments)} for call in action.tool_calls]
    return {"text": action.text, "tool_calls": calls, "parse_error": action.parse_error}


def action_from_json(data: Mapping[str, Any]) -> Action:
    """The inverse of `action_to_json`, for a body the service has already validated."""
    calls = tuple(
        ToolCall(name=call["name"], arguments=call.get("arguments") or {})
        for call in data.get("tool_calls", ())
    )
    return Action(text=data["text"], tool_calls=calls, parse_error=data.get("parse_error"))


def error_body(type_: str, message: str) -> dict[str, Any]:
    return {"error": {"type": type_, "message": message}}


def parse_error_body(raw: bytes | str, fallback_message: str = "") -> WireError:
    """The error a response body carries; a body that is not ours (a proxy's page, an empty 502) becomes
    type "HTTPError" with the start of its text, or `fallback_message` when it is empty."""
    try:
        return error_of_reply(json.loads(raw), strict=True)
    except (ValueError, KeyError, TypeError):
        text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        return WireError(HTTP_ERROR, text[:500] or fallback_message)


def error_of_reply(reply: Any, strict: bool = False) -> WireError:
    """The error of a parsed body or WebSocket reply (`{"error": {...}, ...}`); with `strict`, a reply
    without one raises KeyError or TypeError instead of giving type "HTTPError"."""
    if strict:
        error = reply["error"]
        return WireError(str(error["type"]), str(error["message"]))
    error = reply.get("error") if isinstance(reply, Mapping) else None
    error = error if isinstance(error, Mapping) else {}
    return WireError(str(error.get("type", HTTP_ERROR)), str(error.get("message", "")))


def status_of(exc: AgentRLError) -> int:
    """The status the service answers `exc` with: that of its nearest class in `STATUS_OF_ERROR`, else 500."""
    for cls in type(exc).__mro__:
        if cls in STATUS_OF_ERROR:
            return STATUS_OF_ERROR[cls]
    return 500


def error_class(status: int, error_type: str) -> type[AgentRLError]:
    """The agentrl error class the client raises for an error status and type name (the reverse of
    `status_of`): 5xx and 429 are `ServiceUnavailable` (or its subclass the type names), the rest are the
    caller's mistake, a `RequestRejected` (or `EnvNotFound`)."""
    named = _NAMED_BY_CLIENT.get(error_type)
    if named is not None and STATUS_OF_ERROR[named] == status:
        return named
    if status >= 500 or status == 429:
        return ServiceUnavailable
    return _CLASS_OF_STATUS.get(status, RequestRejected)


def encode(message: Any, default: Callable[[Any], Any] | None = None) -> str:
    """Compact JSON; `default` converts what JSON cannot hold (the service passes pydantic's converter for
    numpy numbers in an env's info)."""
    return json.dumps(message, separators=(",", ":"), default=default)


def pack_frames(encoded: list[str], limit: int) -> list[str]:
    """JSON-encoded messages packed, in order, into as few JSON-list frames of at most ~`limit` characters
    as fit (a message longer than `limit` gets a frame of its own)."""
    frames: list[str] = []
    current: list[str] = []
    size = 0
    for message in encoded:
        if current and size + len(message) + 1 > limit:
            frames.append("[" + ",".join(current) + "]")
            current, size = [], 0
        current.append(message)
        size += len(message) + 1
    if current:
        frames.append("[" + ",".join(current) + "]")
    return frames

"""Request guards of the env service, as plain ASGI middleware: bearer-token auth and a body size limit.

What this is: `ProtectionMiddleware`, which runs before routing and answers with the service's JSON error
body itself: 401 (type "AuthError", with `WWW-Authenticate: Bearer`) when a token is configured and the
request lacks it or carries another one (the WebSocket route checks its handshake with `authorised` and
answers the same); 413 (type "RequestTooLarge") when the declared Content-Length exceeds the limit. A body
sent without a length (chunked) is counted while it is read and `BodyTooLarge` is raised once it crosses the
limit; the app's error handler turns that into the same 413. Plain ASGI rather than Starlette's
`BaseHTTPMiddleware`, which costs a task and a stream copy per request.

What this is not: rate limiting or TLS. `/healthz` needs no token so load balancers and compose
healthchecks can probe it; it reveals only a session count.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentrl.errors import AuthError
from agentrl.wire import REQUEST_TOO_LARGE, TOKEN_ENV, error_body

OPEN_PATHS = frozenset({"/healthz"})
"""Paths answered without a token."""

AUTH_ERROR = AuthError.__name__
"""The error type of a 401, which the client turns back into `AuthError`."""
AUTH_HEADERS = {"www-authenticate": "Bearer"}
UNAUTHORISED_MESSAGE = (
    "missing or wrong bearer token; send `Authorization: Bearer <token>` "
    f"(the client reads it from {TOKEN_ENV})"
)


class BodyTooLarge(StarletteHTTPException):
    """A request body without Content-Length grew past the limit while it was read (HTTP 413).

    A Starlette HTTPException rather than an agentrl error because FastAPI turns anything else raised
    while it reads a body into a 400."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, too_large_message(limit))


def too_large_message(limit: int) -> str:
    return f"request body larger than the service's limit of {limit} bytes (max_body_bytes)"


class ProtectionMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        max_body_bytes: int,
        on_reject: Callable[[str, int], None] = lambda type_, status: None,
    ) -> None:
        self.app = app
        self.on_reject = on_reject
        self.expected = expected_header(token)
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if scope["path"] not in OPEN_PATHS and not authorised(
            headers.get(b"authorization", b""), self.expected
        ):
            self.on_reject(AUTH_ERROR, 401)
            await send_error(send, 401, AUTH_ERROR, UNAUTHORISED_MESSAGE, AUTH_HEADERS)
            return
        declared = declared_length(headers.get(b"content-length"))
        if declared is not None and declared > self.max_body_bytes:
            self.on_reject(REQUEST_TOO_LARGE, 413)
            await send_error(send, 413, REQUEST_TOO_LARGE, too_large_message(self.max_body_bytes))
            return
        await self.app(scope, counting_receive(receive, self.max_body_bytes), send)


def expected_header(token: str | None) -> bytes | None:
    """The Authorization header a request must carry; None when no token is configured."""
    return f"Bearer {token}".encode() if token else None


def authorised(header: bytes, expected: bytes | None) -> bool:
    """True when no token is configured or `header` is the expected one (compared in constant time)."""
    return expected is None or hmac.compare_digest(header, expected)


def declared_length(value: bytes | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def counting_receive(receive: Receive, limit: int) -> Receive:
    received = 0

    async def wrapped() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise BodyTooLarge(limit)
        return message

    return wrapped


async def send_error(
    send: Send, status: int, type_: str, message: str, extra_headers: dict[str, str] | None = None
) -> None:
    body = json.dumps(error_body(type_, message)).encode()
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    headers += [(key.encode(), value.encode()) for key, value in (extra_headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

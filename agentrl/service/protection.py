"""Request guards of the env service, as plain ASGI middleware: bearer-token auth and a body size limit.

What this is: `ProtectionMiddleware`, which runs before routing and answers with the service's JSON error
body itself: 401 (type "Unauthorized", with `WWW-Authenticate: Bearer`) when a token is configured and the
request lacks it; 413 (type "RequestTooLarge") when the declared Content-Length exceeds the limit. A body
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

OPEN_PATHS = frozenset({"/healthz"})
"""Paths answered without a token."""


class BodyTooLarge(StarletteHTTPException):
    """A request body without Content-Length grew past the limit while it was read (HTTP 413)."""

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
        self.expected = f"Bearer {token}".encode() if token else None
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if self.expected is not None and scope["path"] not in OPEN_PATHS:
            if not hmac.compare_digest(headers.get(b"authorization", b""), self.expected):
                message = (
                    "missing or wrong bearer token; send `Authorization: Bearer <token>` "
                    "(the client reads it from AGENTRL_SERVICE_TOKEN)"
                )
                self.on_reject("Unauthorized", 401)
                await send_error(send, 401, "Unauthorized", message, {"www-authenticate": "Bearer"})
                return
        declared = declared_length(headers.get(b"content-length"))
        if declared is not None and declared > self.max_body_bytes:
            self.on_reject("RequestTooLarge", 413)
            await send_error(send, 413, "RequestTooLarge", too_large_message(self.max_body_bytes))
            return
        await self.app(scope, counting_receive(receive, self.max_body_bytes), send)


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
    body = json.dumps({"error": {"type": type_, "message": message}}).encode()
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    headers += [(key.encode(), value.encode()) for key, value in (extra_headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

"""WebSocket /v1/ws: the throughput wire. One socket per client carries all of its sessions.

Protocol. The handshake carries the bearer token like any HTTP request (401 before the upgrade when it is
missing or wrong). After it, every frame in either direction is a JSON list. The client sends requests
(`schemas.WsRequest`):

    {"id": 7, "op": "create", "body": {"env_id": "...", "task": {...}, "seed": 0}}
    {"id": 8, "op": "step", "session_id": "...", "body": {"action": {...}}}
    {"id": 10, "op": "fork", "session_id": "...", "body": {"n": 2}}
    {"id": 9, "op": "close", "session_id": "..."}

and the service answers each, in whatever order they finish, with the status and body the same request
gets over HTTP (statuses and error `type` names as in `agentrl/service/app.py`, from `agentrl.wire`):

    {"id": 7, "status": 201, "body": {...CreateSessionResponse...}}
    {"id": 8, "status": 404, "error": {"type": "SessionNotFound", "message": "..."}}
    {"id": 9, "status": 429, "error": {...}, "retry_after": 5}

Requests run concurrently (the steps of one session are still serialised by `SessionManager`). Replies that
finish together leave in one frame, so under load one frame carries many steps: the batching a batch
endpoint would give, without anyone waiting for a batch to fill. A reply without a usable request id has
`"id": null` (the frame was not JSON, or an item had no integer id). The framing (`encode`, `pack_frames`,
`FRAME_BYTES`) is `agentrl.wire`'s, shared with the client.

Sessions created or forked over a socket belong to it: when the socket closes, the service closes them once
their in-flight requests finish. A lost socket is an infrastructure failure for the sessions it carried.

What this is not: a second API. There is no env listing or health here (use HTTP); a frame larger
than `max_body_bytes` is still parsed (uvicorn caps frames at 16 MiB) and each request in it gets 413.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, WebSocket
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from pydantic_core import to_jsonable_python

from agentrl.errors import AgentRLError, InvalidRequest, SessionNotFound
from agentrl.service.metrics import ServiceMetrics
from agentrl.service.protection import (
    AUTH_ERROR,
    AUTH_HEADERS,
    UNAUTHORISED_MESSAGE,
    authorised,
    expected_header,
)
from agentrl.service.schemas import (
    CreateSessionRequest,
    ForkRequest,
    StepRequest,
    WsRequest,
    describe_problems,
)
from agentrl.service.sessions import SessionManager
from agentrl.service.settings import ServiceSettings
from agentrl.wire import (
    FRAME_BYTES,
    INTERNAL_ERROR,
    REQUEST_TOO_LARGE,
    RETRY_AFTER_STATUSES,
    encode,
    error_body,
    pack_frames,
    status_of,
)

log = logging.getLogger(__name__)

router = APIRouter()

INVALID_REQUEST = InvalidRequest.__name__

encode_reply = functools.partial(encode, default=to_jsonable_python)
"""`agentrl.wire.encode` that also sends what JSON cannot hold (numpy numbers in an env's info) as pydantic
would."""


@router.websocket("/v1/ws")
async def sessions_socket(websocket: WebSocket) -> None:
    settings: ServiceSettings = websocket.app.state.settings
    metrics: ServiceMetrics = websocket.app.state.metrics
    header = websocket.headers.get("authorization", "").encode()
    if not authorised(header, expected_header(settings.token)):
        metrics.errors[(AUTH_ERROR, 401)] += 1
        denial = JSONResponse(error_body(AUTH_ERROR, UNAUTHORISED_MESSAGE), 401, headers=AUTH_HEADERS)
        await websocket.send_denial_response(denial)
        return
    await websocket.accept()

    def reply_error(request_id: int | None, status: int, type_: str, message: str) -> dict[str, Any]:
        metrics.errors[(type_, status)] += 1
        reply: dict[str, Any] = {"id": request_id, "status": status, **error_body(type_, message)}
        if status in RETRY_AFTER_STATUSES:
            reply["retry_after"] = settings.retry_after_s
        return reply

    socket = SessionSocket(websocket, websocket.app.state.sessions, settings, reply_error)
    await socket.serve()


class SessionSocket:
    """One accepted socket: reads frames, runs their requests as tasks, writes the replies in frames."""

    def __init__(
        self,
        websocket: WebSocket,
        manager: SessionManager,
        settings: ServiceSettings,
        reply_error: Callable[[int | None, int, str, str], dict[str, Any]],
    ) -> None:
        self.websocket = websocket
        self.manager = manager
        self.max_frame_bytes = settings.max_body_bytes
        self.reply_error = reply_error
        self.owned: set[str] = set()  # sessions created here: closed with the socket
        self.gone = False
        self._running: set[asyncio.Task[None]] = set()
        self._outbox: list[str] = []
        self._wake = asyncio.Event()

    async def serve(self) -> None:
        writer = asyncio.create_task(self._write_forever())
        try:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                self._dispatch(message.get("text") or message.get("bytes") or b"")
        finally:
            self.gone = True
            writer.cancel()
            if self._running:  # let them finish: a cancelled create would leak its env
                await asyncio.wait(set(self._running))
            for session_id in list(self.owned):
                with contextlib.suppress(SessionNotFound):
                    await self.manager.close(session_id)

    def _dispatch(self, frame: str | bytes) -> None:
        too_large = len(frame) > self.max_frame_bytes
        try:
            items = json.loads(frame)
        except ValueError as exc:
            self._send(
                self.reply_error(None, 422, INVALID_REQUEST, f"invalid request: frame is not JSON: {exc}")
            )
            return
        if not isinstance(items, list):
            self._send(
                self.reply_error(None, 422, INVALID_REQUEST, "invalid request: a frame is a JSON list")
            )
            return
        for item in items:
            task = asyncio.create_task(self._answer(item, too_large))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _answer(self, item: Any, too_large: bool) -> None:
        request_id = item.get("id") if isinstance(item, dict) else None
        request_id = request_id if isinstance(request_id, int) and not isinstance(request_id, bool) else None
        try:
            if too_large:
                reply = self.reply_error(
                    request_id,
                    413,
                    REQUEST_TOO_LARGE,
                    f"frame larger than the service's limit of {self.max_frame_bytes} bytes (max_body_bytes)",
                )
            else:
                request = WsRequest.model_validate(item)
                status, body = await self._run(request)
                reply = {"id": request.id, "status": status, "body": body}
            encoded = encode_reply(reply)
        except AgentRLError as exc:
            encoded = encode_reply(self.reply_error(request_id, status_of(exc), type(exc).__name__, str(exc)))
        except ValidationError as exc:
            message = f"invalid request: {describe_problems(exc.errors())}"
            encoded = encode_reply(self.reply_error(request_id, 422, INVALID_REQUEST, message))
        except Exception as exc:
            log.exception("websocket request %r crashed", request_id)
            message = f"{type(exc).__name__}: {exc}; see the service log"
            encoded = encode_reply(self.reply_error(request_id, 500, INTERNAL_ERROR, message))
        self._outbox.append(encoded)
        self._wake.set()

    async def _run(self, request: WsRequest) -> tuple[int, Any]:
        if request.op == "create":
            create = CreateSessionRequest.model_validate(request.body or {})
            start = await self.manager.create(create.env_id, create.task, create.seed)
            if self.gone:  # the socket closed while the env was being made: nobody will use it
                await self.manager.close(start.session_id)
            else:
                self.owned.add(start.session_id)
            return 201, asdict(start)
        session_id = required_session_id(request)
        if request.op == "step":
            step = StepRequest.model_validate(request.body or {})
            result = await self.manager.step(session_id, step.action.to_action())
            return 200, result._asdict()
        if request.op == "fork":
            return 201, {
                "sessions": await self._fork(session_id, ForkRequest.model_validate(request.body or {}))
            }
        self.owned.discard(session_id)
        await self.manager.close(session_id)
        return 204, None

    async def _fork(self, session_id: str, request: ForkRequest) -> list[dict[str, Any]]:
        forks = await self.manager.fork(session_id, request.n)
        for fork in forks:
            if self.gone:  # as for create: nobody is left to use them
                await self.manager.close(fork.session_id)
            else:
                self.owned.add(fork.session_id)
        return [asdict(fork) for fork in forks]

    def _send(self, reply: dict[str, Any]) -> None:
        self._outbox.append(encode_reply(reply))
        self._wake.set()

    async def _write_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            replies, self._outbox = self._outbox, []
            for frame in pack_frames(replies, FRAME_BYTES):
                await self.websocket.send_text(frame)


def required_session_id(request: WsRequest) -> str:
    if not request.session_id:
        raise InvalidRequest(f"invalid request: op {request.op!r} needs a session_id")
    return request.session_id

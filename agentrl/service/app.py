"""The FastAPI app factory of the env service, and the one place errors become HTTP statuses.

What this is: `create_app(settings)`: imports the `preload` modules, mounts the routers, and owns the
`SessionManager` through the lifespan (the idle reaper and the orphan reaper run while the app runs; shutdown
closes every session and warm pool: `agentrl.service.cleanup`). Every error leaves as
`{"error": {"type", "message"}}` (`agentrl.wire.error_body`); `type` is the agentrl exception class name (or
one of the wire's three names for errors without a class), which is what `agentrl.client` branches on. The
status of each class is `agentrl.wire.STATUS_OF_ERROR`, shared with the client, which turns the pair back into
the same class.

Protection (`agentrl.service.protection`) wraps the app: bearer token when `settings.token` is set, body
size limit. Every error response is counted in `ServiceMetrics` by type and status (GET /metrics).

What this is not: a place for logic: handlers call `SessionManager` and `agentrl.env`.

Status mapping (status, type):
    missing or wrong token                      401 AuthError (from the protection middleware, or the
                                                    WebSocket handshake)
    unknown env / session                       404 EnvNotFound / SessionNotFound
    step after the episode ended                409 EpisodeOver
    body over `max_body_bytes`                  413 RequestTooLarge
    env rejected the task at reset              422 InvalidTask
    invalid request body                        422 InvalidRequest
    service full                                429 SessionLimitReached, with Retry-After
    sandbox failure                             503 SandboxLost, SandboxUnavailable, ... (the class name),
                                                    with Retry-After: infrastructure, not the agent's fault
    step over `step_timeout_s`                  504 StepTimedOut
    another caller error / unavailability       400 / 503 its class name (a RequestRejected / a
                                                    ServiceUnavailable; none is raised today)
    unknown route or method                     404 / 405 HTTPError
    anything else                               500 InternalError, or the class name of another agentrl
                                                    error (a bug: no request should reach it)
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import AsyncIterator, Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentrl.errors import AgentRLError, EnvPluginError, InvalidRequest, SessionNotFound
from agentrl.service.cleanup import close_sessions_and_sandboxes, reap_orphans_forever
from agentrl.service.metrics import ServiceMetrics
from agentrl.service.protection import BodyTooLarge, ProtectionMiddleware
from agentrl.service.routers import envs, health, metrics, sessions, ws
from agentrl.service.routers.sessions import TREE_SESSIONS_HEADER
from agentrl.service.schemas import describe_problems
from agentrl.service.sessions import SessionManager
from agentrl.service.settings import ServiceSettings
from agentrl.wire import (
    HTTP_ERROR,
    INTERNAL_ERROR,
    REQUEST_TOO_LARGE,
    RETRY_AFTER_STATUSES,
    error_body,
    status_of,
)

log = logging.getLogger(__name__)


def create_app(settings: ServiceSettings | None = None) -> FastAPI:
    settings = settings or ServiceSettings()
    preload_modules(settings.preload)
    service_metrics = ServiceMetrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        manager = SessionManager(settings, service_metrics)
        app.state.sessions = manager
        background = [asyncio.create_task(manager.reap_forever())]
        if settings.orphan_reap_interval_s > 0:
            background.append(asyncio.create_task(reap_orphans_forever(settings, service_metrics)))
        try:
            yield
        finally:
            for task in background:
                task.cancel()
            await close_sessions_and_sandboxes(manager, settings, service_metrics)

    app = FastAPI(title="agentrl env service", version="1", lifespan=lifespan)
    app.state.settings = settings
    app.state.metrics = service_metrics
    for router in (health.router, envs.router, sessions.router, metrics.router, ws.router):
        app.include_router(router)
    _add_error_handlers(app, settings, service_metrics)
    app.add_middleware(
        ProtectionMiddleware,
        token=settings.token,
        max_body_bytes=settings.max_body_bytes,
        on_reject=lambda type_, status: service_metrics.errors.update([(type_, status)]),
    )
    return app


def preload_modules(modules: tuple[str, ...]) -> None:
    """Import modules whose import registers envs; a failure names the module."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise EnvPluginError(
                f"preloading {module!r} failed: {exc!r}; check the module name and that it is on the path"
            ) from exc


def error_response(
    status: int, type_: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(error_body(type_, message), status_code=status, headers=dict(headers or {}))


def _tree_header(request: Request, exc: AgentRLError) -> dict[str, str]:
    """A 404 for a session says how many of its fork tree still live here (the balancer's cue to forget the
    tree's route, as after a DELETE; see `agentrl.service.routers.sessions`)."""
    session_id = request.path_params.get("session_id")
    if not isinstance(exc, SessionNotFound) or not isinstance(session_id, str):
        return {}
    return {TREE_SESSIONS_HEADER: str(request.app.state.sessions.tree_size(session_id))}


def _add_error_handlers(app: FastAPI, settings: ServiceSettings, service_metrics: ServiceMetrics) -> None:
    def respond(
        status: int, type_: str, message: str, headers: Mapping[str, str] | None = None
    ) -> JSONResponse:
        service_metrics.errors[(type_, status)] += 1
        if status in RETRY_AFTER_STATUSES:
            headers = {**(headers or {}), "Retry-After": str(settings.retry_after_s)}
        return error_response(status, type_, message, headers)

    async def on_agentrl_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, AgentRLError)
        status = status_of(exc)
        if status == 500:
            log.error("%s %s failed: %r", request.method, request.url.path, exc)
        return respond(status, type(exc).__name__, str(exc), _tree_header(request, exc))

    async def on_invalid_request(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        problems = describe_problems(exc.errors())
        return respond(422, InvalidRequest.__name__, f"invalid request: {problems}")

    async def on_body_too_large(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, BodyTooLarge)
        return respond(413, REQUEST_TOO_LARGE, str(exc.detail))

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return respond(exc.status_code, HTTP_ERROR, str(exc.detail), exc.headers)

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s crashed", request.method, request.url.path)
        return respond(500, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}; see the service log")

    app.add_exception_handler(AgentRLError, on_agentrl_error)
    app.add_exception_handler(BodyTooLarge, on_body_too_large)
    app.add_exception_handler(RequestValidationError, on_invalid_request)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected)

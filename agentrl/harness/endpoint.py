"""The OpenAI-compatible endpoint a harness talks to: FastAPI under uvicorn, on 127.0.0.1, keyed per episode.

What this is: `ChatEndpoint`, an app and its server on a free loopback port, run as a task on the caller's
event loop (the loop the engine samples on, so a request awaits `engine.generate` directly). Each episode is
registered with its `EpisodeRecorder` and gets a random API key; the key names the episode, so one
episode's key can neither read nor add to another's record. Routes (every one needs `Authorization:
Bearer <episode key>`):

| route | what |
|---|---|
| `GET /v1/models`, `GET /v1/models/{id}` | the served model id (`rollout.harness.served_name`) |
| `POST /v1/chat/completions` | `messages`, `tools`, `tool_choice`, `temperature`, `top_p`, `max_tokens` /
|                             | `max_completion_tokens`, `stop`, `logprobs`, `seed`; no streaming, n = 1 |
| `GET /agentrl/session` | the episode's task, first observation, tools, examples and reset info |
| `POST /agentrl/step` | one env step: `{"tool_calls": [{"name", "arguments"}], "text": ""}` |
| `GET /agentrl/record` | the episode's own calls (token ids, log-probs) and steps |

Bounds: the server binds 127.0.0.1 only; bodies over `max_request_bytes` get 413 (checked on the declared
length and while reading); each episode's calls are rate-limited and bounded in concurrency, number
(`rollout.max_turns`) and context (`rollout.max_context_tokens`). Every error is an OpenAI error body,
`{"error": {"message", "type", "param", "code"}}`, with its status: 400 invalid request, 401 unknown key,
404, 409 episode over, 413, 429 rate, 500 an engine or endpoint failure, 503 env unavailable.

What this is not: a general OpenAI server (`agentrl serve` serves completions for evaluation), or the
harness runner (`agentrl.harness.runner`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from agentrl.agent.rollout_config import HarnessConfig
from agentrl.errors import INFRA_ERRORS, AgentRLError, ChatError, EpisodeOver
from agentrl.harness.chat import ChatFormat, parse_request
from agentrl.harness.recorder import EpisodeRecorder, RecordedCall
from agentrl.types import Action, ToolCall

LOOPBACK = "127.0.0.1"
_FORMATS: dict[int, tuple[Any, ChatFormat]] = {}


def chat_format(tokenizer: Any) -> ChatFormat:
    """The `ChatFormat` of a tokenizer, computed once per tokenizer object."""
    found = _FORMATS.get(id(tokenizer))
    if found is None or found[0] is not tokenizer:
        found = _FORMATS[id(tokenizer)] = (tokenizer, ChatFormat(tokenizer))
    return found[1]


def error_body(message: str, kind: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(error: ChatError) -> JSONResponse:
    headers = {"retry-after": "1"} if error.status == 429 else None
    body = error_body(error.message, error.kind, error.code, error.param)
    return JSONResponse(body, status_code=error.status, headers=headers)


class ChatEndpoint:
    """The endpoint's app and server; `async with ChatEndpoint(config) as endpoint` serves until the block
    ends. `register(recorder)` gives an episode its key; `base_url` is what OpenAI clients take."""

    def __init__(self, config: HarnessConfig | None = None) -> None:
        self.config = config or HarnessConfig()
        self.port = 0
        self._episodes: dict[str, EpisodeRecorder] = {}
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.app = create_app(self)

    @property
    def url(self) -> str:
        """The server's root (the `/agentrl/*` routes hang off it)."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (`OPENAI_BASE_URL`)."""
        return f"{self.url}/v1"

    def register(self, recorder: EpisodeRecorder) -> str:
        """A new episode's API key."""
        key = f"ep-{secrets.token_urlsafe(24)}"
        self._episodes[key] = recorder
        return key

    def unregister(self, key: str) -> None:
        self._episodes.pop(key, None)

    def recorder(self, request: Request) -> EpisodeRecorder:
        """The episode the request's bearer key names; `ChatError` 401 otherwise."""
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        found = self._episodes.get(key.strip()) if scheme.lower() == "bearer" else None
        if found is None:
            raise ChatError(
                "Incorrect API key provided: use the key this episode was given",
                code="invalid_api_key",
                status=401,
            )
        return found

    async def start(self) -> None:
        """Bind a free loopback port and serve on this event loop."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((LOOPBACK, 0))
        self.port = int(listener.getsockname()[1])
        config = uvicorn.Config(
            self.app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=2
        )
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[listener]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise RuntimeError("the harness endpoint stopped while starting")
            await asyncio.sleep(0.002)

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout=5)
        except TimeoutError:
            self._server.force_exit = True
            await self._task
        self._server = self._task = None

    async def __aenter__(self) -> ChatEndpoint:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the endpoint runs inside a training process that owns them."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def read_json(request: Request, limit: int) -> Any:
    """The request's JSON body, read up to `limit` bytes (413 beyond)."""
    declared = request.headers.get("content-length")
    too_large = ChatError(
        f"the request body is larger than {limit} bytes", code="request_too_large", status=413
    )
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks) or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ChatError(f"the request body is not valid JSON: {exc}") from None


def completion_body(call: RecordedCall, served_name: str, tokenizer: Any) -> dict[str, Any]:
    """The OpenAI chat.completion object of a recorded call (with an `agentrl` extension field)."""
    reply, request = call.reply, call.request
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": reply.finish_reason}
    choice["logprobs"] = (
        {
            "content": [
                _token_logprob(tokenizer, t, lp)
                for t, lp in zip(call.completion.token_ids, call.completion.logprobs, strict=True)
            ],
            "refusal": None,
        }
        if request.logprobs
        else None
    )
    prompt, completion = len(call.prompt_ids), len(call.completion.token_ids)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model or served_name,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
        "agentrl": {
            "call": call.index,
            "segment": call.segment,
            "continued": call.continued,
            "appended_prompt_tokens": len(call.new_ids),
        },
    }


def _token_logprob(tokenizer: Any, token: int, logprob: float) -> dict[str, Any]:
    piece = str(tokenizer.decode([token]))
    return {"token": piece, "logprob": logprob, "bytes": list(piece.encode()), "top_logprobs": []}


def parse_action(body: Any) -> Action:
    """An env action from `POST /agentrl/step`'s body: `{"tool_calls": [...], "text": ""}`, each call as
    `{"name", "arguments"}` or OpenAI's `{"function": {"name", "arguments"}}`."""
    if not isinstance(body, dict):
        raise ChatError("the body must be a JSON object with 'tool_calls' and optional 'text'")
    text = body.get("text") or ""
    raw_calls = body.get("tool_calls") or []
    if not isinstance(text, str) or not isinstance(raw_calls, list):
        raise ChatError("'text' must be a string and 'tool_calls' a list")
    calls = []
    for index, raw in enumerate(raw_calls):
        call = raw.get("function", raw) if isinstance(raw, dict) else None
        arguments = call.get("arguments", {}) if isinstance(call, dict) else None
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except json.JSONDecodeError:
                arguments = None
        if (
            not isinstance(call, dict)
            or not isinstance(call.get("name"), str)
            or not isinstance(arguments, dict)
        ):
            raise ChatError(f"tool_calls[{index}] must be {{'name': str, 'arguments': object}}", "tool_calls")
        calls.append(ToolCall(call["name"], arguments))
    return Action(text, tuple(calls))


def create_app(endpoint: ChatEndpoint) -> FastAPI:
    """The endpoint's routes (see the module docstring)."""
    app = FastAPI(title="agentrl harness endpoint", docs_url=None, redoc_url=None, openapi_url=None)
    config = endpoint.config

    @app.exception_handler(ChatError)
    async def chat_error(request: Request, exc: ChatError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(exc.detail), kind), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> JSONResponse:
        body = error_body(f"the endpoint failed: {type(exc).__name__}: {exc}", "server_error", "server_error")
        return JSONResponse(body, status_code=500)

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        endpoint.recorder(request)
        return {"object": "list", "data": [_model_card(config.served_name)]}

    @app.get("/v1/models/{model:path}")
    async def model(request: Request, model: str) -> dict[str, Any]:
        endpoint.recorder(request)
        if model != config.served_name:
            raise ChatError(
                f"The model '{model}' does not exist",
                "model",
                "model_not_found",
                status=404,
                kind="not_found_error",
            )
        return _model_card(model)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> dict[str, Any]:
        recorder = endpoint.recorder(request)
        chat_request = parse_request(await read_json(request, config.max_request_bytes))
        call = await recorder.chat_completion(chat_request)
        return completion_body(call, config.served_name, recorder.engine.tokenizer)

    @app.get("/agentrl/session")
    async def session(request: Request) -> dict[str, Any]:
        recorder = endpoint.recorder(request)
        start = recorder.start
        return {
            "task": dict(recorder.task),
            "observation": start.observation,
            "tools": start.tools,
            "examples": start.examples,
            "info": start.info,
        }

    @app.post("/agentrl/step")
    async def step(request: Request) -> dict[str, Any]:
        recorder = endpoint.recorder(request)
        action = parse_action(await read_json(request, config.max_request_bytes))
        try:
            result = await recorder.step(action)
        except EpisodeOver as exc:
            raise ChatError(str(exc), code="episode_over", status=409) from None
        except INFRA_ERRORS as exc:
            raise ChatError(str(exc), code="env_unavailable", status=503, kind="server_error") from None
        except ChatError:  # the recorder's own refusal (EpisodeClosed), answered as it is
            raise
        except AgentRLError as exc:
            raise ChatError(f"{type(exc).__name__}: {exc}", code="env_error") from None
        return {
            "observation": result.observation,
            "reward": result.reward,
            "terminated": result.terminated,
            "truncated": result.truncated,
            "info": result.info,
        }

    @app.get("/agentrl/record")
    async def record(request: Request) -> dict[str, Any]:
        return endpoint.recorder(request).record()

    return app


def _model_card(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "agentrl"}

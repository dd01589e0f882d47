"""`agentrl serve`: an OpenAI-compatible `/v1/completions` server over agentrl's own engine.

What this is: a small FastAPI app that serves a model (an alias, hub id or local folder, e.g. a run's
`final/`) for evaluation and for other tools: `GET /v1/models`, `POST /v1/completions` with the prompt as
text or as token ids, `logprobs`, `seed`, `stop`, and vLLM's `return_tokens_as_token_ids`, which the
`openai` engine uses to stay token-in/token-out. Binds 127.0.0.1 unless told otherwise.

What this is not: a production server (use vLLM on GPUs): no chat endpoint, no streaming, one sample
per request (`n` = 1).
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

from pydantic import BaseModel, Field


class CompletionRequest(BaseModel):
    """The subset of the OpenAI completions request agentrl serves."""

    model: str = ""
    prompt: str | list[int]
    max_tokens: int = Field(default=16, ge=1, le=32768)
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    logprobs: int | None = None
    seed: int | None = None
    return_tokens_as_token_ids: bool = False


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("serve", help="serve a model over an OpenAI-compatible /v1/completions API")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="alias, hub id or local folder")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from agentrl.agent.engines.hf import HFEngine
    from agentrl.model_config import ModelConfig
    from agentrl.models import load_model

    model, tokenizer = load_model(ModelConfig(name=args.model))
    app = create_app(HFEngine(model, tokenizer), args.model)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def create_app(engine: Any, served_name: str) -> Any:
    """The FastAPI app serving `engine` (anything with `tokenizer` and `async generate`)."""
    from fastapi import FastAPI

    from agentrl.agent.engines.base import SamplingParams

    app = FastAPI(title="agentrl serve", version="1")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": served_name, "object": "model", "owned_by": "agentrl"}]}

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest) -> dict[str, Any]:
        prompt = (
            body.prompt
            if isinstance(body.prompt, list)
            else engine.tokenizer.encode(body.prompt, add_special_tokens=False)
        )
        stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
        params = SamplingParams(body.temperature, body.top_p, body.max_tokens, stop, body.seed)
        completion = await engine.generate(prompt, params)
        return completion_response(served_name, len(prompt), completion, body)

    return app


def completion_response(
    served_name: str, prompt_tokens: int, completion: Any, body: CompletionRequest
) -> dict:
    """The OpenAI response object for one completion; pure."""
    tokens = (
        [f"token_id:{token}" for token in completion.token_ids]
        if body.return_tokens_as_token_ids
        else [str(token) for token in completion.token_ids]
    )
    choice: dict[str, Any] = {"index": 0, "text": completion.text, "finish_reason": completion.finish_reason}
    if body.logprobs is not None:
        choice["logprobs"] = {"tokens": tokens, "token_logprobs": list(completion.logprobs)}
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": served_name,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(completion.token_ids),
            "total_tokens": prompt_tokens + len(completion.token_ids),
        },
    }

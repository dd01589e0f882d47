"""The OpenAI-compatible engine: token-in/token-out sampling from any `/v1/completions` server.

What this is: `OpenAIEngine.generate(prompt_ids, params)` sends the token ids themselves as the prompt
(`"prompt": [ids]`, part of the OpenAI completions API), asks for the sampled tokens' log-probabilities
(`logprobs: 1`) and, the vLLM way, for the sampled tokens as ids (`return_tokens_as_token_ids`: each token
comes back as "token_id:N"). So no text is re-tokenised and the trainer sees exactly what was sampled.
`sampling.seed` is passed as the request's `seed`. Concurrent calls are independent HTTP requests (the
server batches them); at most `max_concurrency` are in flight.

A server that returns token strings rather than ids (plain OpenAI, some proxies) is still usable for
evaluation: the completion text is tokenised locally and `Completion.logprobs` are those the server
reported for its own tokens only when the counts agree, else 0.0. Such completions must not be trained on;
`exact_tokens` on the engine says which kind the last reply was.

What this is not: a weight-sync client. Training against such a server needs one that accepts weight
updates (e.g. vLLM's collective RPC); `agentrl train` uses the in-process engines.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
from transformers import PreTrainedTokenizerBase

from agentrl.agent.engines.base import Completion, SamplingParams, Weights
from agentrl.agent.engines.configs import OpenAIEngineConfig
from agentrl.agent.prompting import end_of_turn_ids
from agentrl.errors import ConfigError, ModelError

TOKEN_ID_PREFIX = "token_id:"


class OpenAIEngine:
    """Completions from an OpenAI-compatible server; prompts are rendered with `tokenizer` locally."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, config: OpenAIEngineConfig) -> None:
        if not config.model:
            raise ModelError("engine.openai.model is empty: name the served model (see its /v1/models)")
        self.tokenizer = tokenizer
        self.config = config
        self.stop_ids = end_of_turn_ids(tokenizer)
        self.exact_tokens = True
        key = os.environ.get(config.api_key_env, "") if config.api_key_env else ""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.AsyncClient(base_url=config.base_url, headers=headers, timeout=config.timeout_s)
        self._slots = asyncio.Semaphore(config.max_concurrency)

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        async with self._slots:
            response = await self._client.post(
                "/completions", json=request_body(self.config, prompt_ids, params)
            )
        if response.status_code != 200:
            raise ModelError(
                f"{self.config.base_url}/completions answered {response.status_code}: {response.text[:500]}"
            )
        return self._completion(response.json()["choices"][0])

    def set_eval(self) -> None:
        """Nothing to do: the server owns the weights."""

    @property
    def module(self) -> None:
        """None: the server owns the weights."""
        return None

    def load_weights(self, weights: Weights | None) -> None:
        raise ConfigError("engine.kind=openai cannot load weights: its server owns them; it only evaluates")

    def release_memory(self) -> None:
        """Nothing to release: the server owns its memory."""

    def retake_memory(self) -> None:
        """Nothing was released."""

    async def aclose(self) -> None:
        await self._client.aclose()

    def _completion(self, choice: Mapping[str, Any]) -> Completion:
        text = str(choice.get("text") or "")
        ids, logprobs = sampled_tokens(choice.get("logprobs") or {})
        self.exact_tokens = ids is not None
        if ids is None:
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
            logprobs = logprobs if len(logprobs) == len(ids) else [0.0] * len(ids)
        ended_turn = bool(ids) and ids[-1] in self.stop_ids
        if choice.get("finish_reason") == "length":
            return Completion(tuple(ids), tuple(logprobs), text, "length", ended_turn)
        return Completion(tuple(ids), tuple(logprobs), text, "stop", ended_turn)


def request_body(
    config: OpenAIEngineConfig, prompt_ids: Sequence[int], params: SamplingParams
) -> dict[str, Any]:
    """The /v1/completions request for one turn; pure."""
    body: dict[str, Any] = {
        "model": config.model,
        "prompt": list(prompt_ids),
        "max_tokens": params.max_new_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "logprobs": 1,
        "stop": list(params.stop) or None,
        "return_tokens_as_token_ids": True,  # vLLM: sampled tokens as "token_id:N"
        "include_stop_str_in_output": True,  # vLLM: keep the tokens that complete a stop string
        "skip_special_tokens": False,
    }
    if params.seed is not None:
        body["seed"] = params.seed
    return body


def sampled_tokens(logprobs: Mapping[str, Any]) -> tuple[list[int] | None, list[float]]:
    """(token ids, or None when the server sent token strings; their log-probs) of a choice; pure."""
    tokens = list(logprobs.get("tokens") or [])
    values = [float(value) if value is not None else 0.0 for value in logprobs.get("token_logprobs") or []]
    if tokens and all(isinstance(t, str) and t.startswith(TOKEN_ID_PREFIX) for t in tokens):
        return [int(t[len(TOKEN_ID_PREFIX) :]) for t in tokens], values
    return None, values

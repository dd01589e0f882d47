"""The Hugging Face engine: batched sampling with a transformers model, in-process, CPU or GPU.

What this is: `HFEngine.generate(prompt_ids, params)`, awaited concurrently by many episode coroutines.
Requests go to an asyncio queue; one batcher task takes the first request, gathers more for up to
`max_wait_s` (or until `max_batch`), left-pads the batch and runs `model.generate` in a worker thread so
the event loop keeps serving env I/O meanwhile. Each row is cut right after the first end-of-turn/eos token
or right after the token that completes a stop string; the sampled tokens are kept, never re-tokenised.
Log-probabilities are those of the sampler: log_softmax(logits / temperature) at the sampled ids (greedy
decoding reports temperature 1). Top-k is disabled, so with top_p = 1 this is exactly the distribution
sampled from; `Completion.first_token_entropy` is the entropy of that distribution at the first token.

The engine shares its weights with the trainer (`engine.model` is the module being optimised): no sync step.

What this is not: a serving engine. There is no KV-cache reuse across turns or paged attention; every call
re-encodes the full prompt. `output_logits` keeps [steps, batch, vocab] logits in memory for the batch
(about 0.8 GB at 32 x 128 tokens for SmolLM2 in fp32). For throughput, use the vLLM engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agentrl.agent.engines.base import Completion, InProcessWeights, SamplingParams
from agentrl.agent.engines.configs import HFEngineConfig
from agentrl.agent.engines.request_loop import Request, RequestLoop
from agentrl.agent.engines.sampler import token_entropy
from agentrl.agent.prompting import end_of_turn_ids
from agentrl.cpu import native_cpu_bf16


class HFEngine(InProcessWeights):
    """Token-in/token-out sampling from a transformers causal LM, batching concurrent callers."""

    model: PreTrainedModel

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        config: HFEngineConfig | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config = config or HFEngineConfig()
        self.stop_ids = end_of_turn_ids(tokenizer)
        self.pad_id = int(
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.stop_ids)
        )
        self._requests = RequestLoop(self._run_batcher, "hf-engine-batcher")

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        """One completion of `prompt_ids`; batched with whatever other calls are waiting."""
        return await self._requests.submit(prompt_ids, params)

    def close(self) -> None:
        """Stop the batcher; waiting callers get `CancelledError`."""
        self._requests.close()

    async def aclose(self) -> None:
        await self._requests.aclose()

    async def _run_batcher(self, queue: asyncio.Queue[Request]) -> None:
        while True:
            requests = await self._next_batch(queue)
            for params in dict.fromkeys(request.params for request in requests):
                group = [request for request in requests if request.params == params]
                await self._serve(group, params)

    async def _next_batch(self, queue: asyncio.Queue[Request]) -> list[Request]:
        """The first waiting request plus any arriving within `max_wait_s`, at most `max_batch`."""
        batch = [await queue.get()]
        deadline = asyncio.get_running_loop().time() + self.config.max_wait_s
        while len(batch) < self.config.max_batch:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0 and queue.empty():
                break
            try:
                batch.append(await asyncio.wait_for(queue.get(), timeout=max(remaining, 0.0)))
            except TimeoutError:
                break
        return [request for request in batch if not request.future.done()]

    async def _serve(self, requests: list[Request], params: SamplingParams) -> None:
        try:
            completions = await asyncio.to_thread(
                self.generate_batch, [r.prompt_ids for r in requests], params
            )
        except Exception as exc:  # the callers own the failure; the batcher must keep serving
            for request in requests:
                if not request.future.done():
                    request.future.set_exception(exc)
            return
        for request, completion in zip(requests, completions, strict=True):
            if not request.future.done():
                request.future.set_result(completion)

    def generate_batch(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        """Synchronous batched sampling: one `Completion` per prompt, in order."""
        self.set_eval()
        input_ids, attention_mask = left_pad(prompts, self.pad_id)
        input_ids, attention_mask = input_ids.to(self.model.device), attention_mask.to(self.model.device)
        temperature = params.temperature if params.temperature > 0 else 1.0
        if params.seed is not None:  # requests group by params, so a seeded request is sampled alone
            torch.manual_seed(params.seed)
        with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16, enabled=self._autocast_cpu):
            output = self.model.generate(  # type: ignore[operator]
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=params.max_new_tokens,
                do_sample=params.temperature > 0,
                temperature=temperature,
                top_p=params.top_p,
                top_k=0,
                eos_token_id=sorted(self.stop_ids),
                pad_token_id=self.pad_id,
                stop_strings=list(params.stop) or None,
                tokenizer=self.tokenizer,
                output_logits=True,
                return_dict_in_generate=True,
            )
        new_tokens = output.sequences[:, input_ids.shape[1] :].cpu()
        logprobs = sampled_logprobs(output.logits, new_tokens, temperature)
        first = output.logits[0].float().cpu()  # every prompt samples at least one token
        entropies = token_entropy(first, torch.full((len(prompts),), temperature)).tolist()
        return [
            self._completion(new_tokens[row].tolist(), logprobs[row].tolist(), params, entropies[row])
            for row in range(len(prompts))
        ]

    @property
    def _autocast_cpu(self) -> bool:
        return self.config.autocast_bf16 and self.model.device.type == "cpu" and native_cpu_bf16()

    def _completion(
        self, tokens: list[int], logprobs: list[float], params: SamplingParams, first_token_entropy: float
    ) -> Completion:
        end = cut_index(tokens, self.stop_ids, params.stop, self._decode)
        kept = tokens[:end]
        ended_turn = bool(kept) and kept[-1] in self.stop_ids
        stopped = ended_turn or _contains_stop(self._decode(kept), params.stop)
        return Completion(
            token_ids=tuple(kept),
            logprobs=tuple(logprobs[:end]),
            text=str(self.tokenizer.decode(kept, skip_special_tokens=True)),
            finish_reason="stop" if stopped else "length",
            ended_turn=ended_turn,
            first_token_entropy=first_token_entropy,
        )

    def _decode(self, tokens: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(tokens), skip_special_tokens=False))


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids [B, L] and attention_mask [B, L], prompts right-aligned (decoder-only models need that)."""
    width = max(len(prompt) for prompt in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        if prompt:
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[row, width - len(prompt) :] = 1
    return input_ids, attention_mask


def sampled_logprobs(
    logits: Sequence[torch.Tensor], tokens: torch.Tensor, temperature: float
) -> torch.Tensor:
    """[B, S] log_softmax(logits / T) at the sampled ids; `logits` is S tensors of [B, V] (raw, per step)."""
    columns = [
        torch.log_softmax(step.float().cpu() / temperature, dim=-1)
        .gather(1, tokens[:, index, None])
        .squeeze(1)
        for index, step in enumerate(logits)
    ]
    return torch.stack(columns, dim=1) if columns else torch.zeros((tokens.shape[0], 0))


def cut_index(
    tokens: Sequence[int],
    stop_ids: frozenset[int],
    stop: Sequence[str],
    decode: Callable[[Sequence[int]], str],
) -> int:
    """How many tokens to keep: through the first stop id, or through the token completing a stop string."""
    end = next((index + 1 for index, token in enumerate(tokens) if token in stop_ids), len(tokens))
    if not _contains_stop(decode(tokens[:end]), stop):
        return end
    # A stop string may span tokens: decode growing prefixes to find the token that completes it.
    return next(index + 1 for index in range(end) if _contains_stop(decode(tokens[: index + 1]), stop))


def _contains_stop(text: str, stop: Sequence[str]) -> bool:
    return any(string in text for string in stop)

"""The cached engine: CPU-efficient sampling for multi-turn episodes, same interface as `HFEngine`.

What this is: `CachedEngine.generate(prompt_ids, params)`, awaited concurrently by episode coroutines, and
`make_engine`, which picks it for Llama-family models and `HFEngine` otherwise. The runner still passes the
full token context every turn; the engine finds the longest cached token prefix (the episode's previous
turn, or the prompt prefix shared with other episodes) and prefills only the new tokens. A scheduler task
feeds requests to a `BatchScheduler` (see `scheduler.py`) and runs its steps in a worker thread, one decode
step at a time, so sequences join and leave the batch continuously and the event loop keeps serving env I/O.
Sampling matches `HFEngine`: temperature, top-p, top-k disabled, the global torch RNG, log-probs
log_softmax(logits / T) of the sampled ids (T = 1 for greedy), end-of-turn/eos and stop strings end a turn.

Like `HFEngine`, it samples with the very module the trainer optimises (`engine.model`), through a compute
copy of its weights (bf16 with dithered rounding, or fp32): `load_weights` after every update (the trainer
calls it) rebuilds that copy and empties the prefix cache. Before the update (`release_memory`) the batch
KV, the prefix cache and the compute copy are dropped, so the update's activations never sit beside them.
Parameter version counters are checked too, but they are not enough: torch's fused AdamW updates
parameters without bumping them.

What this is not: a GPU engine (use vLLM there) or a general model runner: non-Llama models are refused with
`ModelError` (use `make_engine` to fall back to `HFEngine`). In bf16 (the default where the CPU multiplies
bf16 natively) the sampler's log-probs differ slightly from an fp32 forward pass; the trainer recomputes them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agentrl.agent.engines import llama_kernels
from agentrl.agent.engines.base import Completion, InProcessWeights, SamplingParams, Weights
from agentrl.agent.engines.hf import HFEngine, HFEngineConfig
from agentrl.agent.engines.request_loop import Request, RequestLoop
from agentrl.agent.engines.scheduler import BatchScheduler, CachedEngineConfig, SchedulerStats
from agentrl.agent.prompting import end_of_turn_ids
from agentrl.errors import ModelError

__all__ = ["CachedEngine", "CachedEngineConfig", "make_engine"]


class CachedEngine(InProcessWeights):
    """Token-in/token-out sampling with cross-turn KV reuse and continuous batching (Llama models, CPU)."""

    model: PreTrainedModel

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        config: CachedEngineConfig | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config = config or CachedEngineConfig()
        self.stop_ids = end_of_turn_ids(tokenizer)
        self.scheduler = BatchScheduler(model, tokenizer, self.stop_ids, self.config)
        self._requests = RequestLoop(self._run, "cached-engine-scheduler", on_restart=self.scheduler.reset)

    def load_weights(self, weights: Weights | None) -> None:
        """New weights (or the module updated in place): the compute copy is rebuilt before the next step."""
        super().load_weights(weights)
        self.scheduler.invalidate_weights()

    def release_memory(self) -> None:
        """Before an update: the batch KV, the prefix cache and the compute copy of the weights are dropped
        (rebuilt at the next request) when no request is in flight (`BatchScheduler.release`), unless
        `engine.cached.release_for_update` is false."""
        if self.config.release_for_update:
            self.scheduler.release()

    def retake_memory(self) -> None:
        """Nothing to take back now: what `release_memory` dropped is rebuilt at the next request."""

    @property
    def stats(self) -> SchedulerStats:
        return self.scheduler.stats

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        """One completion of `prompt_ids`, decoded alongside every other running request."""
        return await self._requests.submit(prompt_ids, params)

    def generate_batch(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        """Synchronous sampling of all `prompts` together: one `Completion` per prompt, in order."""
        self.set_eval()
        handles = [self.scheduler.submit(prompt, params) for prompt in prompts]
        done = self.scheduler.run_to_completion()
        return [done[handle] for handle in handles]

    def close(self) -> None:
        """Stop the scheduler task; waiting and running callers get `CancelledError`."""
        self._requests.close()

    async def aclose(self) -> None:
        await self._requests.aclose()

    async def _run(self, queue: asyncio.Queue[Request]) -> None:
        """Admit what arrived, run one scheduler step in a thread, resolve finished futures; repeat."""
        futures: dict[int, asyncio.Future[Completion]] = {}
        try:
            while True:
                if not futures:
                    self._submit(await queue.get(), futures)
                    await asyncio.sleep(self.config.max_wait_s)  # let requests arriving together batch
                while not queue.empty():
                    self._submit(queue.get_nowait(), futures)
                self._drop_cancelled(futures)
                if not futures:
                    continue
                try:
                    finished = await asyncio.to_thread(self.scheduler.step)
                except Exception as exc:  # the callers own the failure; the scheduler must keep serving
                    self.scheduler.reset()
                    for future in futures.values():
                        if not future.done():
                            future.set_exception(exc)
                    futures.clear()
                    continue
                for handle, completion in finished:
                    waiter = futures.pop(handle, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(completion)
        finally:
            self.scheduler.reset()
            for future in futures.values():
                future.cancel()

    def _submit(self, request: Request, futures: dict[int, asyncio.Future[Completion]]) -> None:
        if request.future.done():
            return
        self.set_eval()
        try:
            futures[self.scheduler.submit(request.prompt_ids, request.params)] = request.future
        except ModelError as exc:
            request.future.set_exception(exc)

    def _drop_cancelled(self, futures: dict[int, asyncio.Future[Completion]]) -> None:
        """Stop decoding for callers that went away (e.g. an episode cancelled by its task group)."""
        for handle in [handle for handle, future in futures.items() if future.done()]:
            self.scheduler.cancel(handle)
            del futures[handle]


def make_engine(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    config: CachedEngineConfig | None = None,
    hf_config: HFEngineConfig | None = None,
) -> CachedEngine | HFEngine:
    """The cached engine for Llama-family models on CPU, else `HFEngine` (GPU, or other architectures)."""
    try:
        llama_kernels.check_supported(model)
    except ModelError:
        return HFEngine(model, tokenizer, hf_config)
    if model.device.type != "cpu":
        return HFEngine(model, tokenizer, hf_config)
    return CachedEngine(model, tokenizer, config)

"""The engines' typed configs, apart from the engines themselves.

What this is: `EngineConfig` (which engine samples) and the settings of each engine (`HFEngineConfig`,
`CachedEngineConfig`, `VLLMEngineConfig`, `OpenAIEngineConfig`), so that building a run config imports no
engine, kernel, torch or transformers code. Each engine module re-exports its own config.

What this is not: engine code; `agentrl/agent/engines/factory.py` builds the configured engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agentrl.errors import ConfigError

Precision = Literal["auto", "bfloat16", "float32"]
Rounding = Literal["dither", "nearest"]
SLEEP_LEVELS = (0, 1, 2)


@dataclass(frozen=True)
class HFEngineConfig:
    """Batching and precision of the HF engine.

    max_batch:     the most requests sampled together in one `model.generate` call
    max_wait_s:    how long the batcher waits for more requests after the first one arrives
    autocast_bf16: sample under bfloat16 autocast (faster on CPUs with AMX/AVX-512 BF16; ignored
                   on CPUs without native bf16, where it is far slower); the logprobs then differ slightly
                   from an fp32 forward pass of the same weights
    """

    max_batch: int = 32
    max_wait_s: float = 0.02
    autocast_bf16: bool = False


@dataclass(frozen=True)
class CachedEngineConfig:
    """Batching, caching and precision of the cached engine.

    max_batch:         sequences decoded together; more requests wait for a free row
    max_cached_tokens: token budget of the prefix cache (KV of past turns and shared prefixes), LRU-evicted
    precision:         auto (bf16 when the CPU has native bf16 matmuls, else fp32) | bfloat16 | float32
    rounding:          how the fp32 weights become the bf16 compute copy after each update: "dither"
                       (stochastic rounding against a fixed random threshold per weight: the copy moves by
                       the update in expectation, so small learning-rate steps reach the sampler; see
                       `llama_kernels.round_bf16`) or "nearest" (round to nearest, which hides steps smaller
                       than half a bf16 ulp: most weights at lr 1e-5)
    min_shared_prefix: requests admitted together share their common prefix once it is this long
    max_prefill_waste: padded prefill tokens allowed per real token when suffixes of different lengths are
                       prefilled in one batch (more waste splits the batch)
    max_wait_s:        when idle, how long the async engine gathers arriving requests before starting
    deterministic:     decode every request that carries a sampler seed (`SamplingParams.seed`: held-out
                       evaluations always, training rollouts with `rollout.seeded_sampling=true`)
                       batch-invariantly, so its tokens and log-probs depend only on its prompt, seed and the
                       weights, not on what it is batched with or when it arrives (`llama_kernels.forward(
                       exact=True)`: slower steps while such a request runs); false: a seed fixes only the
                       sampler's random numbers
    release_for_update: drop the batch KV, the prefix cache and the compute copy of the weights before each
                       update (rebuilt at the next request), so that the update's activations do not sit
                       beside them; false keeps them (bench/memory.py measures what it saves)
    """

    max_batch: int = 32
    max_cached_tokens: int = 32_768
    precision: Precision = "auto"
    rounding: Rounding = "dither"
    min_shared_prefix: int = 16
    max_prefill_waste: float = 0.5
    max_wait_s: float = 0.005
    deterministic: bool = True
    release_for_update: bool = True

    def __post_init__(self) -> None:
        if self.precision not in ("auto", "bfloat16", "float32"):
            raise ConfigError(
                f"engine.cached.precision {self.precision!r} is unknown; use auto, bfloat16 or float32"
            )
        if self.rounding not in ("dither", "nearest"):
            raise ConfigError(f"engine.cached.rounding {self.rounding!r} is unknown; use dither or nearest")


@dataclass(frozen=True)
class VLLMEngineConfig:
    """The colocated vLLM engine.

    gpu_memory_utilization: share of the GPU vLLM takes for its weights and KV cache; the trainer's model,
                            gradients, optimiser state and activations must fit in the rest
    dtype:                  vLLM's weights and compute: bfloat16 | float16 | float32 (the trainer keeps
                            `model.dtype`; the sampler/trainer log-prob gap is logged every step)
    max_model_len:          the longest prompt + completion in tokens (0: the model's own limit)
    max_num_seqs:           sequences vLLM decodes together
    enforce_eager:          no CUDA graphs (faster start, slower decoding)
    enable_prefix_caching:  reuse the KV of shared prefixes (system prompt, earlier turns); reset after
                            every weight sync
    seed:                   vLLM's own RNG seed (requests without a `seed` draw from it)
    max_wait_s:             when idle, how long the engine gathers arriving requests before stepping
    sleep_level:            0: vLLM keeps its GPU memory during updates; 1: its KV cache is freed and its
                            weights offloaded to CPU RAM for each update; 2: both freed (they are reloaded
                            after the update anyway: the cheapest for RL). 1 and 2 need trainer.async_mode=
                            false (async rollouts sample during updates)
    batch_invariant:        vLLM's batch-invariant mode (`VLLM_BATCH_INVARIANT=1`, set before vLLM starts):
                            a seeded request then samples the same tokens whatever it is batched with, as
                            the cached engine's `deterministic` does; needs a vLLM that has the mode and a
                            GPU it supports (vLLM's docs: NVIDIA compute capability 8.0+); slower decoding
    """

    gpu_memory_utilization: float = 0.4
    dtype: str = "bfloat16"
    max_model_len: int = 0
    max_num_seqs: int = 256
    enforce_eager: bool = False
    enable_prefix_caching: bool = True
    seed: int = 0
    max_wait_s: float = 0.005
    sleep_level: int = 0
    batch_invariant: bool = False

    def __post_init__(self) -> None:
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError("engine.vllm.gpu_memory_utilization must be in (0, 1]")
        if self.dtype not in ("bfloat16", "float16", "float32"):
            raise ConfigError(
                f"engine.vllm.dtype {self.dtype!r} is unknown; use bfloat16, float16 or float32"
            )
        if self.max_model_len < 0 or self.max_num_seqs < 1:
            raise ConfigError("engine.vllm.max_model_len must be >= 0 and engine.vllm.max_num_seqs >= 1")
        if self.sleep_level not in SLEEP_LEVELS:
            raise ConfigError(
                f"engine.vllm.sleep_level must be 0 (off), 1 (offload weights) or 2 (discard weights), "
                f"got {self.sleep_level!r}"
            )


@dataclass(frozen=True)
class OpenAIEngineConfig:
    """Where the server is and how hard to push it.

    base_url:        the API root, e.g. http://127.0.0.1:8000/v1
    model:           the served model name (`/v1/models` lists them)
    api_key_env:     environment variable holding the bearer key ("" sends none)
    timeout_s:       per request
    max_concurrency: requests in flight at once
    """

    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 600.0
    max_concurrency: int = 64


@dataclass(frozen=True)
class EngineConfig:
    """Which engine samples, and the settings of each.

    kind: "auto" (the cached engine for Llama-family models on CPU, else hf), "cached" (per-episode KV cache
          across turns, shared prefixes, continuous batching; agent/engines/cached.py), "hf" (transformers
          `generate`, batched), "vllm" (vLLM on a CUDA GPU, colocated with the trainer, weights loaded into it
          after each update; `pip install 'agentrl[vllm]'`; agent/engines/vllm.py), or "openai" (any
          OpenAI-compatible server: evaluation only, `agentrl eval`).
    """

    kind: str = "auto"
    hf: HFEngineConfig = field(default_factory=HFEngineConfig)
    cached: CachedEngineConfig = field(default_factory=CachedEngineConfig)
    vllm: VLLMEngineConfig = field(default_factory=VLLMEngineConfig)
    openai: OpenAIEngineConfig = field(default_factory=OpenAIEngineConfig)

    def __post_init__(self) -> None:
        if self.kind not in ENGINE_KINDS:
            raise ValueError(f"engine.kind {self.kind!r} is unknown; use one of {', '.join(ENGINE_KINDS)}")


ENGINE_KINDS = ("auto", "cached", "hf", "vllm", "openai")
ENTROPY_KINDS = ("auto", "cached", "hf")
"""The engine kinds whose completions carry `first_token_entropy` (they see the logits; "auto" is one of
the two); vllm and openai return only the sampled tokens' log-probs."""

"""Build the engine a run's config asks for.

What this is: `build_engine`, the one place that turns `engine.kind` (and the model config) into a
`PolicyEngine`: the cached engine for Llama-family models on CPU, the HF engine otherwise or for LoRA (the
cached engine's kernels read plain weights), vLLM on a CUDA GPU, or an OpenAI-compatible server for
evaluation. Engine modules are imported only when chosen, so a config that names vLLM costs nothing
elsewhere.

What this is not: engine code, or the choice of what to train (the trainer takes the engine's `module`).
"""

from __future__ import annotations

from agentrl.agent.engines.base import PolicyEngine
from agentrl.agent.engines.configs import EngineConfig
from agentrl.errors import ConfigError
from agentrl.model_config import ModelConfig
from agentrl.models import has_adapters, load_model, load_tokenizer


def build_engine(
    engines: EngineConfig, model: ModelConfig, *, trains: bool, nproc: int = 1, async_mode: bool = False
) -> PolicyEngine:
    """The configured engine; `trains` is False for a held-out evaluation run (`agentrl eval`)."""
    if engines.kind == "openai":
        if trains:
            raise ConfigError("engine.kind=openai can evaluate but not train (its server owns the weights)")
        from agentrl.agent.engines.openai import OpenAIEngine

        return OpenAIEngine(load_tokenizer(model), engines.openai)  # prompts are rendered here
    if engines.kind == "vllm":  # checks for vllm and a GPU before loading anything
        from agentrl.agent.engines.vllm import create_vllm_engine

        if engines.vllm.sleep_level and async_mode:
            raise ConfigError(
                "engine.vllm.sleep_level > 0 needs trainer.async_mode=false: async rollouts sample while "
                "the update runs, so vLLM cannot give its memory up; set engine.vllm.sleep_level=0"
            )
        return create_vllm_engine(model, engines.vllm, nproc=nproc)
    from agentrl.agent.engines.cached import CachedEngine, make_engine
    from agentrl.agent.engines.hf import HFEngine

    module, tokenizer = load_model(model)
    if engines.kind == "hf" or has_adapters(module):  # LoRA: the cached engine's kernels read plain weights
        return HFEngine(module, tokenizer, engines.hf)
    if engines.kind == "cached":
        return CachedEngine(module, tokenizer, engines.cached)
    return make_engine(module, tokenizer, engines.cached, engines.hf)

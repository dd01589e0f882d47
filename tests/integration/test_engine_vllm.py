"""VLLMEngine on a real GPU with the real SmolLM2-135M: token-in/token-out generation, sampler log-probs
against an HF forward pass of the trainer's module, per-request seeds, and a weight sync that changes the
greedy output and, restored, brings it back, and sleep mode (levels 1 and 2: GPU memory freed, the same greedy
output after the wake). Skipped (with the reason shown) without CUDA or vllm; the
engine's own logic is covered everywhere by tests/unit/test_engine_vllm_logic.py."""

from __future__ import annotations

import asyncio
import importlib.util
import math
from collections.abc import Iterator, Sequence
from dataclasses import replace

import pytest
import torch
from tiny_models import EXAMPLES, TOOLS

from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.engines.vllm import VLLMEngine, VLLMEngineConfig, create_vllm_engine
from agentrl.agent.prompting import render_first_prompt
from agentrl.models import ModelConfig

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None,
        reason="needs a CUDA GPU and vllm (pip install 'agentrl[vllm]'); the engine logic is unit-tested",
    ),
]

QUESTIONS = ["What is 3+5?", "What is 7*6?", "What is 10-4?", "What is 9/3?"]
# bf16 vLLM against the fp32 trainer module: per-token log-prob gaps of a few hundredths are normal
MEAN_ABS_TOLERANCE = 0.05


@pytest.fixture(scope="module")
def engine() -> Iterator[VLLMEngine]:
    config = VLLMEngineConfig(
        gpu_memory_utilization=0.3, max_model_len=2048, enforce_eager=True, sleep_level=1
    )
    built = create_vllm_engine(ModelConfig(dtype="float32"), config)
    yield built
    built.close()


def prompts(engine: VLLMEngine) -> list[list[int]]:
    return [render_first_prompt(engine.tokenizer, TOOLS, EXAMPLES, question) for question in QUESTIONS]


def generate_all(engine: VLLMEngine, prompt_list: Sequence[Sequence[int]], params: SamplingParams):
    async def run() -> list[Completion]:
        return list(await asyncio.gather(*(engine.generate(p, params) for p in prompt_list)))

    return asyncio.run(run())


def trainer_logprobs(engine: VLLMEngine, prompt: Sequence[int], completion: Completion, temperature: float):
    """[C] log_softmax(logits / T) of the completion under the trainer's module (one unpadded pass)."""
    device = next(engine.model.parameters()).device
    ids = torch.tensor([[*prompt, *completion.token_ids]], device=device)
    with torch.inference_mode():
        logits = engine.model(ids).logits[0, len(prompt) - 1 : -1].float()
    target = torch.tensor(completion.token_ids, device=device)[:, None]
    return torch.log_softmax(logits / temperature, dim=-1).gather(1, target).squeeze(1).cpu()


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_tokens_in_tokens_out_with_logprobs_matching_the_trainer(engine: VLLMEngine, temperature: float):
    params = SamplingParams(temperature=temperature, max_new_tokens=32, seed=11)
    prompt_list = prompts(engine)
    completions = generate_all(engine, prompt_list, params)
    gaps = []
    for prompt, completion in zip(prompt_list, completions, strict=True):
        assert completion.token_ids and len(completion.token_ids) == len(completion.logprobs) <= 32
        assert all(math.isfinite(value) and value <= 0.0 for value in completion.logprobs)
        assert completion.finish_reason in ("stop", "length")
        assert completion.ended_turn == (completion.token_ids[-1] in engine.stop_ids)
        expected = trainer_logprobs(engine, prompt, completion, temperature or 1.0)
        gaps.append((torch.tensor(completion.logprobs) - expected).abs())
    assert float(torch.cat(gaps).mean()) < MEAN_ABS_TOLERANCE


def test_a_seeded_request_repeats_whatever_it_is_batched_with(engine: VLLMEngine) -> None:
    first, *others = prompts(engine)
    params = SamplingParams(temperature=1.0, max_new_tokens=24, seed=3)
    alone = generate_all(engine, [first], params)[0]
    batched = generate_all(engine, [first, *others], params)[0]
    assert alone.token_ids == batched.token_ids


def test_a_weight_sync_changes_greedy_output_and_restoring_brings_it_back(engine: VLLMEngine) -> None:
    greedy = SamplingParams(temperature=0.0, max_new_tokens=24)
    prompt_list = prompts(engine)
    before = [c.token_ids for c in generate_all(engine, prompt_list, greedy)]
    saved = {name: tensor.detach().clone() for name, tensor in engine.model.state_dict().items()}
    with torch.no_grad():
        for layer in engine.model.model.layers:  # attention and MLP outputs gone: a different policy
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    engine.load_weights(None)  # the trainer updated the module in place
    changed = [c.token_ids for c in generate_all(engine, prompt_list, greedy)]
    assert changed != before
    engine.load_weights(saved)
    assert [c.token_ids for c in generate_all(engine, prompt_list, greedy)] == before


@pytest.mark.parametrize("level", [1, 2])
def test_sleep_frees_gpu_memory_and_the_wake_samples_as_before(engine: VLLMEngine, level: int) -> None:
    greedy = SamplingParams(temperature=0.0, max_new_tokens=24)
    prompt_list = prompts(engine)
    before = [c.token_ids for c in generate_all(engine, prompt_list, greedy)]
    engine.config = replace(engine.config, sleep_level=level)
    free_awake = torch.cuda.mem_get_info()[0]
    engine.sleep()
    assert engine.asleep and torch.cuda.mem_get_info()[0] > free_awake + 256 * 2**20  # at least the KV cache
    engine.load_weights(None)  # wakes with the module's weights
    assert not engine.asleep
    assert [c.token_ids for c in generate_all(engine, prompt_list, greedy)] == before
    engine.sleep()  # a request wakes it too, with the trainer module's weights
    assert [c.token_ids for c in generate_all(engine, prompt_list, greedy)] == before

"""HFEngine on real transformers models: a tiny randomly initialised Llama (seconds) for batching and
bookkeeping, and the real SmolLM2-135M (slow) for sampler log-probabilities against a forward pass; plus
model loading (alias conversion into a fresh cache is slow).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import pytest
import torch
from tiny_models import EXAMPLES, TOOLS, tiny_llama
from tiny_tokenizers import byte_tokenizer
from transformers import PreTrainedModel

from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.engines.hf import HFEngine, HFEngineConfig, cut_index, left_pad
from agentrl.agent.prompting import render_first_prompt
from agentrl.errors import ConfigError, ModelError
from agentrl.model_config import ModelConfig
from agentrl.models import alias_cache_path, load_model

QUESTIONS = ["What is 3+5?", "What is 7*6?", "What is 10-4?", "What is 9/3?"]


@pytest.fixture(scope="module")
def tiny() -> HFEngine:
    model = tiny_llama(hidden=32)
    return HFEngine(model, byte_tokenizer(), HFEngineConfig(max_batch=3, max_wait_s=0.05))


def prompts_for(engine: HFEngine) -> list[list[int]]:
    return [render_first_prompt(engine.tokenizer, TOOLS, EXAMPLES, question) for question in QUESTIONS]


def recomputed_logprobs(
    model: PreTrainedModel, prompt: Sequence[int], completion: Completion, temperature: float
):
    """[C] log-probs of the completion under one unpadded forward pass over prompt + completion."""
    ids = torch.tensor([[*prompt, *completion.token_ids]])
    with torch.inference_mode():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    target = torch.tensor(completion.token_ids)[:, None]
    return torch.log_softmax(logits / temperature, dim=-1).gather(1, target).squeeze(1)


def assert_well_formed(completion: Completion, params: SamplingParams, engine: HFEngine) -> None:
    stop_ids, engine_decode = engine.stop_ids, engine.tokenizer.decode
    assert len(completion.token_ids) == len(completion.logprobs) <= params.max_new_tokens
    assert all(math.isfinite(value) and value <= 0.0 for value in completion.logprobs)
    assert completion.ended_turn == (completion.token_ids[-1] in stop_ids)
    assert not any(token in stop_ids for token in completion.token_ids[:-1])
    if completion.finish_reason == "length":
        assert len(completion.token_ids) == params.max_new_tokens
    else:
        before_last = engine_decode(list(completion.token_ids[:-1]))
        assert completion.ended_turn or any(
            s in completion.text and s not in before_last for s in params.stop
        )


def test_left_pad_right_aligns_prompts() -> None:
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_cut_index_keeps_the_end_token_or_the_stop_string_completing_token() -> None:
    tokenizer = byte_tokenizer()
    end = tokenizer.eos_token_id

    def decode(tokens: Sequence[int]) -> str:
        return str(tokenizer.decode(list(tokens)))

    text = tokenizer.encode("ab</tool_call>cd", add_special_tokens=False)
    assert decode(text[: cut_index(text, frozenset({end}), ("</tool_call>",), decode)]) == "ab</tool_call>"
    assert cut_index([*text[:2], end, *text[2:]], frozenset({end}), ("</tool_call>",), decode) == 3
    assert cut_index(text, frozenset({end}), (), decode) == len(text)
    assert cut_index(text, frozenset({end}), ("zz",), decode) == len(text)


def test_concurrent_requests_are_batched_and_logprobs_match_a_forward_pass(tiny: HFEngine) -> None:
    params = SamplingParams(temperature=0.7, max_new_tokens=12)
    batch_sizes: list[int] = []
    generate_batch = tiny.generate_batch

    def recording(prompts: Sequence[Sequence[int]], p: SamplingParams) -> list[Completion]:
        batch_sizes.append(len(prompts))
        return generate_batch(prompts, p)

    tiny.generate_batch = recording  # type: ignore[method-assign, assignment]
    prompts = prompts_for(tiny) + [prompts_for(tiny)[0][:40]]  # lengths differ, so rows are left-padded

    async def run() -> list[Completion]:
        try:
            return list(await asyncio.gather(*(tiny.generate(p, params) for p in prompts)))
        finally:
            await tiny.aclose()

    try:
        completions = asyncio.run(run())
    finally:
        del tiny.generate_batch
    assert sorted(batch_sizes) == [2, 3]
    for prompt, completion in zip(prompts, completions, strict=True):
        assert_well_formed(completion, params, tiny)
        expected = recomputed_logprobs(tiny.model, prompt, completion, params.temperature)
        assert torch.allclose(torch.tensor(completion.logprobs), expected, atol=1e-4)


def test_requests_with_different_params_are_not_mixed_and_greedy_is_deterministic(tiny: HFEngine) -> None:
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    sampled = SamplingParams(temperature=1.0, max_new_tokens=3)
    prompt = prompts_for(tiny)[1]

    async def run() -> list[Completion]:
        try:
            return list(
                await asyncio.gather(
                    tiny.generate(prompt, greedy),
                    tiny.generate(prompt, sampled),
                    tiny.generate(prompt, greedy),
                )
            )
        finally:
            await tiny.aclose()

    first, other, second = asyncio.run(run())
    assert first.token_ids == second.token_ids and len(first.token_ids) <= 6 and len(other.token_ids) <= 3
    expected = recomputed_logprobs(tiny.model, prompt, first, temperature=1.0)
    assert torch.allclose(torch.tensor(first.logprobs), expected, atol=1e-4)


def test_the_engine_survives_event_loop_changes_and_failed_batches(tiny: HFEngine) -> None:
    params = SamplingParams(max_new_tokens=2)

    async def bad_then_good() -> Completion:
        with pytest.raises(Exception):  # noqa: B017 - whatever torch raises for an out-of-vocab id
            await tiny.generate([10_000], params)
        return await tiny.generate([1, 2, 3], params)

    for _ in range(2):  # a fresh asyncio.run each time: the batcher follows the running loop
        assert len(asyncio.run(bad_then_good()).token_ids) <= 2
    tiny.close()


@pytest.mark.slow
def test_smollm2_batch_of_four_concurrent_requests_matches_a_forward_pass() -> None:
    model, tokenizer = load_model(ModelConfig())
    engine = HFEngine(model, tokenizer)
    params = SamplingParams(temperature=1.0, max_new_tokens=40)
    prompts = prompts_for(engine)

    async def run() -> list[Completion]:
        try:
            return list(await asyncio.gather(*(engine.generate(p, params) for p in prompts)))
        finally:
            await engine.aclose()

    completions = asyncio.run(run())
    assert len(completions) == 4
    for prompt, completion in zip(prompts, completions, strict=True):
        assert_well_formed(completion, params, engine)
        expected = recomputed_logprobs(model, prompt, completion, params.temperature)
        assert torch.allclose(torch.tensor(completion.logprobs), expected, atol=1e-3)


def test_bad_model_names_and_dtypes_say_what_to_use() -> None:
    with pytest.raises(ModelError, match="use an alias"):
        load_model(ModelConfig(name="/nonexistent/model"))
    with pytest.raises(ConfigError, match="float32"):
        load_model(ModelConfig(dtype="int3"))


@pytest.mark.slow
def test_alias_conversion_writes_one_complete_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTRL_CACHE_DIR", str(tmp_path))
    model, tokenizer = load_model(ModelConfig(dtype="bfloat16"))
    folder = alias_cache_path("smollm2-135m-instruct")
    assert folder == tmp_path / "models" / "smollm2-135m-instruct"
    assert [entry.name for entry in folder.parent.iterdir()] == [folder.name]  # no staging left behind
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        entry.name for entry in folder.iterdir()
    }
    assert "quantization_config" not in (folder / "config.json").read_text()
    written = (folder / "model.safetensors").stat().st_mtime_ns
    again, _ = load_model(ModelConfig())
    assert (folder / "model.safetensors").stat().st_mtime_ns == written
    assert model.dtype == torch.bfloat16 and again.dtype == torch.float32
    assert tokenizer.eos_token == "<|im_end|>"

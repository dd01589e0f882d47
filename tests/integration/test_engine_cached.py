"""CachedEngine on the real SmolLM2-135M (slow: it loads the model): greedy tokens identical to HFEngine over
two turns in fp32, turn two prefilling only the new tokens, sampler log-probs against an fp32 forward pass
(fp32 and bf16), requests arriving at different times, and the "</tool_call>" stop string.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
import torch
from exact_kernels import play_row
from tiny_models import EXAMPLES, TOOLS
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agentrl.agent.engines.base import Completion, SamplingParams
from agentrl.agent.engines.cached import CachedEngine, CachedEngineConfig
from agentrl.agent.engines.hf import HFEngine
from agentrl.agent.prompting import render_first_prompt, render_observation_delta
from agentrl.model_config import ModelConfig
from agentrl.models import load_model

pytestmark = pytest.mark.slow

QUESTIONS = ["What is 3+5?", "What is 7*6?", "What is 10-4?"]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=24)
# bf16 weights and activations shift log-probs by about 0.02 on average for this model; fp32 by ~1e-5.
FP32_TOLERANCE, BF16_MEAN_TOLERANCE = 1e-3, 0.1


@pytest.fixture(scope="module")
def smollm2() -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    return load_model(ModelConfig())


def first_prompts(tokenizer: PreTrainedTokenizerBase) -> list[list[int]]:
    return [render_first_prompt(tokenizer, TOOLS, EXAMPLES, question) for question in QUESTIONS]


def forward_logprobs(model: PreTrainedModel, prompt: Sequence[int], completion: Completion) -> torch.Tensor:
    """[C] fp32 log-probs (temperature 1) of the completion from one forward pass over prompt + completion."""
    ids = torch.tensor([[*prompt, *completion.token_ids]])
    with torch.inference_mode():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(completion.token_ids)[:, None]).squeeze(1)


def test_two_greedy_turns_match_hf_token_for_token_and_reuse_the_cache(smollm2) -> None:
    model, tokenizer = smollm2
    engine = CachedEngine(model, tokenizer, CachedEngineConfig(precision="float32"))
    naive = HFEngine(model, tokenizer)
    prompts = first_prompts(tokenizer)
    first = engine.generate_batch(prompts, GREEDY)
    assert [c.token_ids for c in first] == [c.token_ids for c in naive.generate_batch(prompts, GREEDY)]

    deltas = [render_observation_delta(tokenizer, "8", c.ended_turn) for c in first]
    second_prompts = [[*p, *c.token_ids, *d] for p, c, d in zip(prompts, first, deltas, strict=True)]
    before = engine.stats.prefilled_tokens
    second = engine.generate_batch(second_prompts, GREEDY)
    # (b) only the new tokens are prefilled: the last sampled token of turn one plus the observation delta
    assert engine.stats.prefilled_tokens - before == sum(1 + len(d) for d in deltas)
    # (a) identical tokens to transformers generate re-prefilling the whole context
    assert [c.token_ids for c in second] == [
        c.token_ids for c in naive.generate_batch(second_prompts, GREEDY)
    ]
    for prompt, completion in zip(second_prompts, second, strict=True):
        assert torch.allclose(
            torch.tensor(completion.logprobs),
            forward_logprobs(model, prompt, completion),
            atol=FP32_TOLERANCE,
        )


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_sampled_logprobs_match_an_fp32_forward_pass(smollm2, precision: str) -> None:
    model, tokenizer = smollm2
    engine = CachedEngine(model, tokenizer, CachedEngineConfig(precision=precision))  # type: ignore[arg-type]
    prompts = first_prompts(tokenizer)
    torch.manual_seed(0)
    completions = engine.generate_batch(prompts, SamplingParams(temperature=1.0, max_new_tokens=24))
    errors = torch.cat(
        [
            (torch.tensor(c.logprobs) - forward_logprobs(model, p, c)).abs()
            for p, c in zip(prompts, completions, strict=True)
        ]
    )
    if precision == "float32":
        assert float(errors.max()) < FP32_TOLERANCE
    else:
        assert float(errors.mean()) < BF16_MEAN_TOLERANCE


def test_requests_arriving_at_different_times_complete_like_alone_and_stop_at_tool_call_end(smollm2) -> None:
    model, tokenizer = smollm2
    engine = CachedEngine(model, tokenizer, CachedEngineConfig(precision="float32"))
    call = '<tool_call>\n{"name": "python", "arguments": {"code": "print(3+5)"}}\n'
    prompts = first_prompts(tokenizer)
    # the first request is already inside a tool call: the model closes it, and the stop string ends the turn
    prompts[0] = [*prompts[0], *tokenizer.encode(call, add_special_tokens=False)]
    params = SamplingParams(temperature=0.0, max_new_tokens=40)

    async def late(prompt: list[int], delay: float) -> Completion:
        await asyncio.sleep(delay)
        return await engine.generate(prompt, params)

    async def run() -> list[Completion]:
        try:
            return list(await asyncio.gather(*(late(p, 0.3 * i) for i, p in enumerate(prompts))))
        finally:
            await engine.aclose()

    completions = asyncio.run(run())
    alone = [engine.generate_batch([p], params)[0] for p in prompts]
    assert [c.token_ids for c in completions] == [c.token_ids for c in alone]
    closing = completions[0]
    assert (
        closing.text.endswith("</tool_call>") and closing.finish_reason == "stop" and not closing.ended_turn
    )
    assert "</tool_call>" not in tokenizer.decode(list(closing.token_ids[:-1]))


def test_a_seeded_request_is_bit_identical_alone_among_31_others_and_arriving_mid_decode(smollm2) -> None:
    """engine.cached.deterministic (the default) in bf16, the precision the engine picks on bf16 CPUs."""
    model, tokenizer = smollm2
    config = CachedEngineConfig(precision="bfloat16")
    prompts = [render_first_prompt(tokenizer, TOOLS, EXAMPLES, f"What is {i}*{i + 3}?") for i in range(32)]
    seeded = SamplingParams(temperature=1.0, max_new_tokens=24, stop=(), seed=7)
    alone = CachedEngine(model, tokenizer, config).generate_batch([prompts[0]], seeded)[0]

    def other(index: int) -> SamplingParams:
        return SamplingParams(
            temperature=0.7, max_new_tokens=8 + index, stop=(), seed=index if index % 2 else None
        )

    batched = CachedEngine(model, tokenizer, config)
    batch_params = [seeded] + [other(i) for i in range(1, 32)]
    handles = [batched.scheduler.submit(p, params) for p, params in zip(prompts, batch_params, strict=True)]
    batched.set_eval()
    among_others = batched.scheduler.run_to_completion()[handles[0]]

    late = CachedEngine(model, tokenizer, config)
    late.set_eval()
    for index in range(1, 9):
        late.scheduler.submit(prompts[index], other(index))
    for _ in range(6):
        late.scheduler.step()
    handle = late.scheduler.submit(prompts[0], seeded)
    mid_decode = late.scheduler.run_to_completion()[handle]

    for completion in (among_others, mid_decode):
        assert completion.token_ids == alone.token_ids
        assert completion.logprobs == alone.logprobs


def test_exact_kernels_give_the_same_kv_and_logits_after_prefill_or_decode_on_the_real_model(smollm2) -> None:
    """The exact kernels (`llama_kernels.forward(exact=True)`) in bf16 with SmolLM2's grouped heads: a row's
    K/V and last logits are the same whether its tokens were prefilled or decoded one by one, alone or beside
    rows that attend over more key blocks. (A tiny random model missed a difference this catches: decode
    steps' 3 query rows per KV head rounded differently from the same rows inside a prefill.)"""
    from agentrl.agent.engines import llama_kernels as kernels

    model, _ = smollm2
    weights = kernels.LlamaWeights.from_model(model, torch.bfloat16, pack=True)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, weights.embed.shape[0], (160,), generator=generator)

    with torch.inference_mode():
        reference = play_row(weights, tokens, generator, 1, len(tokens) - 1)
        for rows, prefill, longer in ((1, 130, 0), (3, 150, 600), (2, 60, 0)):
            logits, kv = play_row(weights, tokens, generator, rows, prefill, longer)
            assert torch.equal(logits, reference[0]), (rows, prefill, longer)
            assert torch.equal(kv, reference[1]), (rows, prefill, longer)
